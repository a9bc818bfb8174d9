package service

import (
	"net/http"
	"testing"
	"time"
)

// TestConsoleRunReplay drives a replay's run page in a real headless
// Chromium against the service with two sim phones. A built-in run on
// phone A (open Settings, key back) is exported and replayed:
//   - on phone A again (home screen, as the original began): the page's
//     Replay section says no step diverged;
//   - on phone B, left showing Notes by a run before: the home screen step
//     1 was decided on never comes, and the page names step 1,
//     screen_not_reached, with the original's frame beside the replay's,
//     both loaded — the frames the API's report names.
//
// Each state is saved as a screenshot.
func TestConsoleRunReplay(t *testing.T) {
	_, base, call, devices := localConsoleApp(t, 2)
	a, b := devices[0], devices[1]
	ended := func(id string) map[string]any {
		t.Helper()
		var run map[string]any
		waitUntil(t, 60*time.Second, "run "+id+" ended", func() (bool, error) {
			run = call("GET", "/v1/runs/"+id, "", http.StatusOK)
			s := run["state"]
			return s == "succeeded" || s == "failed" || s == "cancelled", nil
		})
		return run
	}
	start := func(body string) string {
		t.Helper()
		return call("POST", "/v1/runs", body, http.StatusCreated)["runId"].(string)
	}
	orig := start(`{"deviceId":"` + a + `","goal":"open com.android.settings\nkey back\nfinish succeeded"}`)
	notes := start(`{"deviceId":"` + b + `","goal":"open com.example.notes\nfinish succeeded"}`)
	for _, id := range []string{orig, notes} {
		if run := ended(id); run["state"] != "succeeded" {
			t.Fatalf("run %s: got %v; want succeeded", id, run)
		}
	}
	script := call("GET", "/v1/runs/"+orig+"/script", "", http.StatusOK)
	raw := mustJSON(t, script)
	same := start(`{"deviceId":"` + a + `","goal":"replay","script":` + raw + `}`)
	if run := ended(same); run["state"] != "succeeded" {
		t.Fatalf("replay on A: got %v; want succeeded", run)
	}
	diverged := start(`{"deviceId":"` + b + `","goal":"replay","script":` + raw + `}`)
	if run := ended(diverged); run["state"] != "failed" || run["reason"] != "replay_diverged" {
		t.Fatalf("replay on B: got %v; want failed replay_diverged", run)
	}
	rep := call("GET", "/v1/runs/"+diverged+"/divergence", "", http.StatusOK)
	d, _ := rep["divergence"].(map[string]any)
	if d == nil || d["step"] != float64(1) || d["reason"] != "screen_not_reached" {
		t.Fatalf("replay on B: got report %v; want step 1 screen_not_reached", rep)
	}
	want := []string{d["expected"].(map[string]any)["frameId"].(string), d["actual"].(map[string]any)["frameId"].(string)}

	p := newBrowserPage(t, base)
	p.open("#/runs/" + same)
	p.until("the replay without divergence", `(document.querySelector('.run-replay .divergence') || {dataset: {}}).dataset.diverged === 'false' &&
		document.querySelector('.run-replay').textContent.includes('no step diverged')`)
	p.shot("run-replay-followed")

	p.open("#/runs/" + diverged)
	p.until("the divergence with both frames loaded", `(document.querySelector('.run-replay .divergence') || {dataset: {}}).dataset.diverged === 'true' &&
		(() => { const imgs = [...document.querySelectorAll('.divergence-frames img.frame')];
			return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0); })()`)
	var shown struct {
		Step   string   `json:"step"`
		Reason string   `json:"reason"`
		Frames []string `json:"frames"`
	}
	p.eval(`({ step: document.querySelector('.divergence-step strong').textContent, reason: document.querySelector('.divergence-reason').textContent,
		frames: [...document.querySelectorAll('.divergence-frames img.frame')].map((i) => i.dataset.frameId) })`, &shown)
	if shown.Step != "Diverged at step 1" || shown.Reason != "screen_not_reached" || mustJSON(t, shown.Frames) != mustJSON(t, want) {
		t.Fatalf("the page shows %+v; want step 1, screen_not_reached, frames %v (original, replay)", shown, want)
	}
	p.shot("run-replay-diverged")
	p.noErrors()
}
