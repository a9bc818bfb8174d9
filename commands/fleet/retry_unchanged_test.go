package fleet_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil/fleettest"
)

// TestRetryIfUnchanged: a retry with the same key and retryIfUnchanged
// acts again only when the latest attempt committed without effect, each
// attempt an action with its own receipt (<key>#<n>), at most
// domain.MaxActionAttempts; two such retries racing act once; a retry
// without it, or of an action that changed the screen, never acts.
func TestRetryIfUnchanged(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	retry := func(key, action, args string) (fleet.ActOutcome, error) {
		return env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: action,
			Arguments: json.RawMessage(args), IdempotencyKey: key, LeaseID: lease, RetryIfUnchanged: true})
	}
	receiptUnder := func(key string) bool {
		_, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: key})
		if err != nil && codeOf(err) != domain.CodeReceiptNotFound {
			t.Fatalf("receipt %s: %v", key, err)
		}
		return err == nil
	}

	if _, err := act(env, dev, lease, "open", "open_app", `{"package":"com.example.notes"}`); err != nil {
		t.Fatal(err)
	}
	_, root := observeTree(t, env, dev)
	x, y := emptySpot(t, root)
	empty := fmt.Sprintf(`{"x":%d,"y":%d}`, x, y)

	// A first request with the flag is an ordinary first attempt.
	out, err := retry("k", "tap", empty)
	if err != nil || out.Replayed || out.Receipt.IdempotencyKey != "k" || out.Receipt.Effect == nil ||
		out.Receipt.Effect.State != domain.EffectUnchanged {
		t.Fatalf("first tap on empty space: %+v, %v; want a new receipt under k, effect unchanged", out.Receipt, err)
	}
	// Without the flag a retry answers the recorded outcome and acts not.
	before := inputs(t, env, dev)
	if out, err := act(env, dev, lease, "k", "tap", empty); err != nil || !out.Replayed || out.Receipt.IdempotencyKey != "k" {
		t.Fatalf("plain retry: %+v, %v; want k's outcome replayed", out.Receipt, err)
	}
	if got := inputs(t, env, dev); got != before {
		t.Fatalf("a plain retry sent %d inputs; want none", got-before)
	}

	// Two retries with the flag racing: one second attempt, one input.
	// Racing means both choose their key before either records it: a
	// retry that starts after the other's attempt committed without effect
	// rightly goes under k#3. The idempotency table is held in SHARE mode
	// (reads go on, inserts wait) until both are waiting to record.
	var wg sync.WaitGroup
	outs, errs := make([]fleet.ActOutcome, 2), make([]error, 2)
	hold, err := env.Pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(bg, `LOCK TABLE action_idempotency IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = retry("k", "tap", empty)
		}()
	}
	waitLockWaiters(t, env, 2)
	if err := hold.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	fresh := 0
	for i := range outs {
		switch {
		case errs[i] == nil && !outs[i].Replayed:
			fresh++
			if outs[i].Receipt.IdempotencyKey != "k#2" {
				t.Errorf("the new attempt's receipt is under %q; want k#2", outs[i].Receipt.IdempotencyKey)
			}
		case errs[i] == nil:
			if outs[i].Receipt.IdempotencyKey != "k#2" {
				t.Errorf("the replayed answer is %q's; want k#2's", outs[i].Receipt.IdempotencyKey)
			}
		case codeOf(errs[i]) == domain.CodeIdempotencyConflict && *domain.AsError(errs[i]).Retryable:
		default:
			t.Errorf("racing retry: %v", errs[i])
		}
	}
	if fresh != 1 || inputs(t, env, dev) != before+1 || receiptUnder("k#3") {
		t.Fatalf("two racing retries: %d new attempts, %d inputs, k#3 recorded %v; want one, one, false",
			fresh, inputs(t, env, dev)-before, receiptUnder("k#3"))
	}

	// Up to the last attempt, then the last one's outcome answers.
	for n := 3; n <= domain.MaxActionAttempts; n++ {
		if out, err := retry("k", "tap", empty); err != nil || out.Replayed || out.Receipt.IdempotencyKey != domain.AttemptKey("k", n) {
			t.Fatalf("attempt %d: %+v, %v; want a new receipt under %s", n, out.Receipt, err, domain.AttemptKey("k", n))
		}
	}
	before = inputs(t, env, dev)
	last := domain.AttemptKey("k", domain.MaxActionAttempts)
	if out, err := retry("k", "tap", empty); err != nil || !out.Replayed || out.Receipt.IdempotencyKey != last {
		t.Fatalf("past the last attempt: %+v, %v; want %s replayed", out.Receipt, err, last)
	}
	if inputs(t, env, dev) != before {
		t.Fatal("a retry past the last attempt acted")
	}

	// An action that changed the screen is never performed again.
	field := findElement(t, root, "note field", func(e domain.UIElement) bool { return e.Focusable && !e.Focused })
	tapField := `{"ref":"` + field.Ref + `"}`
	if out, err := act(env, dev, lease, "focus", "tap", tapField); err != nil || out.Receipt.Effect.State != domain.EffectChanged {
		t.Fatalf("focusing the field: %+v, %v; want changed", out.Receipt, err)
	}
	before = inputs(t, env, dev)
	if out, err := retry("focus", "tap", tapField); err != nil || !out.Replayed || out.Receipt.IdempotencyKey != "focus" {
		t.Fatalf("retrying a changed tap: %+v, %v; want its outcome replayed", out.Receipt, err)
	}
	if inputs(t, env, dev) != before || receiptUnder("focus#2") {
		t.Fatal("a retry of an action that changed the screen acted")
	}

	// The key of another action stays refused, flag or not.
	if _, err := retry("k", "key", `{"key":"BACK"}`); codeOf(err) != domain.CodeIdempotencyConflict {
		t.Fatalf("another action under k: %v; want idempotency_conflict", err)
	}
}

// waitLockWaiters waits until n sessions of the test's database wait for a
// lock (both racing retries past choosing their key, waiting to record it).
func waitLockWaiters(t *testing.T, env *fleettest.Env, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := env.Pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after 30 s; want %d (the racing retries waiting to record)", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
