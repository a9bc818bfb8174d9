package service

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/copilot"
	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// sweeperAt is the copilot sweep as another process runs it (it runs no
// turn), on an injected clock, giving leases back through the fleet.
func sweeperAt(s *copilotService, clock *testutil.Clock) workers.CopilotSweeps {
	other := copilot.New(copilot.Config{Store: s.a.store, ReadModels: s.a.runner, Queries: projections.CopilotQueries{DB: s.a.db.Pool}, Now: clock.Now})
	h := other.Handlers(cqrs.Decorator{}, copilot.Devices{ReleaseLease: s.a.app.Fleet.ReleaseLease})
	return workers.CopilotSweeps{Sweep: h.SweepThread, Pool: s.a.db.Pool, Now: clock.Now}
}

// TestCopilotSweepExpiresApprovals: an approval nobody decided is recorded
// expired by the sweep once its time has passed (injected clock), not
// before, and only once.
func TestCopilotSweepExpiresApprovals(t *testing.T) {
	s := startCopilotService(t)
	s.model.play(func(req modelRequest, w *modelStream) {
		w.call("key", `{"key":"HOME"}`)
		w.done(5, 1)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"go home","approveEveryAction":true}`, http.StatusAccepted)
	s.settled(posted["threadId"].(string))
	pending := s.call(s.person, "GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
	if len(pending) != 1 {
		t.Fatalf("pending approvals %v; want one", pending)
	}
	ap := pending[0].(map[string]any)
	expires, err := time.Parse(time.RFC3339Nano, ap["expiresAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	clock := testutil.NewClock(expires.Add(-time.Second))
	sweep := sweeperAt(s, clock)
	if n, err := sweep.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep before the expiry: %d, %v; want nothing recorded", n, err)
	}
	clock.Set(expires)
	if n, err := sweep.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep at the expiry: %d, %v; want one thread swept", n, err)
	}
	got := s.call(s.person, "GET", "/v1/copilot/approvals", "", http.StatusOK)["approvals"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["state"] != "expired" {
		t.Fatalf("approvals %v; want the one, expired", got)
	}
	if n, err := sweep.RunOnce(ctx); err != nil || n != 0 {
		t.Errorf("a second sweep: %d, %v; want nothing more recorded", n, err)
	}
	// Deciding now answers its state.
	out := s.call(s.person, "POST", "/v1/copilot/approvals",
		`{"approvalId":"`+ap["approvalId"].(string)+`","decision":"approve","digest":"`+ap["digest"].(string)+`"}`, http.StatusConflict)
	if e := out["error"].(map[string]any); e["code"] != "wrong_state" || e["state"] != "expired" {
		t.Errorf("a yes after the sweep: %v; want wrong_state, expired", e)
	}
}

// TestCopilotSweepEndsALostTurn: a turn in flight that records nothing
// past the bound, run by no process that sweeps (here: the sweeping
// process is another one, and the turn waits on a model that does not
// answer), is ended failed with reason turn_lost; the thread takes a new
// message, and the old turn, when its model answers at last, acts no more.
func TestCopilotSweepEndsALostTurn(t *testing.T) {
	s := startCopilotService(t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	s.model.play(func(req modelRequest, w *modelStream) {
		<-release
		w.call("key", `{"key":"HOME"}`)
		w.done(5, 1)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"go home"}`, http.StatusAccepted)
	threadID := posted["threadId"].(string)
	ctx := testutil.Context(t)
	clock := testutil.NewClock(time.Now().Add(domain.CopilotTurnLostAfter - time.Minute))
	sweep := sweeperAt(s, clock)
	if n, err := sweep.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep within the bound: %d, %v; want nothing recorded", n, err)
	}
	clock.Advance(2 * time.Minute)
	if n, err := sweep.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep past the bound: %d, %v; want the thread swept", n, err)
	}
	thread := s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)
	ends := items(thread, "turn_ended")
	if len(ends) != 1 || ends[0]["outcome"] != "failed" || ends[0]["reason"] != "turn_lost" {
		t.Fatalf("turn ends %v; want one, failed, turn_lost", ends)
	}
	before := s.receiptCount()
	free()
	s.settled(threadID)
	if n := s.receiptCount(); n != before {
		t.Errorf("receipts %d; want %d (the lost turn acted after its end)", n, before)
	}
	if calls := items(s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK), "tool_call"); len(calls) != 0 {
		t.Errorf("tool calls %v; want none from the lost turn", calls)
	}

	// The thread is usable again.
	s.model.play(func(req modelRequest, w *modelStream) {
		w.text("Hello again.")
		w.done(3, 1)
	})
	s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","message":"are you there?"}`, http.StatusAccepted)
	if head := s.settled(threadID)["thread"].(map[string]any); head["lastOutcome"] != "completed" {
		t.Errorf("thread %v; want its new turn completed", head)
	}

	// The read model rebuilds to the same rows.
	rows := copilotRows(t, s.a)
	if err := s.a.runner.Rebuild(ctx, projections.CopilotName, nil); err != nil {
		t.Fatal(err)
	}
	if after := copilotRows(t, s.a); after != rows {
		t.Fatalf("rebuild changed the rows:\nbefore %s\nafter  %s", rows, after)
	}
}

// TestCopilotSweepGivesBackALostTurnsLease: a turn that took a lease for
// itself (the person held none), acted, then went quiet, is ended lost by
// the sweep, which gives that lease back: the phone is free at once, not
// when the lease's time runs out. A turn that acted under the person's own
// lease (taken by hand) and went quiet is ended too, and the person's
// lease stays theirs.
func TestCopilotSweepGivesBackALostTurnsLease(t *testing.T) {
	s := startCopilotService(t)
	ctx := testutil.Context(t)
	// lose scripts a turn that presses HOME, then waits on a model that
	// answers only when released, and has the sweep end it lost.
	lose := func(message string) (threadID string, free func()) {
		t.Helper()
		release := make(chan struct{})
		var once sync.Once
		free = func() { once.Do(func() { close(release) }) }
		t.Cleanup(free)
		pressed := make(chan struct{}, 1)
		s.model.play(func(req modelRequest, w *modelStream) {
			if req.toolResults() == 0 {
				w.call("key", `{"key":"HOME"}`)
				w.done(5, 1)
				return
			}
			pressed <- struct{}{}
			<-release
			w.text("Done.")
			w.done(5, 1)
		})
		posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"`+message+`"}`, http.StatusAccepted)
		threadID = posted["threadId"].(string)
		select {
		case <-pressed:
		case <-time.After(60 * time.Second):
			t.Fatal("the turn never pressed HOME")
		}
		clock := testutil.NewClock(time.Now().Add(domain.CopilotTurnLostAfter + time.Minute))
		if n, err := sweeperAt(s, clock).RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("a sweep past the bound: %d, %v; want the thread swept", n, err)
		}
		ends := items(s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK), "turn_ended")
		if len(ends) != 1 || ends[0]["reason"] != "turn_lost" {
			t.Fatalf("turn ends %v; want one, turn_lost", ends)
		}
		return threadID, free
	}
	leases := func() []any {
		t.Helper()
		if err := cqrs.AwaitAll(ctx, s.a.store, s.a.runner, projections.LeasesName); err != nil {
			t.Fatal(err)
		}
		return s.call(s.person, "GET", "/v1/leases", "", http.StatusOK)["leases"].([]any)
	}

	// The turn's own lease is given back by the sweep.
	threadID, free := lose("go home")
	if ls := leases(); len(ls) != 0 {
		t.Fatalf("leases after the sweep ended the lost turn: %v; want none (the turn's lease given back)", ls)
	}
	free()
	s.settled(threadID)

	// The person's own lease is not the turn's to give back.
	mine := s.call(s.person, "POST", "/v1/devices/"+s.device+"/lease", `{"ttlSeconds":600}`, http.StatusCreated)
	threadID, free = lose("go home again")
	ls := leases()
	if len(ls) != 1 || ls[0].(map[string]any)["leaseId"] != mine["leaseId"] {
		t.Fatalf("leases after the sweep: %v; want the person's own %v, still in force", ls, mine["leaseId"])
	}
	free()
	s.settled(threadID)
	if ls := leases(); len(ls) != 1 || ls[0].(map[string]any)["leaseId"] != mine["leaseId"] {
		t.Errorf("leases after the lost turn woke: %v; want the person's own still in force", ls)
	}
}
