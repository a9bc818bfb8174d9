package workers_test

import (
	"context"
	"encoding/json"

	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/planner"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// runEnv is a fleet with the run capability and an application object.
type runEnv struct {
	*fleettest.Env
	app   commands.Application
	clock *fleettest.Clock
}

func startRunEnv(t *testing.T, devices int) *runEnv {
	t.Helper()
	clock := fleettest.NewClock(time.Now())
	env := fleettest.Start(t, fleettest.Options{Devices: devices, Clock: clock, WaitForReceipts: true})
	return &runEnv{Env: env, clock: clock, app: commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Runs: env.Runs, Logger: fleettest.Quiet})}
}

func (e *runEnv) executor(llm planner.Planner) *workers.RunExecutor {
	return workers.NewRunExecutor(workers.RunExecutorConfig{App: &e.app, Pool: e.Pool, LLM: llm, Now: e.clock.Now,
		Sleep: func(context.Context, time.Duration) {}, Logger: fleettest.Quiet})
}

func (e *runEnv) start(t *testing.T, dev string, mod func(*runs.StartRun)) string {
	t.Helper()
	cmd := runs.StartRun{Auth: e.Auth, DeviceID: dev, Executor: domain.ExecutorBuiltin}
	mod(&cmd)
	s, err := e.app.Runs.StartRun.Handle(testutil.Context(t), cmd)
	if err != nil {
		t.Fatal(err)
	}
	e.Settle(t)
	return s.Run.RunID
}

// drive polls once, expecting to start want runs, and waits until the
// executor lets them go.
func (e *runEnv) drive(t *testing.T, x *workers.RunExecutor, want int) {
	t.Helper()
	n, err := x.Poll(bg)
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("got %d runs started; want %d", n, want)
	}
	x.Wait()
	e.Settle(t)
}

func (e *runEnv) run(t *testing.T, id string) projections.RunView {
	t.Helper()
	v, err := e.app.Runs.GetRun.Handle(bg, runs.GetRun{Auth: e.Auth, RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *runEnv) steps(t *testing.T, id string) []projections.RunStep {
	t.Helper()
	steps, err := projections.ListRunSteps(bg, e.Pool, e.OrgID, id)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// hookPlanner wraps a planner: before deciding it calls hook with the
// call's number (from 1), and it keeps every input it was given.
type hookPlanner struct {
	next   planner.Planner
	hook   func(n int, in planner.Input)
	mu     sync.Mutex
	inputs []planner.Input
}

func (h *hookPlanner) Next(ctx context.Context, in planner.Input) (planner.Decision, error) {
	h.mu.Lock()
	h.inputs = append(h.inputs, in)
	n := len(h.inputs)
	h.mu.Unlock()
	if h.hook != nil {
		h.hook(n, in)
	}
	return h.next.Next(ctx, in)
}

// scriptedLLM is a "model" planner following text steps, so that a test
// can stand between the executor and a scripted planner.
func scriptedLLM(t *testing.T, steps string) *hookPlanner {
	t.Helper()
	s, err := planner.ParseSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	return &hookPlanner{next: planner.NewScripted(s, 0, 0)}
}

// TestRunExecutorFollowsAGoalWrittenAsSteps: a built-in run whose goal is
// written as steps is claimed and driven to its end; each step is one
// recorded action under a key derived from the run and the step, and the
// run ends succeeded with its successCheck holding.
func TestRunExecutorFollowsAGoalWrittenAsSteps(t *testing.T) {
	e := startRunEnv(t, 1)
	id := e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) {
		c.Goal = "open com.example.notes\nkey home\nopen com.android.settings\nfinish succeeded"
		c.SuccessCheck = &domain.SuccessCheck{App: "com.android.settings"}
	})
	x := e.executor(nil)
	e.drive(t, x, 1)
	v := e.run(t, id)
	if v.State != domain.RunStateSucceeded || v.StepSeq != 3 {
		t.Fatalf("got run %s after %d steps (%s); want succeeded after 3", v.State, v.StepSeq, deref(v.Detail))
	}
	steps := e.steps(t, id)
	var got []string
	for _, s := range steps {
		got = append(got, s.Action+" "+s.IdempotencyKey)
	}
	want := []string{"open_app " + id + "/step-1/0", "key " + id + "/step-2/0", "open_app " + id + "/step-3/0"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("got steps %v; want %v", got, want)
	}
	if n, _ := x.Poll(bg); n != 0 {
		t.Errorf("got %d runs started after the end; want none", n)
	}
}

// TestRunExecutorPlannerChoice: a run's script wins over its goal; a goal
// that is not steps with no model configured ends failed
// planner_unavailable; a model's malformed decision ends the run failed
// planner_failed with the reason in detail.
func TestRunExecutorPlannerChoice(t *testing.T) {
	e := startRunEnv(t, 3)
	script, _ := json.Marshal(domain.RunScript{Version: 1, Steps: []domain.ScriptStep{
		{Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`)}, {Finish: "succeeded", Reason: "scripted"}}})
	scripted := e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) { c.Goal = "go home"; c.Script = script })
	prose := e.start(t, e.DeviceIDs[1], func(c *runs.StartRun) { c.Goal = "Please turn on wifi" })
	e.drive(t, e.executor(nil), 2)
	if v := e.run(t, scripted); v.State != domain.RunStateSucceeded || deref(v.Reason) != "scripted" || v.StepSeq != 1 {
		t.Errorf("got scripted run %s (%s) after %d steps; want succeeded (scripted) after 1", v.State, deref(v.Reason), v.StepSeq)
	}
	if v := e.run(t, prose); v.State != domain.RunStateFailed || deref(v.Reason) != workers.RunReasonPlannerUnavailable {
		t.Errorf("got prose run %s (%s); want failed planner_unavailable", v.State, deref(v.Reason))
	}

	malformed := &fakeModel{decide: func(planner.Input) (planner.Decision, error) {
		return planner.Decision{}, fmt.Errorf("%w: unknown tool %q", planner.ErrMalformed, "teleport")
	}}
	llm := e.start(t, e.DeviceIDs[2], func(c *runs.StartRun) { c.Goal = "Please turn on wifi" })
	e.drive(t, e.executor(malformed), 1)
	v := e.run(t, llm)
	if v.State != domain.RunStateFailed || deref(v.Reason) != domain.RunReasonPlannerFailed || !strings.Contains(deref(v.Detail), "teleport") {
		t.Errorf("got model run %s (%s: %s); want failed planner_failed naming the tool", v.State, deref(v.Reason), deref(v.Detail))
	}
}

type fakeModel struct {
	decide func(planner.Input) (planner.Decision, error)
}

func (f *fakeModel) Next(_ context.Context, in planner.Input) (planner.Decision, error) {
	return f.decide(in)
}

// TestRunExecutorPauseResume: pausing while a step is being decided stops
// the run before that step's action; the executor lets it go. Resuming
// queues it again; it is claimed afresh and goes on from the next step,
// no step taken twice.
func TestRunExecutorPauseResume(t *testing.T) {
	e := startRunEnv(t, 1)
	model := scriptedLLM(t, "open com.example.notes\nkey home\nopen com.android.settings\nfinish succeeded")
	var id string
	model.hook = func(n int, _ planner.Input) {
		if n == 2 {
			if _, err := e.app.Runs.PauseRun.Handle(testutil.Context(t), runs.PauseRun{Auth: e.Auth, RunID: id}); err != nil {
				t.Error(err)
			}
		}
	}
	id = e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) { c.Goal = "do the three steps" })
	x := e.executor(model)
	e.drive(t, x, 1)
	if v := e.run(t, id); v.State != domain.RunStatePaused || v.StepSeq != 1 {
		t.Fatalf("got run %s after %d steps; want paused after 1", v.State, v.StepSeq)
	}
	if n, _ := x.Poll(bg); n != 0 {
		t.Fatalf("got a paused run claimed")
	}
	if _, err := e.app.Runs.ResumeRun.Handle(testutil.Context(t), runs.ResumeRun{Auth: e.Auth, RunID: id}); err != nil {
		t.Fatal(err)
	}
	e.Settle(t)
	e.drive(t, x, 1)
	v := e.run(t, id)
	if v.State != domain.RunStateSucceeded || v.StepSeq != 3 {
		t.Fatalf("got run %s after %d steps; want succeeded after 3", v.State, v.StepSeq)
	}
	var got []string
	for _, s := range e.steps(t, id) {
		got = append(got, s.Action)
	}
	if strings.Join(got, " ") != "open_app key open_app" {
		t.Errorf("got steps %v; want open_app key open_app", got)
	}
}

// TestRunExecutorRetriesAndErrors: an action refused as stale_frame (the
// screen changed while deciding) is decided again on a new observation
// under a new key; a device's failure is given back to the planner as the
// step's result; the claim is renewed while the run is driven.
func TestRunExecutorRetriesAndErrors(t *testing.T) {
	e := startRunEnv(t, 1)
	model := scriptedLLM(t, "key home\nopen com.example.nothing\nfinish succeeded")
	var id string
	var x *workers.RunExecutor
	model.hook = func(n int, in planner.Input) {
		if n == 1 {
			// Someone changes the screen between the observation and the
			// action (here: an action of the run itself).
			acc := runs.RunAccess{RunID: id, Worker: x.Worker()}
			if _, err := e.app.Runs.RunAct.Handle(testutil.Context(t), runs.RunAct{Access: acc, Action: "open_app",
				Arguments: json.RawMessage(`{"package":"com.example.notes"}`), IdempotencyKey: "meddler"}); err != nil {
				t.Error(err)
			}
		}
		e.clock.Advance(20 * time.Second) // past half the claim's 30 s
	}
	id = e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) { c.Goal = "go home" })
	x = e.executor(model)
	e.drive(t, x, 1)
	v := e.run(t, id)
	if v.State != domain.RunStateFailed || deref(v.Reason) != planner.ReasonStepFailed {
		t.Fatalf("got run %s (%s: %s); want failed step_failed", v.State, deref(v.Reason), deref(v.Detail))
	}
	var keys []string
	for _, s := range e.steps(t, id) {
		keys = append(keys, s.IdempotencyKey)
	}
	// The refused attempt may be recorded as a failed step (the stale
	// frame found when the action ran); the retry has a key of its own.
	if len(keys) != 2 || keys[0] != "meddler" || !strings.HasPrefix(keys[1], id+"/step-") || !strings.HasSuffix(keys[1], "/1") {
		t.Errorf("got committed steps %v; want meddler, then the retry under attempt 1's key", keys)
	}
	model.mu.Lock()
	inputs := model.inputs
	model.mu.Unlock()
	last := inputs[len(inputs)-1]
	if len(last.History) != 2 || last.History[1].Action != "open_app" || last.History[1].Error == "" {
		t.Errorf("got history %+v; want the failed open_app given back", last.History)
	}
	var claims int
	if err := e.Pool.QueryRow(bg, `SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'run.claimed'`,
		domain.RunStream(id)).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims < 2 {
		t.Errorf("got %d claims; want the claim renewed while driving", claims)
	}
}

// TestRunDeadlinesSweep: the sweep ends a run past its deadline, once.
func TestRunDeadlinesSweep(t *testing.T) {
	e := startRunEnv(t, 1)
	id := e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) { c.Goal = "key home"; c.DeadlineSeconds = 60 })
	w := workers.RunDeadlines{End: e.app.Runs.EndOverdueRun, Pool: e.Pool, Now: e.clock.Now}
	for _, tt := range []struct {
		name    string
		advance time.Duration
		want    int
	}{{"before the deadline", 59 * time.Second, 0}, {"past the deadline", 2 * time.Second, 1}, {"already ended", time.Second, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			e.clock.Advance(tt.advance)
			e.Settle(t)
			n, err := w.RunOnce(bg)
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want {
				t.Errorf("got %d runs ended; want %d", n, tt.want)
			}
		})
	}
	e.Settle(t)
	if v := e.run(t, id); v.State != domain.RunStateFailed || deref(v.Reason) != domain.RunReasonDeadline {
		t.Errorf("got run %s (%s); want failed deadline_exceeded", v.State, deref(v.Reason))
	}
}

// TestRunExecutorTakeoverDoesNotRepeatAParkedStep: a scripted needs-user
// step right after an action parks the run once, whoever drives it. An
// executor taking the run over from one that is gone (a new process has
// none of the old one's memory) goes on after the parked step: no second
// run.parked, no second notification. Both ways the old holder can die
// around that step: right after parking (the run resumed by a person),
// and between its action and the needs-user step (its claim lapsing).
func TestRunExecutorTakeoverDoesNotRepeatAParkedStep(t *testing.T) {
	e := startRunEnv(t, 2)
	notes := notificationsOf(t, e)
	const goal = "open com.example.notes\nneeds-user sign in please\nkey home\nfinish succeeded"
	resume := func(t *testing.T, id string) {
		t.Helper()
		if v := e.run(t, id); v.State != domain.RunStateAwaitingUser || v.StepSeq != 1 {
			t.Fatalf("got run %s after %d steps; want awaiting_user after 1", v.State, v.StepSeq)
		}
		if _, err := e.app.Runs.ResumeRun.Handle(testutil.Context(t), runs.ResumeRun{Auth: e.Auth, RunID: id}); err != nil {
			t.Fatal(err)
		}
		e.Settle(t)
	}
	ended := func(t *testing.T, id string) {
		t.Helper()
		if v := e.run(t, id); v.State != domain.RunStateSucceeded || v.StepSeq != 2 {
			t.Errorf("got run %s after %d steps (%s: %s); want succeeded after 2", v.State, v.StepSeq, deref(v.Reason), deref(v.Detail))
		}
		var parked int
		if err := e.Pool.QueryRow(bg, `SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'run.parked'`,
			domain.RunStream(id)).Scan(&parked); err != nil {
			t.Fatal(err)
		}
		if parked != 1 {
			t.Errorf("got %d run.parked events; want 1", parked)
		}
		if n := notes(t, id); n != 1 {
			t.Errorf("got %d run_needs_user notifications; want 1", n)
		}
		var got []string
		for _, s := range e.steps(t, id) {
			got = append(got, s.Action)
		}
		if strings.Join(got, " ") != "open_app key" {
			t.Errorf("got steps %v; want open_app key", got)
		}
	}

	t.Run("holder gone right after parking", func(t *testing.T) {
		id := e.start(t, e.DeviceIDs[0], func(c *runs.StartRun) { c.Goal = goal })
		e.drive(t, e.executor(nil), 1)
		resume(t, id)
		e.drive(t, e.executor(nil), 1) // another process takes it over
		ended(t, id)
	})

	t.Run("holder gone between its action and the needs-user step", func(t *testing.T) {
		id := e.start(t, e.DeviceIDs[1], func(c *runs.StartRun) { c.Goal = goal })
		// The first holder claims the run, takes its first step under the
		// executor's key and dies before deciding the next one.
		acc := runs.RunAccess{RunID: id, Worker: "gone"}
		if _, err := e.app.Runs.ClaimRun.Handle(testutil.Context(t), runs.ClaimRun{RunID: id, Worker: "gone", TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.app.Runs.RunAct.Handle(testutil.Context(t), runs.RunAct{Access: acc, Action: "open_app",
			Arguments: json.RawMessage(`{"package":"com.example.notes"}`), IdempotencyKey: id + "/step-1/0"}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(31 * time.Second) // its claim lapses
		e.Settle(t)
		e.drive(t, e.executor(nil), 1) // parks at the needs-user step
		resume(t, id)
		e.drive(t, e.executor(nil), 1) // and another one takes it over again
		ended(t, id)
	})
}

// notificationsOf runs the notifications read model beside e's and returns
// how many run_needs_user notifications a run raised.
func notificationsOf(t *testing.T, e *runEnv) func(t *testing.T, runID string) int {
	t.Helper()
	rm := runReadModels(t, e.Store, projections.Notifications{})
	return func(t *testing.T, runID string) int {
		t.Helper()
		last, err := e.Store.Last(testutil.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := (testutil.ReadModels{RM: rm}).WaitFor(testutil.Context(t), projections.NotificationsName, last); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := e.Pool.QueryRow(bg, `SELECT count(*) FROM notification_triggers WHERE kind = $1 AND facts->>'runId' = $2`,
			domain.NotifyRunNeedsUser, runID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}
