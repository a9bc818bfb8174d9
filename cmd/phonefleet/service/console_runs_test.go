package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// runState is the JavaScript for the state the run page shows.
const runState = `(document.querySelector('.run-summary .run-state') || {}).textContent`

// TestConsoleRuns drives the run pages (#/runs, #/runs/{id}) in a real
// headless Chromium against the service in local mode with two sim
// phones:
//   - a built-in run started from the page's form with a goal written as
//     steps ends succeeded, and its page shows its two steps (each step's
//     action, open_app com.android.settings then key BACK, with its
//     frames before and after, the receipts' frames) and every frame the
//     run saw as GET /v1/runs/{id}/frames lists them, all loaded; the list
//     shows the run, and its state filter shows only the cancelled one;
//   - an external run is paused, resumed and cancelled from its page, each
//     as the API then reads it, and its device is free afterwards;
//   - a parked run (awaiting_user, parked through its device surface): the
//     person takes control of its device (the lease is theirs, and the
//     device page it links to shows it as "you", ready to drive), then
//     hands it back (the run holds the device again and runs);
//   - another organisation's run answers as a run that does not exist;
//   - a phone-sized window does not scroll sideways.
//
// Each state is saved as a screenshot.
func TestConsoleRuns(t *testing.T) {
	a, base, call, devices := localConsoleApp(t, 2)
	p := newBrowserPage(t, base)

	// A built-in run from the form.
	p.open("#/runs")
	p.until("the start form", `!!document.querySelector('form.start-run') && document.querySelectorAll('#start-device option').length === 3`)
	p.do("start a built-in run",
		chromedp.SetValue(chromedp.CSS("#start-goal"), "open com.android.settings\nkey back\nfinish succeeded"),
		chromedp.SetValue(chromedp.CSS("#start-device"), devices[0]),
		chromedp.Click(chromedp.CSS("form.start-run button[type=submit]")))
	p.until("the new run's page", `location.hash.startsWith('#/runs/run_') && !!document.querySelector('.run-summary')`)
	var hash string
	p.eval(`location.hash`, &hash)
	runID := strings.TrimPrefix(hash, "#/runs/")
	p.until("the run succeeded with two steps", runState+` === 'succeeded' && document.querySelectorAll('ol.timeline li.step').length === 2`)
	run := call("GET", "/v1/runs/"+runID, "", http.StatusOK)
	if run["state"] != "succeeded" || run["deviceId"] != devices[0] || run["executor"] != "builtin" {
		t.Fatalf("the API reads the run as %v; want succeeded on %s, builtin", run, devices[0])
	}
	receipts := call("GET", "/v1/receipts?agentRunId="+run["agentRunId"].(string), "", http.StatusOK)["receipts"].([]any)
	if len(receipts) != 2 {
		t.Fatalf("the run has %d receipts; want 2", len(receipts))
	}
	// The steps, oldest first: each its action and its receipt's frames.
	type step struct {
		Action string   `json:"action"`
		Text   string   `json:"text"`
		Frames []string `json:"frames"`
	}
	p.until("every step's frames loaded", `[...document.querySelectorAll('ol.timeline img.frame')].length === 4 &&
		[...document.querySelectorAll('ol.timeline img.frame')].every((i) => i.complete && i.naturalWidth > 0)`)
	var steps []step
	p.eval(`[...document.querySelectorAll('ol.timeline li.step')].map((li) => ({ action: li.dataset.action,
		text: li.querySelector('.action').textContent, frames: [...li.querySelectorAll('img.frame')].map((i) => i.dataset.frameId) }))`, &steps)
	want := []step{{Action: "open_app", Text: "open_app com.android.settings"}, {Action: "key", Text: "key BACK"}}
	for i := range want {
		rc := receipts[len(receipts)-1-i].(map[string]any)
		fr := rc["frames"].(map[string]any)
		want[i].Frames = []string{fr["before"].(string), fr["after"].(string)}
	}
	if mustJSON(t, steps) != mustJSON(t, want) {
		t.Fatalf("the page shows the steps %+v; want %+v", steps, want)
	}
	// Every frame the run saw, as the API lists them.
	var frameIDs []string
	for _, f := range call("GET", "/v1/runs/"+runID+"/frames?limit=200", "", http.StatusOK)["frames"].([]any) {
		frameIDs = append(frameIDs, f.(map[string]any)["frameId"].(string))
	}
	p.until("every frame of the run loaded", fmt.Sprintf(`(() => { const imgs = [...document.querySelectorAll('ol.frame-gallery img.frame')];
		return imgs.length === %d && imgs.every((i) => i.complete && i.naturalWidth > 0); })()`, len(frameIDs)))
	var shown []string
	p.eval(`[...document.querySelectorAll('ol.frame-gallery li')].map((li) => li.dataset.frameId)`, &shown)
	if len(frameIDs) < 4 || !slices.Equal(shown, frameIDs) {
		t.Fatalf("the page shows frames %v; the API lists %v", shown, frameIDs)
	}
	p.shot("run-builtin")

	// The list shows it.
	p.open("#/runs")
	p.until("the run in the list", `(document.querySelector('tr[data-run-id="`+runID+`"]') || {dataset: {}}).dataset.state === 'succeeded'`)
	p.shot("runs")

	// An external run: pause, resume, cancel.
	ext := call("POST", "/v1/runs", `{"deviceId":"`+devices[1]+`","goal":"sign in to the shop","executor":"external"}`, http.StatusCreated)
	extID := ext["runId"].(string)
	p.open("#/runs/" + extID)
	p.until("the running run's pause button", runState+` === 'running' && !!document.querySelector('button[data-control=pause]')`)
	p.do("pause", chromedp.Click(chromedp.CSS("button[data-control=pause]")))
	p.until("the run paused", runState+` === 'paused' && !!document.querySelector('button[data-control=resume]')`)
	if s := call("GET", "/v1/runs/"+extID, "", http.StatusOK)["state"]; s != "paused" {
		t.Fatalf("after pause the API reads the run %v; want paused", s)
	}
	p.shot("run-paused")
	p.do("resume", chromedp.Click(chromedp.CSS("button[data-control=resume]")))
	p.until("the run running again", runState+` === 'running' && !!document.querySelector('button[data-control=pause]')`)
	if s := call("GET", "/v1/runs/"+extID, "", http.StatusOK)["state"]; s != "running" {
		t.Fatalf("after resume the API reads the run %v; want running", s)
	}
	p.do("cancel, confirmed",
		chromedp.Click(chromedp.CSS("button[data-control=cancel-ask]")),
		chromedp.Click(chromedp.CSS("button[data-control=cancel]")))
	p.until("the run cancelled", runState+` === 'cancelled' && !document.querySelector('button[data-control=pause]')`)
	if s := call("GET", "/v1/runs/"+extID, "", http.StatusOK)["state"]; s != "cancelled" {
		t.Fatalf("after cancel the API reads the run %v; want cancelled", s)
	}
	if leased := call("GET", "/v1/devices/"+devices[1], "", http.StatusOK)["leased"]; leased != false {
		t.Fatalf("after cancel the device is leased %v; want free", leased)
	}
	p.shot("run-cancelled")

	// A parked run: take control of its device, then hand it back.
	parked := call("POST", "/v1/runs", `{"deviceId":"`+devices[1]+`","goal":"buy the blue one","executor":"external"}`, http.StatusCreated)
	parkedID := parked["runId"].(string)
	resp, err := http.Post(parked["vrxBaseUrl"].(string)+"/v1/needs-user", "application/json", strings.NewReader(`{"reason":"solve the captcha"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("park the run: got %d", resp.StatusCode)
	}
	p.open("#/runs/" + parkedID)
	p.until("the parked run with its reason and the device free", runState+` === 'awaiting user' &&
		document.querySelector('.run-summary').textContent.includes('solve the captcha') &&
		document.querySelector('.run-summary').textContent.includes('— free') && !!document.querySelector('button[data-control=take-control]')`)
	p.shot("run-parked")
	p.do("take control", chromedp.Click(chromedp.CSS("button[data-control=take-control]")))
	p.until("the device held by the person, with a link to drive it", `document.querySelector('.run-summary').textContent.includes('held by person local-operator') &&
		(document.querySelector('a.drive-link') || {}).getAttribute?.('href') === '#/devices/`+devices[1]+`' &&
		!document.querySelector('button[data-control=take-control]')`)
	holder := leaseOf(t, call, devices[1])["holder"].(map[string]any)
	if holder["userId"] != "local-operator" {
		t.Fatalf("after taking control the device's lease is held by %v; want the local operator", holder)
	}
	p.shot("run-parked-taken")
	// The device page knows the lease as the person's: they can drive it.
	leaseID := leaseOf(t, call, devices[1])["leaseId"].(string)
	p.do("go to the device page", chromedp.Click(chromedp.CSS("a.drive-link")))
	p.until("the device page holding the lease", `location.hash === '#/devices/`+devices[1]+`' &&
		(document.querySelector('.lease-panel') || {dataset: {}}).dataset.lease === 'mine' &&
		document.querySelector('.lease-panel').textContent.includes(`+jsLit(leaseID)+`)`)
	p.shot("run-parked-device-page")
	p.open("#/runs/" + parkedID)
	p.until("the parked run again", runState+` === 'awaiting user' && !!document.querySelector('button[data-control=hand-back]')`)
	p.do("hand back", chromedp.Click(chromedp.CSS("button[data-control=hand-back]")))
	p.until("the run running with its device", runState+` === 'running' && document.querySelector('.run-summary').textContent.includes('held by this run')`)
	if s := call("GET", "/v1/runs/"+parkedID, "", http.StatusOK)["state"]; s != "running" {
		t.Fatalf("after handing back the API reads the run %v; want running", s)
	}
	if holder := leaseOf(t, call, devices[1])["holder"].(map[string]any); holder["runId"] != parkedID {
		t.Fatalf("after handing back the device's lease is held by %v; want the run %s", holder, parkedID)
	}
	p.shot("run-handed-back")

	// Another organisation's run answers as one that never existed.
	ctx := testutil.Context(t)
	other := "org_console_other"
	ids, err := a.Application().Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: other, Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		t.Fatalf("register a phone of another organisation: %v %v", err, ids)
	}
	theirs, err := a.Application().Runs.StartRun.Handle(ctx, runs.StartRun{Auth: domain.LocalOperator(other), DeviceID: ids[0],
		Goal: "theirs", Executor: domain.ExecutorExternal})
	if err != nil {
		t.Fatalf("start another organisation's run: %v", err)
	}
	notFound := func(id string) string {
		t.Helper()
		p.open("#/runs/" + id)
		p.until("the run page's error for "+id, `!!document.querySelector('#main [role=alert]')`)
		var text string
		p.eval(`document.querySelector('#main [role=alert]').textContent`, &text)
		return strings.ReplaceAll(text, id, "ID")
	}
	never := domain.NewID(domain.PrefixRun)
	theirsText, neverText := notFound(theirs.Run.RunID), notFound(never)
	if theirsText != neverText || !strings.HasPrefix(neverText, "run_not_found: ") {
		t.Fatalf("another organisation's run reads %q; a run that never existed %q; want the same run_not_found", theirsText, neverText)
	}
	p.open("#/runs/" + theirs.Run.AgentRunID)
	p.until("the error for their agentRunId", `(document.querySelector('#main [role=alert]') || {}).textContent === `+
		jsLit(strings.ReplaceAll(neverText, "ID", theirs.Run.AgentRunID)))
	p.shot("run-other-organisation")

	// The list's state filter, from the form: only the cancelled run.
	p.open("#/runs")
	p.until("the runs list", `document.querySelectorAll('table.runs tbody tr').length === 3`)
	p.do("filter cancelled runs",
		chromedp.SetValue(chromedp.CSS("#runs-state"), "cancelled"),
		chromedp.Click(chromedp.CSS("form.filters button[type=submit]")))
	p.until("only the cancelled run", `location.hash === '#/runs?state=cancelled' &&
		JSON.stringify([...document.querySelectorAll('table.runs tbody tr')].map((r) => r.dataset.runId)) === `+jsLit(mustJSON(t, []string{extID})))

	// A phone-sized window: the built-in run's page does not scroll sideways.
	p.do("a phone's window", chromedp.EmulateViewport(390, 844))
	p.open("#/runs/" + runID)
	p.until("the run at a phone's width, its frames loaded", `document.querySelectorAll('ol.timeline li.step').length === 2 &&
		[...document.querySelectorAll('img.frame')].length === 4 + `+fmt.Sprint(len(frameIDs))+` &&
		[...document.querySelectorAll('img.frame')].every((i) => i.complete && i.naturalWidth > 0) && document.documentElement.scrollWidth <= 390`)
	p.shot("run-phone")
	p.open("#/runs")
	p.until("the runs at a phone's width", `!!document.querySelector('tr[data-run-id="`+runID+`"]') && document.documentElement.scrollWidth <= 390 &&
		document.querySelector('.table-wrap').scrollWidth <= document.querySelector('.table-wrap').clientWidth`)
	p.shot("runs-phone")
	p.noErrors()
}

// leaseOf returns the device's lease in force, as GET /v1/leases lists it.
func leaseOf(t *testing.T, call func(method, path, body string, want int) map[string]any, deviceID string) map[string]any {
	t.Helper()
	leases, _ := call("GET", "/v1/leases?deviceId="+deviceID, "", http.StatusOK)["leases"].([]any)
	if len(leases) != 1 {
		raw, _ := json.Marshal(leases)
		t.Fatalf("the device has leases %s; want one", raw)
	}
	return leases[0].(map[string]any)
}
