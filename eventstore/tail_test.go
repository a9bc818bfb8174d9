package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// tailAll runs Tail and returns the events it passed.
func tailAll(ctx context.Context, s *eventstore.Store, opts eventstore.TailOptions) ([]eventstore.Event, error) {
	var got []eventstore.Event
	err := s.Tail(ctx, opts, func(e eventstore.Event) error { got = append(got, e); return nil })
	return got, err
}

// TestTailWaitsForOlderTransactions: a plain tail passes every event
// committed before it started, including those held back by an older
// transaction that commits while it waits, and gives up with
// HeldBackError when that transaction stays open past MaxWait.
func TestTailWaitsForOlderTransactions(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	if mark, err := s.LastTransaction(ctx); err != nil || mark != 0 {
		t.Fatalf("LastTransaction of an empty store: got %d, %v; want 0", mark, err)
	}
	// A transaction that draws a position first but commits last.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.WithoutCancel(ctx))
	if _, err := slow.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
		VALUES (gen_random_uuid(), 'slow', 1, 'x', 1, 'org_test', '{}', '{}', now())`); err != nil {
		t.Fatal(err)
	}
	var last eventstore.Appended
	for i := 0; i < 3; i++ {
		if last, err = s.Append(ctx, fmt.Sprintf("fast-%d", i), eventstore.NoStream, ev("x", `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	mark, err := s.LastTransaction(ctx)
	if err != nil || mark != last.TransactionID {
		t.Fatalf("LastTransaction: got %d, %v; want the last append's %d", mark, err, last.TransactionID)
	}
	if passes, err := s.FeedPasses(ctx, mark); err != nil || passes {
		t.Fatalf("FeedPasses while an older transaction is open: got %v, %v; want false", passes, err)
	}

	got, err := tailAll(ctx, s, eventstore.TailOptions{MaxWait: 200 * time.Millisecond})
	var held *eventstore.HeldBackError
	if !errors.As(err, &held) || held.Mark != mark || len(got) != 0 {
		t.Fatalf("tail behind an open transaction: got %d events and %v; want none and HeldBackError at %d", len(got), err, mark)
	}

	type result struct {
		evs []eventstore.Event
		err error
	}
	done := make(chan result, 1)
	go func() {
		evs, err := tailAll(ctx, s, eventstore.TailOptions{})
		done <- result{evs, err}
	}()
	time.Sleep(100 * time.Millisecond) // the tail is waiting on the open transaction
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.evs) != 4 || r.evs[0].StreamID != "slow" {
		t.Fatalf("tail: got %d events and %v; want 4, the slow transaction's first", len(r.evs), r.err)
	}
	if passes, err := s.FeedPasses(ctx, mark); err != nil || !passes {
		t.Fatalf("FeedPasses after the tail finished: got %v, %v; want true", passes, err)
	}

	after := r.evs[1].Position
	got, err = tailAll(ctx, s, eventstore.TailOptions{After: after})
	var want int
	for _, e := range r.evs {
		if e.Position > after {
			want++
		}
	}
	if err != nil || len(got) != want {
		t.Fatalf("tail after position %d: got %d events and %v; want %d", after, len(got), err, want)
	}
	for _, e := range got {
		if e.Position <= after {
			t.Fatalf("tail after position %d passed position %d", after, e.Position)
		}
	}
}

// TestTailFollows: a following tail passes events another process
// commits, woken by its NOTIFY, and returns nil when its context ends.
func TestTailFollows(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	reader, writer := eventstore.New(pool), eventstore.New(pool)
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	go writer.Relay(relayCtx, slog.New(slog.DiscardHandler))

	tailCtx, stopTail := context.WithCancel(ctx)
	seen := make(chan eventstore.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- reader.Tail(tailCtx, eventstore.TailOptions{Follow: true}, func(e eventstore.Event) error {
			seen <- e
			return nil
		})
	}()
	for i := 0; i < 2; i++ {
		stream := fmt.Sprintf("followed-%d", i)
		if _, err := writer.Append(ctx, stream, eventstore.NoStream, ev("x", `{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-seen:
			if e.StreamID != stream {
				t.Fatalf("got %s; want %s", e.StreamID, stream)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the following tail did not pass %s", stream)
		}
	}
	stopTail()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail after its context ended: got %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the following tail did not return when its context ended")
	}
}
