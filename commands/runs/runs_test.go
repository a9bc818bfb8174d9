package runs_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// phoneInputs is how many inputs a sim phone has accepted: its logical
// clock advances by one step per accepted input and never otherwise.
func phoneInputs(t *testing.T, env *fleettest.Env, dev string) int {
	t.Helper()
	return int(env.Phone(t, dev).Phone().Clock().Sub(sim.ClockStart()) / sim.ClockStep)
}

// TestRunLifecycle walks an external run through the device surface:
// start (the device's lease is the run's), observe, act (receipt on the
// starter, attributed to the run), park for a person (the lease passes to
// them), resume (handed back), finish; the token is dead afterwards and
// the device free.
func TestRunLifecycle(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1, WaitForReceipts: true})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	if s.Run.State != domain.RunStateRunning || s.Run.DeviceID != dev || s.Run.AgentRunID == "" {
		t.Fatalf("started %+v", s.Run)
	}
	if l := leaseHolder(t, env, dev); l.RunID != s.Run.RunID {
		t.Fatalf("lease holder %+v, want the run", l)
	}
	// Someone else cannot take the device.
	if _, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("acquire during run: %v", err)
	}
	acc := fleettest.RunToken(t, s)
	obs, err := env.App.Runs.RunObserve.Handle(testutil.Background, runs.RunObserve{Access: acc, Image: "jpeg", MaxWidth: 360})
	if err != nil {
		t.Fatal(err)
	}
	if obs.ContentType != "image/jpeg" || obs.ImageWidth != 360 || len(obs.Elements) == 0 {
		t.Fatalf("observation: %s %dx%d, %d elements", obs.ContentType, obs.ImageWidth, obs.ImageHeight, len(obs.Elements))
	}
	out, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "open_app", Arguments: json.RawMessage(`{"package":"com.example.notes"}`),
		IdempotencyKey: "step-1", ObservedFrame: obs.Frame.FrameID})
	if err != nil {
		t.Fatal(err)
	}
	if out.Receipt.Actor.UserID != env.Auth.UserID || out.Receipt.AgentRunID != s.Run.AgentRunID {
		t.Fatalf("receipt %+v", out.Receipt)
	}
	// A stale frame is refused and takes no step.
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"BACK"}`),
		IdempotencyKey: "step-2", ObservedFrame: obs.Frame.FrameID}); domain.ErrorCode(err) != domain.CodeStaleFrame {
		t.Fatalf("stale frame: %v", err)
	}
	parked, err := env.App.Runs.RunNeedsUser.Handle(testutil.Background, runs.RunNeedsUser{Access: acc, Reason: "captcha", DeadlineSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if parked.State != domain.RunStateAwaitingUser || parked.ParkDeadlineAt == nil {
		t.Fatalf("parked %+v", parked)
	}
	// The worker cannot act while parked; a person can take the device.
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`),
		IdempotencyKey: "step-3"}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("act while parked: %v", err)
	}
	person := env.Auth
	l, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: person, DeviceID: dev})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Fleet.PerformAction().Handle(testutil.Background, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
		Arguments: json.RawMessage(`{"key":"BACK"}`), IdempotencyKey: "person-1", LeaseID: l.LeaseID}); err != nil {
		t.Fatal(err)
	}
	resumed, err := env.App.Runs.ResumeRun.Handle(testutil.Background, runs.ResumeRun{Auth: person, RunID: s.Run.AgentRunID})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.State != domain.RunStateRunning {
		t.Fatalf("resumed %+v", resumed)
	}
	if l := leaseHolder(t, env, dev); l.RunID != s.Run.RunID {
		t.Fatalf("lease after resume held by %+v", l)
	}
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`),
		IdempotencyKey: "step-4"}); err != nil {
		t.Fatal(err)
	}
	done, err := env.App.Runs.RunFinish.Handle(testutil.Background, runs.RunFinish{Access: acc, State: domain.RunStateSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	if done.State != domain.RunStateSucceeded || done.StepSeq != 3 || done.EndedAt == nil {
		t.Fatalf("finished %+v", done)
	}
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: acc}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("token after the end: %v", err)
	}
	if _, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
		t.Fatalf("device not free after the run: %v", err)
	}
	frames, err := env.App.Runs.ListRunFrames.Handle(testutil.Background, runs.ListRunFrames{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if len(frames.Frames) < 2 {
		t.Fatalf("run frames %+v", frames.Frames)
	}
	env.Settle(t)
	script, err := env.App.Runs.GetRunScript.Handle(testutil.Background, runs.GetRunScript{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if len(script.Steps) != 3 || script.Steps[0].Action != "open_app" || script.Steps[0].ExpectScreen == "" || script.Steps[2].Finish != "succeeded" {
		t.Fatalf("script %+v", script)
	}
	if _, err := domain.ParseRunScript(mustJSON(t, script)); err != nil {
		t.Fatalf("exported script does not parse: %v", err)
	}
}

// leaseHolder is who holds the device's lease in force (zero: nobody).
func leaseHolder(t *testing.T, env *fleettest.Env, dev string) domain.ReceiptActor {
	t.Helper()
	p, err := env.App.Fleet.ListLeases.Handle(testutil.Background, fleet.ListLeases{Auth: env.Auth, LeaseQuery: fleet.LeaseQuery{DeviceID: dev}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Leases) == 0 {
		return domain.ReceiptActor{}
	}
	return p.Leases[0].Holder
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunCancelKillsTokenAndFreesDevice: cancelling answers the run
// cancelled, its token stops working at once, its device is free.
func TestRunCancelKillsTokenAndFreesDevice(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	acc := fleettest.RunToken(t, s)
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: acc}); err != nil {
		t.Fatal(err)
	}
	v, err := env.App.Runs.CancelRun.Handle(testutil.Background, runs.CancelRun{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != domain.RunStateCancelled {
		t.Fatalf("cancelled %+v", v)
	}
	if _, err := env.App.Runs.RunObserve.Handle(testutil.Background, runs.RunObserve{Access: acc}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("observe after cancel: %v", err)
	}
	if _, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
		t.Fatalf("device not free after cancel: %v", err)
	}
	// Cancelling again changes nothing; pausing an ended run is refused.
	if v, err := env.App.Runs.CancelRun.Handle(testutil.Background, runs.CancelRun{Auth: env.Auth, RunID: s.Run.RunID}); err != nil || v.State != domain.RunStateCancelled {
		t.Fatalf("second cancel: %+v %v", v, err)
	}
	if _, err := env.App.Runs.PauseRun.Handle(testutil.Background, runs.PauseRun{Auth: env.Auth, RunID: s.Run.RunID}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Fatalf("pause after cancel: %v", err)
	}
}

// TestRunTenancyAndTokens: another organisation's run is a missing one;
// a forged, malformed or other run's token is refused alike.
func TestRunTenancyAndTokens(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 2})
	s := fleettest.StartExternalRun(t, env, env.DeviceIDs[0], nil)
	other := domain.LocalOperator(domain.NewID(domain.PrefixOrganisation))
	for _, id := range []string{s.Run.RunID, s.Run.AgentRunID, "run_x", ""} {
		if _, err := env.App.Runs.GetRun.Handle(testutil.Background, runs.GetRun{Auth: other, RunID: id}); domain.ErrorCode(err) != domain.CodeRunNotFound {
			t.Fatalf("other org get %q: %v", id, err)
		}
		if _, err := env.App.Runs.CancelRun.Handle(testutil.Background, runs.CancelRun{Auth: other, RunID: id}); domain.ErrorCode(err) != domain.CodeRunNotFound {
			t.Fatalf("other org cancel %q: %v", id, err)
		}
	}
	good := fleettest.RunToken(t, s).Token
	forged := good[:len(good)-2] + "AA"
	if forged == good {
		forged = good[:len(good)-2] + "BB"
	}
	for _, tok := range []string{forged, "pbk_abc_def", "", "vrx_", good + "x"} {
		_, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: runs.RunAccess{Token: tok}})
		if domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
	// The right token naming another device is refused too.
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: fleettest.RunToken(t, s), DeviceID: env.DeviceIDs[1], Action: "key",
		Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "k"}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("wrong device: %v", err)
	}
}

// TestRunMaxStepsEndsFailed: the step past maxSteps ends the run failed
// with max_steps_exceeded and acts on nothing.
func TestRunMaxStepsEndsFailed(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, func(c *runs.StartRun) { c.MaxSteps = 1 })
	acc := fleettest.RunToken(t, s)
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "a"}); err != nil {
		t.Fatal(err)
	}
	before := phoneInputs(t, env, dev)
	// The last step's key asked again answers that step: it is not a step
	// past maxSteps.
	if out, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "a"}); err != nil || !out.Replayed {
		t.Fatalf("the last step's key again: replayed %v, %v; want its replay", out.Replayed, err)
	}
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "b"}); domain.ErrorCode(err) != domain.CodeCapabilityUnsupported {
		t.Fatalf("step past maxSteps: %v", err)
	}
	if phoneInputs(t, env, dev) != before {
		t.Fatal("the step past maxSteps acted")
	}
	v, err := env.App.Runs.GetRun.Handle(testutil.Background, runs.GetRun{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != domain.RunStateFailed || v.Reason == nil || *v.Reason != domain.RunReasonMaxSteps {
		t.Fatalf("run %+v", v)
	}
}

// TestRunSuccessCheck: a succeeded that fails the check ends failed with
// success_check_failed; one that holds is accepted.
func TestRunSuccessCheck(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 2})
	check := &domain.SuccessCheck{App: "com.example.notes"}
	bad := fleettest.StartExternalRun(t, env, env.DeviceIDs[0], func(c *runs.StartRun) { c.SuccessCheck = check })
	v, err := env.App.Runs.RunFinish.Handle(testutil.Background, runs.RunFinish{Access: fleettest.RunToken(t, bad), State: domain.RunStateSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != domain.RunStateFailed || *v.Reason != domain.RunReasonSuccessCheckFailed || v.Detail == nil {
		t.Fatalf("false success: %+v", v)
	}
	good := fleettest.StartExternalRun(t, env, env.DeviceIDs[1], func(c *runs.StartRun) { c.SuccessCheck = check })
	acc := fleettest.RunToken(t, good)
	if _, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "open_app", Arguments: json.RawMessage(`{"package":"com.example.notes"}`), IdempotencyKey: "open"}); err != nil {
		t.Fatal(err)
	}
	v, err = env.App.Runs.RunFinish.Handle(testutil.Background, runs.RunFinish{Access: acc, State: domain.RunStateSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != domain.RunStateSucceeded {
		t.Fatalf("true success refused: %+v (%v)", v, deref(v.Detail))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestRunClaimOneWinner: of many workers claiming one queued run, exactly
// one wins; the run's executor credential works only for it.
func TestRunClaimOneWinner(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	s, err := env.App.Runs.StartRun.Handle(testutil.Background, runs.StartRun{Auth: env.Auth, DeviceID: env.DeviceIDs[0], Goal: "tap 1 1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Run.State != domain.RunStateQueued {
		t.Fatalf("builtin run starts %s", s.Run.State)
	}
	var wg sync.WaitGroup
	wins := make(chan string, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := "worker-" + string(rune('a'+i))
			if _, err := env.App.Runs.ClaimRun.Handle(testutil.Background, runs.ClaimRun{RunID: s.Run.RunID, Worker: w, TTL: time.Minute}); err == nil {
				wins <- w
			}
		}()
	}
	wg.Wait()
	close(wins)
	var winners []string
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("winners %v", winners)
	}
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: runs.RunAccess{RunID: s.Run.RunID, Worker: winners[0]}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: runs.RunAccess{RunID: s.Run.RunID, Worker: "someone-else"}}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("loser's access: %v", err)
	}
	// Pausing lets the claim go; resuming queues the run again.
	if _, err := env.App.Runs.PauseRun.Handle(testutil.Background, runs.PauseRun{Auth: env.Auth, RunID: s.Run.RunID}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: runs.RunAccess{RunID: s.Run.RunID, Worker: winners[0]}}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("access after pause: %v", err)
	}
	v, err := env.App.Runs.ResumeRun.Handle(testutil.Background, runs.ResumeRun{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil || v.State != domain.RunStateQueued {
		t.Fatalf("resumed %+v %v", v, err)
	}
}

// TestRunDeadlines: with an injected clock, a run past its deadline, and a
// parked run past its wait, end failed with their reasons and free the
// device.
func TestRunDeadlines(t *testing.T) {
	clock := fleettest.NewClock(time.Now())
	env := fleettest.Start(t, fleettest.Options{Devices: 2, Clock: clock})
	late := fleettest.StartExternalRun(t, env, env.DeviceIDs[0], func(c *runs.StartRun) { c.DeadlineSeconds = 60 })
	parked := fleettest.StartExternalRun(t, env, env.DeviceIDs[1], nil)
	if _, err := env.App.Runs.RunNeedsUser.Handle(testutil.Background, runs.RunNeedsUser{Access: fleettest.RunToken(t, parked), DeadlineSeconds: 120}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(61 * time.Second)
	if _, err := env.App.Runs.RunInfo.Handle(testutil.Background, runs.RunInfo{Access: fleettest.RunToken(t, late)}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("expired token: %v", err)
	}
	env.Settle(t)
	due, err := projections.RunsOverdue(testutil.Background, env.Pool, clock.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].RunID != late.Run.RunID {
		t.Fatalf("overdue at +61s: %+v", due)
	}
	clock.Advance(60 * time.Second)
	for _, id := range []string{late.Run.RunID, parked.Run.RunID} {
		ended, err := env.App.Runs.EndOverdueRun.Handle(testutil.Background, runs.EndOverdueRun{RunID: id})
		if err != nil || !ended {
			t.Fatalf("end overdue %s: %v %v", id, ended, err)
		}
	}
	for id, reason := range map[string]string{late.Run.RunID: domain.RunReasonDeadline, parked.Run.RunID: domain.RunReasonUserControlTimeout} {
		v, err := env.App.Runs.GetRun.Handle(testutil.Background, runs.GetRun{Auth: env.Auth, RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		if v.State != domain.RunStateFailed || deref(v.Reason) != reason {
			t.Fatalf("run %s: %+v", id, v)
		}
	}
	for _, dev := range env.DeviceIDs {
		if _, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
			t.Fatalf("device %s not free: %v", dev, err)
		}
	}
}

// TestStartAnyFreeDevice: without a device, a start takes a free one; with
// none free it is refused, retryable.
func TestStartAnyFreeDevice(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 2})
	seen := map[string]bool{}
	for range 2 {
		s := fleettest.StartExternalRun(t, env, "", nil)
		seen[s.Run.DeviceID] = true
	}
	if len(seen) != 2 {
		t.Fatalf("devices %v", seen)
	}
	_, err := env.App.Runs.StartRun.Handle(testutil.Background, runs.StartRun{Auth: env.Auth, Goal: "x", Executor: domain.ExecutorExternal})
	if de := domain.AsError(err); domain.ErrorCode(err) != domain.CodeDeviceUnavailable || de.Retryable == nil || !*de.Retryable {
		t.Fatalf("no free device: %v", err)
	}
}

// gatedAct holds every action at the phone until its gate opens.
type gatedAct struct {
	domain.Backend
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedAct) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Backend.Act(ctx, a)
}

// TestRunCancelMidAction: a run cancelled while its action is at the phone
// ends cancelled at once (its token dead from the next request, its device
// free); the action in flight still reaches one outcome, recorded once, so
// the run's receipts hold no pending one.
func TestRunCancelMidAction(t *testing.T) {
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	env := fleettest.Start(t, fleettest.Options{Devices: 1, WaitForReceipts: true, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return gatedAct{Backend: b, entered: entered, gate: gate}
	}})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	acc := fleettest.RunToken(t, s)
	type result struct {
		out fleet.ActOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "mid"})
		done <- result{out, err}
	}()
	<-entered
	if v, err := env.App.Runs.CancelRun.Handle(testutil.Background, runs.CancelRun{Auth: env.Auth, RunID: s.Run.RunID}); err != nil || v.State != domain.RunStateCancelled {
		t.Fatalf("cancel mid-action: %+v %v", v, err)
	}
	if _, err := env.App.Runs.RunObserve.Handle(testutil.Background, runs.RunObserve{Access: acc, Image: "none"}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("token after cancel: %v", err)
	}
	close(gate)
	r := <-done
	if r.err != nil {
		t.Logf("the action in flight answered %v", r.err)
	}
	page, err := env.App.Fleet.ListReceipts.Handle(testutil.Background, fleet.ListReceipts{Auth: env.Auth, ReceiptQuery: fleet.ReceiptQuery{AgentRunID: &s.Run.AgentRunID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Receipts) != 1 || page.Receipts[0].State == "pending" {
		t.Fatalf("receipts of the cancelled run: %+v", page.Receipts)
	}
	if (r.err == nil) != (page.Receipts[0].State == "committed") {
		t.Fatalf("the caller heard %v but the receipt says %s", r.err, page.Receipts[0].State)
	}
	if _, err := env.Fleet.AcquireLease().Handle(testutil.Background, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
		t.Fatalf("device not free after cancel: %v", err)
	}
}

// TestRunNeedsUserParksAScriptStepOnce: a script step that parked the run
// does not park it again when asked again after the resume (an executor
// that took the run over from one that parked it): the run goes on holding
// its device, and nothing is recorded. A later step parks it.
func TestRunNeedsUserParksAScriptStepOnce(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1, WaitForReceipts: true})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	acc := fleettest.RunToken(t, s)
	park := func(step int) projections.RunView {
		t.Helper()
		v, err := env.App.Runs.RunNeedsUser.Handle(testutil.Background, runs.RunNeedsUser{Access: acc, Reason: "sign in", Step: step})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	resume := func() {
		t.Helper()
		if _, err := env.App.Runs.ResumeRun.Handle(testutil.Background, runs.ResumeRun{Auth: env.Auth, RunID: s.Run.RunID}); err != nil {
			t.Fatal(err)
		}
	}
	parkedEvents := func() int {
		t.Helper()
		var n int
		if err := env.Pool.QueryRow(testutil.Background, `SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'run.parked'`,
			domain.RunStream(s.Run.RunID)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if v := park(2); v.State != domain.RunStateAwaitingUser {
		t.Fatalf("got run %s after step 2 asked; want awaiting_user", v.State)
	}
	resume()
	if v := park(2); v.State != domain.RunStateRunning {
		t.Errorf("got run %s after step 2 asked again; want running", v.State)
	}
	if l := leaseHolder(t, env, dev); l.RunID != s.Run.RunID {
		t.Errorf("got the lease held by %+v after step 2 asked again; want the run", l)
	}
	if n := parkedEvents(); n != 1 {
		t.Errorf("got %d run.parked events; want 1", n)
	}
	if v := park(4); v.State != domain.RunStateAwaitingUser {
		t.Errorf("got run %s after step 4 asked; want awaiting_user", v.State)
	}
	if n := parkedEvents(); n != 2 {
		t.Errorf("got %d run.parked events after step 4; want 2", n)
	}
}
