package eventstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// instances starts two stores on one database, as two service instances
// have, each with its relay, and returns them once reader hears writer's
// commits. The relays end with the test.
func instances(t *testing.T, ctx context.Context) (writer, reader *eventstore.Store) {
	t.Helper()
	pool := testutil.FreshPool(t)
	writer, reader = eventstore.New(pool), eventstore.New(pool)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, s := range []*eventstore.Store{writer, reader} {
		go func() { s.Relay(rctx, slog.New(slog.DiscardHandler)); done <- struct{}{} }()
	}
	t.Cleanup(func() { stop(); <-done; <-done })
	// The reader's LISTEN starts on its own goroutine: a commit of the
	// writer reaches it once it is listening.
	for wait := time.Now().Add(30 * time.Second); ; {
		woken := reader.Signal().C()
		if _, err := writer.Append(ctx, "warm-up", eventstore.AnyVersion, ev("warm.up", `{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
			return writer, reader
		case <-time.After(3 * time.Second):
		}
		if time.Now().After(wait) {
			t.Fatal("the reader heard none of the writer's commits within 30 s")
		}
	}
}

// wakes reports whether ch is closed within 30 s.
func wakes(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(30 * time.Second):
		return false
	}
}

// TestRelayedWakeUpsNameTheirTypes: another instance's commit wakes a
// reader's every-commit waiters, and only the subscriptions whose types it
// holds, as a commit of the reader's own instance does (a projection of
// other types sleeps through it instead of querying the database).
func TestRelayedWakeUpsNameTheirTypes(t *testing.T) {
	ctx := testutil.Context(t)
	writer, reader := instances(t, ctx)
	// Past the relay's pause after the warm-up's NOTIFY, so that this test
	// is about types alone (TestRelayLosesNoCommit: a commit within it).
	time.Sleep(100 * time.Millisecond)
	sub, unsubscribe := reader.Signal().Sub([]string{"keep.%"})
	defer unsubscribe()

	every, mine := reader.Signal().C(), sub.C()
	if _, err := writer.Append(ctx, "s1", eventstore.NoStream, ev("skip.this", `{}`)); err != nil {
		t.Fatal(err)
	}
	if !wakes(every) {
		t.Fatal("another instance's commit did not wake the reader's every-commit waiters")
	}
	// A Signal wakes its subscriptions before its own waiters: had the
	// commit woken the subscription, it would be closed by now.
	if closed(mine) {
		t.Fatal("another instance's commit of skip.this woke a subscription to keep.%; want it left asleep")
	}
	if _, err := writer.Append(ctx, "s2", eventstore.NoStream, ev("keep.that", `{}`)); err != nil {
		t.Fatal(err)
	}
	if !wakes(mine) {
		t.Fatal("another instance's commit of keep.that did not wake the subscription to keep.%")
	}
}

// TestRelayLosesNoCommit: a commit made while the relay waits out its
// coalescing pause after a NOTIFY is announced once the pause ends, not
// only with the next commit after it.
func TestRelayLosesNoCommit(t *testing.T) {
	t.Cleanup(eventstore.SetRelayCoalesce(time.Second)) // after the relays end (cleanups run last first)
	ctx := testutil.Context(t)
	writer, reader := instances(t, ctx) // its last commit's NOTIFY has just gone out: the pause runs
	woken := reader.Signal().C()
	if _, err := writer.Append(ctx, "in-the-pause", eventstore.NoStream, ev("x", `{}`)); err != nil {
		t.Fatal(err)
	}
	if !wakes(woken) {
		t.Fatal("a commit made during the relay's pause was never announced to the other instance")
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
