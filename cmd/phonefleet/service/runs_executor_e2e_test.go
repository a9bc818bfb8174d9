package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/runs"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/webhooksig"
)

// runHarness is a service in local mode with its application object.
type runHarness struct {
	a    *App
	app  *commands.Application
	auth domain.Auth
	ctx  context.Context
}

func startRunHarness(t *testing.T, env map[string]string) *runHarness {
	t.Helper()
	a, _ := startApp(t, env)
	return &runHarness{a: a, app: a.Application(), auth: domain.LocalOperator(a.orgID), ctx: testutil.Context(t)}
}

func localEnv(t *testing.T, dbURL string, devices int) map[string]string {
	return map[string]string{"DATABASE_URL": dbURL, "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"), "SERVICE_SIM_DEVICES": fmt.Sprint(devices)}
}

func (h *runHarness) start(t *testing.T, goal string, mod func(*runs.StartRun)) projections.RunView {
	t.Helper()
	cmd := runs.StartRun{Auth: h.auth, Goal: goal, Executor: domain.ExecutorBuiltin}
	if mod != nil {
		mod(&cmd)
	}
	// The sim phones registered at start-up reach the read model the
	// start chooses a free device from a moment later.
	var s runs.StartedRun
	waitUntil(t, 30*time.Second, "a free device", func() (bool, error) {
		var err error
		s, err = h.app.Runs.StartRun.Handle(h.ctx, cmd)
		if e := domain.AsError(err); err != nil && e.Code == domain.CodeDeviceUnavailable && e.Retryable != nil && *e.Retryable {
			return false, nil
		}
		return err == nil, err
	})
	return s.Run
}

func (h *runHarness) get(t *testing.T, id string) projections.RunView {
	t.Helper()
	v, err := h.app.Runs.GetRun.Handle(h.ctx, runs.GetRun{Auth: h.auth, RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitEnded waits until the run has ended and returns it.
func (h *runHarness) waitEnded(t *testing.T, id string) projections.RunView {
	t.Helper()
	var v projections.RunView
	waitUntil(t, 60*time.Second, "run "+id+" ending", func() (bool, error) {
		v = h.get(t, id)
		return domain.RunTerminal(v.State), nil
	})
	return v
}

func str0(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// runEvents lists a run's event types in order, with each claim's worker.
func runEvents(t *testing.T, h *runHarness, id string) []string {
	t.Helper()
	rows, err := h.a.db.Pool.Query(h.ctx, `SELECT event_type, coalesce(data->>'worker', '') FROM events
		WHERE stream_id = $1 ORDER BY stream_version`, domain.RunStream(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, worker string
		if err := rows.Scan(&typ, &worker); err != nil {
			t.Fatal(err)
		}
		if worker != "" {
			typ += " " + worker
		}
		out = append(out, typ)
	}
	return out
}

// runReceipts counts a run's receipts, their distinct keys and the
// committed ones, once the receipts read model shows at least want and
// none of them pending (the read model applies an action's outcome after
// its request: a run can end before its last receipt's outcome is shown).
func runReceipts(t *testing.T, h *runHarness, agentRunID string, want int) (n, keys, committed int) {
	t.Helper()
	waitUntil(t, 30*time.Second, "the run's receipts", func() (bool, error) {
		var pending int
		err := h.a.db.Pool.QueryRow(h.ctx, `SELECT count(*), count(DISTINCT idempotency_key), count(*) FILTER (WHERE state = 'committed'),
			count(*) FILTER (WHERE state = 'pending')
			FROM receipts WHERE agent_run_id = $1`, agentRunID).Scan(&n, &keys, &committed, &pending)
		return n >= want && pending == 0, err
	})
	return n, keys, committed
}

// TestBuiltinScriptedRunReachesItsGoal: a built-in run whose goal is
// written as steps is driven by the service's own executor on a sim phone
// to its goal (its successCheck holds), one receipt per step, and
// run.ended reaches a real HTTPS receiver with the spec's fields.
func TestBuiltinScriptedRunReachesItsGoal(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_WEBHOOK_CA_FILE"] = rcv.CAFile
	h := startRunHarness(t, env)
	hook, err := h.app.Webhooks.CreateWebhook.Handle(h.ctx, webhooks.CreateWebhook{Auth: h.auth, URL: rcv.URL + "/in",
		Events: []string{domain.WebhookRunEnded}})
	if err != nil {
		t.Fatal(err)
	}
	goal := "open com.example.notes\nkey home\nopen com.android.settings\nfinish succeeded settings_open"
	run := h.start(t, goal, func(c *runs.StartRun) { c.SuccessCheck = &domain.SuccessCheck{App: "com.android.settings"} })
	v := h.waitEnded(t, run.RunID)
	if v.State != domain.RunStateSucceeded || v.StepSeq != 3 || str0(v.Reason) != "settings_open" {
		t.Fatalf("got run %s (%s: %s) after %d steps; want succeeded (settings_open) after 3", v.State, str0(v.Reason), str0(v.Detail), v.StepSeq)
	}
	if n, keys, committed := runReceipts(t, h, run.AgentRunID, 3); n != 3 || keys != 3 || committed != 3 {
		t.Errorf("got %d receipts (%d keys, %d committed); want 3 committed, one per step", n, keys, committed)
	}

	var data map[string]any
	waitUntil(t, 30*time.Second, "run.ended delivery", func() (bool, error) {
		reqs, bodies := rcv.received()
		for i, r := range reqs {
			var body struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			if err := json.Unmarshal(bodies[i], &body); err != nil {
				return false, err
			}
			if body.Event == domain.WebhookRunEnded && body.Data["runId"] == run.RunID {
				if err := webhooksig.Verify(bodies[i], r.Header.Get(webhooksig.SignatureHeader), hook.Secret, time.Now(), 0); err != nil {
					return false, err
				}
				data = body.Data
				return true, nil
			}
		}
		return false, nil
	})
	wantKeys(t, data, "agentRunId", "runId", "deviceId", "state", "goal", "stepSeq", "reason", "detail")
	if data["agentRunId"] != run.AgentRunID || data["deviceId"] != run.DeviceID || data["state"] != "succeeded" ||
		data["goal"] != goal || data["stepSeq"] != float64(3) || data["reason"] != "settings_open" || data["detail"] != nil {
		t.Errorf("got run.ended data %v", data)
	}
}

// TestBuiltinRunPauseResume: a run paused mid-run takes no step until it
// is resumed; it is then claimed again and finishes, every step taken
// once.
func TestBuiltinRunPauseResume(t *testing.T) {
	h := startRunHarness(t, localEnv(t, testutil.DatabaseURL(t), 1))
	var goal strings.Builder
	const keys = 12
	for range keys {
		goal.WriteString("key home\nwait 30\n")
	}
	goal.WriteString("finish succeeded")
	run := h.start(t, goal.String(), nil)
	waitUntil(t, 60*time.Second, "the run's second step", func() (bool, error) {
		v := h.get(t, run.RunID)
		if domain.RunTerminal(v.State) {
			return false, fmt.Errorf("the run ended (%s) before it could be paused", v.State)
		}
		return v.StepSeq >= 2, nil
	})
	paused, err := h.app.Runs.PauseRun.Handle(h.ctx, runs.PauseRun{Auth: h.auth, RunID: run.RunID})
	if err != nil || paused.State != domain.RunStatePaused {
		t.Fatalf("got pause %+v, %v; want paused", paused, err)
	}
	if _, err := h.app.Runs.ResumeRun.Handle(h.ctx, runs.ResumeRun{Auth: h.auth, RunID: run.RunID}); err != nil {
		t.Fatal(err)
	}
	v := h.waitEnded(t, run.RunID)
	if v.State != domain.RunStateSucceeded || v.StepSeq != keys {
		t.Fatalf("got run %s (%s: %s) after %d steps; want succeeded after %d", v.State, str0(v.Reason), str0(v.Detail), v.StepSeq, keys)
	}
	if n, k, committed := runReceipts(t, h, run.AgentRunID, keys); n != keys || k != keys || committed != keys {
		t.Errorf("got %d receipts (%d keys, %d committed); want %d, each step once", n, k, committed, keys)
	}
	evs := runEvents(t, h, run.RunID)
	state, claimedAfterResume := "", false
	for _, e := range evs {
		switch {
		case e == "run.paused":
			state = "paused"
		case e == "run.resumed":
			state = "resumed"
		case e == "run.step_taken" && state == "paused":
			t.Errorf("got a step while paused: %v", evs)
		case strings.HasPrefix(e, "run.claimed") && state == "resumed":
			claimedAfterResume = true
		}
	}
	if !claimedAfterResume {
		t.Errorf("got events %v; want the run claimed again after resume", evs)
	}
}

// TestTwoInstancesNeverExecuteTheSameRun: two service instances on one
// database, each with its executor, share the queued runs: every run is
// claimed by one worker only and each of its steps is acted once.
//
// Without cross-instance routing (SERVICE_NATS_URL) only the instance
// hosting the sim phones can act on them; a run the other one claims
// ends failed device_lost. Either way no run is executed twice.
func TestTwoInstancesNeverExecuteTheSameRun(t *testing.T) {
	db := testutil.DatabaseURL(t)
	const runs = 6
	// The instances share their data directory's keys, as a deployment's do.
	env := localEnv(t, db, runs)
	h1 := startRunHarness(t, env)
	h2 := startRunHarness(t, env)
	var ids []projections.RunView
	for range runs {
		ids = append(ids, h1.start(t, "key home\nopen com.example.notes\nkey home\nfinish succeeded", nil))
	}
	workers := map[string]int{}
	succeeded := 0
	for _, run := range ids {
		v := h1.waitEnded(t, run.RunID)
		var claimers []string
		for _, e := range runEvents(t, h1, run.RunID) {
			if w, ok := strings.CutPrefix(e, "run.claimed "); ok && !containsStr(claimers, w) {
				claimers = append(claimers, w)
			}
		}
		if len(claimers) != 1 {
			t.Errorf("run %s: got claims by %v; want one worker", run.RunID, claimers)
			continue
		}
		workers[claimers[0]]++
		n, keys, _ := runReceipts(t, h1, run.AgentRunID, v.StepSeq)
		if n != keys || n != v.StepSeq {
			t.Errorf("run %s: got %d receipts, %d keys, %d steps; want one receipt per step", run.RunID, n, keys, v.StepSeq)
		}
		switch {
		case v.State == domain.RunStateSucceeded && v.StepSeq == 3:
			succeeded++
		case v.State == domain.RunStateFailed && str0(v.Reason) == domain.RunReasonDeviceLost && v.StepSeq == 0:
		default:
			t.Errorf("run %s: got %s (%s: %s) after %d steps", run.RunID, v.State, str0(v.Reason), str0(v.Detail), v.StepSeq)
		}
	}
	if succeeded == 0 {
		t.Errorf("got no run succeeded; want those of the hosting instance to")
	}
	t.Logf("runs per worker: %v (%d succeeded)", workers, succeeded)
	_ = h2
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestBuiltinRunWithAModelPlanner: with SERVICE_PLANNER_* naming an
// OpenAI-compatible server, a built-in run asks it for each step with the
// tools of the device surface and a downscaled JPEG; a malformed tool
// call ends the run failed planner_failed with the reason in detail, and
// nothing crashes (the next run is served).
func TestBuiltinRunWithAModelPlanner(t *testing.T) {
	var mu sync.Mutex
	var requests []map[string]any
	answers := []string{
		`open_app {"package":"com.example.notes"}`,
		`tap {"x": 540,`, // arguments are not JSON
		`finish {"state":"succeeded","reason":"done"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-e2e" ||
			json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		requests = append(requests, req)
		answer := `finish {"state":"failed","reason":"out_of_answers"}`
		if len(answers) > 0 {
			answer, answers = answers[0], answers[1:]
		}
		mu.Unlock()
		name, args, _ := strings.Cut(answer, " ")
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"finish_reason": "tool_calls",
			"message": map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": name, "arguments": args}}}}}}})
	}))
	t.Cleanup(srv.Close)
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_PLANNER_URL"], env["SERVICE_PLANNER_API_KEY"], env["SERVICE_PLANNER_MODEL"] = srv.URL+"/v1", "sk-e2e", "test-model"
	h := startRunHarness(t, env)

	run := h.start(t, "Open the notes app and write a shopping list", nil)
	v := h.waitEnded(t, run.RunID)
	if v.State != domain.RunStateFailed || str0(v.Reason) != domain.RunReasonPlannerFailed || !strings.Contains(str0(v.Detail), "not JSON") || v.StepSeq != 1 {
		t.Fatalf("got run %s (%s: %s) after %d steps; want failed planner_failed (arguments are not JSON) after 1", v.State, str0(v.Reason), str0(v.Detail), v.StepSeq)
	}
	mu.Lock()
	first := requests[0]
	mu.Unlock()
	if first["model"] != "test-model" || len(first["tools"].([]any)) != 10 {
		t.Errorf("got model %v with %d tools; want test-model with 10", first["model"], len(first["tools"].([]any)))
	}
	msgs := first["messages"].([]any)
	parts := msgs[len(msgs)-1].(map[string]any)["content"].([]any)
	if len(parts) != 2 || !strings.HasPrefix(parts[1].(map[string]any)["image_url"].(map[string]any)["url"].(string), "data:image/jpeg;base64,") {
		t.Errorf("got %d content parts; want the text and a JPEG data URL", len(parts))
	}

	next := h.start(t, "Go back to the notes", nil)
	if v := h.waitEnded(t, next.RunID); v.State != domain.RunStateSucceeded || str0(v.Reason) != "done" {
		t.Errorf("got the next run %s (%s: %s); want succeeded (done)", v.State, str0(v.Reason), str0(v.Detail))
	}
}
