package service

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// TestConsoleCopilotPanel drives the copilot panel of the device page in
// a real headless Chromium against a local service whose copilot asks a
// scripted, streaming model. The person starts a thread asking to approve
// every action; the model's first words show while it is still answering
// (streamed), and Stop ends the turn (stopped). The next message makes the
// model press Home: an approval card shows the exact action, its
// arguments and the frame it was decided on; Approve runs it as the
// person (its receipt, named after the approval, appears in the page's
// timeline). A direct command (command mode) runs without the model. A
// local deployment does not meter the copilot: no gauge is drawn.
// Screenshots of each state are saved.
func TestConsoleCopilotPanel(t *testing.T) {
	model := newScriptedModel(t)
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_PLANNER_URL"] = model.URL()
	env["SERVICE_PLANNER_API_KEY"] = "sk-console"
	env["SERVICE_PLANNER_MODEL"] = "scripted-1"
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's log:\n%s", logs.String())
		}
	})
	a, base := startAppLogging(t, env, slog.New(slog.NewTextHandler(logs, nil)))
	checked := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		return checked("console-test", method, path, body, want)
	}
	var dev string
	waitUntil(t, 60*time.Second, "the sim phone online", func() (bool, error) {
		devices, _ := call("GET", "/v1/devices", "", http.StatusOK)["devices"].([]any)
		for _, d := range devices {
			if m := d.(map[string]any); m["status"] == "online" {
				dev = m["deviceId"].(string)
			}
		}
		return dev != "", nil
	})

	// The first answer streams its first words, then waits.
	hold, held := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	})
	model.play(func(req modelRequest, w *modelStream) {
		w.text("Let me think about the home screen")
		close(held)
		<-hold
		w.text(" — never shown.")
		w.done(5, 5)
	})

	p := newBrowserPage(t, base)
	p.open("#/devices/" + dev)
	p.until("the copilot panel", `!!document.querySelector('.device-copilot #copilot-message')`)
	// Local mode: the allowance read is not served, no gauge.
	p.until("the gauge's read answered", `document.querySelector('.copilot-gauge').hidden === true`+
		` && !!document.querySelector('.copilot-gauge').dataset.allowance`)
	// ... without asking for it: a local deployment does not mount the
	// route (spec 4.2), and a normal page logs no failed request.
	for _, line := range testutil.BrowserConsole(p.ctx) {
		if strings.Contains(line, "/v1/copilot/allowance") {
			t.Errorf("the page logged %q; a local page must not ask for the allowance", line)
		}
	}
	p.do("start a thread, approving every action",
		chromedp.Click(chromedp.CSS(`#copilot-every`)),
		chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "what is on the screen?"),
		chromedp.Click(chromedp.CSS(`.copilot-send`)))
	<-held
	p.until("the streamed words while the model still answers",
		`[...document.querySelectorAll('.copilot-msg.assistant')].some((m) => m.textContent.includes('Let me think about the home screen'))`+
			` && !document.querySelector('.copilot-stop').disabled`)
	p.shot("copilot-streaming")
	p.do("stop the turn", chromedp.Click(chromedp.CSS(`.copilot-stop`)))
	p.until("the turn stopped", `!!document.querySelector('.copilot-end[data-outcome="stopped"]')`)
	close(hold)
	var thread string
	p.eval(`document.querySelector('.device-copilot').dataset.threadId`, &thread)
	// The stream shows the stop as soon as it is recorded; the read model
	// follows.
	waitUntil(t, 30*time.Second, "the thread's turn stopped in the read model", func() (bool, error) {
		th := call("GET", "/v1/copilot/threads/"+thread, "", http.StatusOK)["thread"].(map[string]any)
		return th["lastOutcome"] == "stopped" && th["state"] == "idle", nil
	})

	// The model presses Home; the thread asks for approval first.
	model.play(func(req modelRequest, w *modelStream) {
		if req.toolResults() > 0 {
			w.text("Done.")
			w.done(3, 1)
			return
		}
		w.text("Pressing Home.")
		w.call("key", `{"key":"HOME"}`)
		w.done(20, 4)
	})
	p.do("ask for Home", chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "go to the home screen"),
		chromedp.Click(chromedp.CSS(`.copilot-send`)))
	p.until("an approval card with the action, its arguments and its frame",
		`(() => { const c = document.querySelector('.approval-card[data-state="pending"]'); return !!c &&
			c.querySelector('.approval-action').textContent.includes('key HOME') &&
			c.querySelector('.approval-args').textContent.includes('"HOME"') &&
			/^frm_/.test(c.querySelector('img.frame').dataset.frameId) && !!c.querySelector('img.frame').src; })()`)
	var approval, frame string
	p.eval(`document.querySelector('.approval-card').dataset.approval`, &approval)
	p.eval(`document.querySelector('.approval-card img.frame').dataset.frameId`, &frame)
	// The API's pending approval (once the read model has it) is the card's.
	waitUntil(t, 30*time.Second, "the card's approval pending in the API", func() (bool, error) {
		pending := call("GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
		if len(pending) == 0 {
			return false, nil
		}
		ap := pending[0].(map[string]any)
		if len(pending) != 1 || ap["approvalId"] != approval || ap["frame"] != frame || ap["action"] != "key" {
			t.Fatalf("pending approvals %v; want the card's %s (key) on frame %s", pending, approval, frame)
		}
		return true, nil
	})
	p.shot("copilot-approval")
	admCheckA11y(t, p.ctx, "the device page with an approval card")
	p.do("approve", chromedp.Click(chromedp.CSS(`.approval-card .approval-approve`)))
	p.until("the card granted", `document.querySelector('.approval-card').dataset.state === 'granted'`)
	key := "copilot-" + approval
	p.until("the approved action's receipt in the timeline", `!!document.querySelector('.receipt-timeline li[data-key=`+jsLit(key)+`][data-state="committed"]')`)
	rc := call("GET", "/v1/receipts/"+key, "", http.StatusOK)
	if rc["state"] != "committed" || rc["action"] != "key" || rc["observedFrame"] != frame {
		t.Errorf("the approved action's receipt: %v; want committed key, decided on frame %s", rc, frame)
	}
	p.shot("copilot-approved")

	// Command mode: parsed without the model.
	asked := len(model.asked())
	p.do("run a direct command", chromedp.SendKeys(chromedp.CSS(`#copilot-command`), "home"),
		chromedp.Click(chromedp.CSS(`.copilot-run`)))
	p.until("the command's receipt", `(() => { const c = document.querySelector('.copilot-command[data-state="done"]');
		return !!c && c.textContent.includes('key committed'); })()`)
	if n := len(model.asked()); n != asked {
		t.Errorf("a direct command asked the model %d times; want none", n-asked)
	}
	var log string
	p.eval(`document.querySelector('.copilot-log').innerText`, &log)
	for _, want := range []string{"what is on the screen?", "go to the home screen", "Pressing Home.", "key HOME"} {
		if !strings.Contains(log, want) {
			t.Errorf("the conversation %q lacks %q", log, want)
		}
	}
	p.shot("copilot-command")

	// New thread: the panel leaves the thread, offers the approval choice
	// again, and the next message starts a second thread about the phone.
	model.play(func(req modelRequest, w *modelStream) {
		w.text("A fresh start.")
		w.done(3, 1)
	})
	p.do("start a new thread", chromedp.Click(chromedp.CSS(`.copilot-new`)))
	p.until("an empty panel with no thread, the choice offered again",
		`(() => { const pn = document.querySelector('.device-copilot'); return !pn.dataset.threadId &&
			document.querySelectorAll('.copilot-log li').length === 0 && !document.querySelector('#copilot-every').closest('label').hidden &&
			document.querySelector('.copilot-new').disabled; })()`)
	p.do("ask in the new thread", chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "hello again"),
		chromedp.Click(chromedp.CSS(`.copilot-send`)))
	p.until("the new thread's answer, the note gone", `[...document.querySelectorAll('.copilot-msg.assistant')].some((m) => m.textContent.includes('A fresh start.'))`+
		` && document.querySelector('.copilot-note').textContent === ''`)
	var second string
	p.eval(`document.querySelector('.device-copilot').dataset.threadId`, &second)
	if second == "" || second == thread {
		t.Fatalf("the thread after New thread is %q; want a new one, not %q", second, thread)
	}
	threads := call("GET", "/v1/copilot/threads", "", http.StatusOK)["threads"].([]any)
	if len(threads) != 2 {
		t.Errorf("threads %v; want the two", threads)
	}
	p.shot("copilot-new-thread")
	p.noErrors()
}

// TestConsoleCopilotGauge: on a hosted deployment metering the copilot
// (1000 tokens per subscribed device, one live subscription), the panel
// draws the allowance gauge from usedFraction: empty at first, near the
// limit after an answer of 850 tokens, spent after 150 more, when the chat
// box gives way to direct commands, which still act on the phone. The
// gauge agrees with GET /v1/copilot/allowance. Screenshots of each state.
func TestConsoleCopilotGauge(t *testing.T) {
	idp := identitytest.New(t)
	model := newScriptedModel(t)
	catalog := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(catalog, []byte(strings.Replace(e2eCatalog, `"currency": "usd",`, `"currency": "usd", "copilotTokensPerDevice": 1000,`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	a, front, _ := startBillingConsole(t, idp, map[string]string{"SERVICE_CATALOG_FILE": catalog,
		"SERVICE_PLANNER_URL": model.URL(), "SERVICE_PLANNER_API_KEY": "sk-console", "SERVICE_PLANNER_MODEL": "scripted-1"})
	idp.RegisterClient(consoleClientID, front+"/")
	idp.SignInAs("user_a", "org_a", domain.RoleMember)
	ctx := testutil.Context(t)
	ids, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: "org_a", Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		t.Fatalf("register a sim phone: %v (%v)", err, ids)
	}
	dev := ids[0]
	recordFulfilment(t, a, "org_a", domain.BillingSubscription, time.Now())
	person := idp.Console(t, front+"/mcp", "user_a", "org_a", "member")
	call := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), front)

	p := newBrowserPage(t, front)
	p.open("#/devices/" + dev)
	p.do("sign in", chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)), chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)), chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(`.device-copilot #copilot-command`)))
	p.until("the gauge, empty", `(() => { const g = document.querySelector('.copilot-gauge');
		return !!g && !g.hidden && g.dataset.usedFraction === '0' && g.textContent.includes('0 of 1,000 tokens'); })()`)
	p.shot("copilot-gauge-empty")

	answer := func(in, out int) {
		model.play(func(req modelRequest, w *modelStream) {
			w.text("Hello there.")
			w.done(in, out)
		})
	}
	answer(700, 150)
	p.do("say hi", chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "hi"), chromedp.Click(chromedp.CSS(`.copilot-send`)))
	p.until("the gauge near the limit", `(() => { const g = document.querySelector('.copilot-gauge');
		return g.classList.contains('near-limit') && g.dataset.usedFraction === '0.85' &&
			g.querySelector('.gauge-bar').style.width === '85%'; })()`)
	p.shot("copilot-gauge-near-limit")

	answer(100, 50)
	p.do("say more", chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "more"), chromedp.Click(chromedp.CSS(`.copilot-send`)))
	p.until("the gauge spent and the chat box gone", `(() => { const g = document.querySelector('.copilot-gauge');
		return g.classList.contains('exhausted') && g.dataset.usedFraction === '1' &&
			document.querySelector('.copilot-chat').hidden; })()`)
	asked := len(model.asked())
	p.do("a direct command", chromedp.SendKeys(chromedp.CSS(`#copilot-command`), "home"), chromedp.Click(chromedp.CSS(`.copilot-run`)))
	p.until("the command's receipt", `(() => { const c = document.querySelector('.copilot-command[data-state="done"]');
		return !!c && c.textContent.includes('key committed'); })()`)
	if n := len(model.asked()); n != asked {
		t.Errorf("the direct command asked the model %d times; want none", n-asked)
	}
	p.shot("copilot-gauge-spent")
	admCheckA11y(t, p.ctx, "the device page with the gauge spent")
	al := call(person, "GET", "/v1/copilot/allowance", "", http.StatusOK)
	if al["usedFraction"] != float64(1) || al["exhausted"] != true || al["used"] != float64(1000) || al["included"] != float64(1000) {
		t.Errorf("the API's allowance %v; want what the gauge shows: 1000 of 1000, exhausted", al)
	}
	p.noErrors()
}

// TestConsoleFleetCopilot drives the fleet page's copilot in a real
// headless Chromium (local service, two sim phones, a scripted model): a
// message there starts a thread about the fleet (deviceId null); the model
// lists the phones and presses Home on each, and the conversation shows
// each call with the phone it was for and its receipt. The fleet panel
// offers no direct commands (a command is for one phone). Screenshot.
func TestConsoleFleetCopilot(t *testing.T) {
	model := newScriptedModel(t)
	env := localEnv(t, testutil.DatabaseURL(t), 2)
	env["SERVICE_PLANNER_URL"] = model.URL()
	env["SERVICE_PLANNER_API_KEY"] = "sk-console"
	env["SERVICE_PLANNER_MODEL"] = "scripted-1"
	a, base := startApp(t, env)
	checked := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		return checked("console-test", method, path, body, want)
	}
	var devs []string
	waitUntil(t, 60*time.Second, "two sim phones online", func() (bool, error) {
		devs = devs[:0]
		devices, _ := call("GET", "/v1/devices", "", http.StatusOK)["devices"].([]any)
		for _, d := range devices {
			if m := d.(map[string]any); m["status"] == "online" {
				devs = append(devs, m["deviceId"].(string))
			}
		}
		return len(devs) == 2, nil
	})
	model.play(func(req modelRequest, w *modelStream) {
		switch req.toolResults() {
		case 0:
			w.call("list_devices", `{}`)
		case 1:
			for _, id := range listedDevices(req.lastToolResult(t)) {
				w.call("key", fmt.Sprintf(`{"deviceId":%q,"key":"HOME"}`, id))
			}
		default:
			w.text("Both phones are home.")
		}
		w.done(5, 1)
	})

	p := newBrowserPage(t, base)
	p.open("#/fleet")
	p.until("the fleet copilot", `!!document.querySelector('.fleet-copilot #copilot-message')`)
	var commands bool
	p.eval(`!!document.querySelector('.fleet-copilot #copilot-command')`, &commands)
	if commands {
		t.Errorf("the fleet copilot offers direct commands; a command is for one phone")
	}
	p.do("ask about the fleet", chromedp.SendKeys(chromedp.CSS(`#copilot-message`), "send every phone home"),
		chromedp.Click(chromedp.CSS(`.copilot-send`)))
	p.until("the answer, each phone's call committed",
		`[...document.querySelectorAll('.copilot-msg.assistant')].some((m) => m.textContent.includes('Both phones are home.')) &&
		 [...document.querySelectorAll('.copilot-call[data-state="succeeded"]')].filter((c) => c.dataset.device && c.textContent.includes('receipt committed')).length === 2`)
	var shown []string
	p.eval(`[...document.querySelectorAll('.copilot-call[data-device]')].map((c) => c.dataset.device).filter(Boolean).sort()`, &shown)
	want := slices.Clone(devs)
	slices.Sort(want)
	if !slices.Equal(shown, want) {
		t.Errorf("the calls shown were for %v; want each phone %v", shown, want)
	}
	var thread string
	p.eval(`document.querySelector('.fleet-copilot').dataset.threadId`, &thread)
	th := call("GET", "/v1/copilot/threads/"+thread, "", http.StatusOK)["thread"].(map[string]any)
	if v, ok := th["deviceId"]; !ok || v != nil {
		t.Errorf("the panel's thread %v; want deviceId null (the fleet)", th)
	}
	p.shot("copilot-fleet")
	admCheckA11y(t, p.ctx, "the fleet page with its copilot")
	p.noErrors()
}
