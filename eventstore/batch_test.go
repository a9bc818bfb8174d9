package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// A queued append commits with the batch's other writes or not at all: a
// conflict is an error that aborts the whole batch (one implicit
// transaction), and a condition that fails skips only the append.
func TestQueueAppend(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `CREATE TABLE side (k text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	sent := 0
	send := func(streamID string, expected int64, onlyIf string, args ...any) (bool, error) {
		sent++
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO side VALUES ($1)`, fmt.Sprintf("%s-side-%d", streamID, sent))
		q, err := s.QueueAppend(b, streamID, expected, ev("t.happened", `{}`), onlyIf, args...)
		if err != nil {
			return false, err
		}
		br := pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return false, err
		}
		_, ok, err := q.Read(br)
		if err != nil {
			return false, err
		}
		return ok, br.Close()
	}
	sideRows := func(k string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM side WHERE k LIKE $1`, k+"-side%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if ok, err := send("s-1", eventstore.NoStream, ""); err != nil || !ok {
		t.Fatalf("new stream: %v %v", ok, err)
	}
	if ok, err := send("s-2", eventstore.NoStream, "$9::bool", false); err != nil || ok {
		t.Fatalf("condition false: %v %v", ok, err)
	}
	if n := sideRows("s-2"); n != 1 {
		t.Fatalf("a skipped append must not abort the batch: %d side rows", n)
	}
	if _, err := send("s-1", eventstore.NoStream, ""); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("new stream that exists: want a conflict, got %v", err)
	}
	if n := sideRows("s-1"); n != 1 {
		t.Fatalf("a conflict must abort the batch: %d side rows", n)
	}
	// Exact appends: at the end, past the end, and behind it.
	b := &pgx.Batch{}
	q, _ := s.QueueAppend(b, "s-1", 1, ev("t.happened", `{}`), "")
	br := pool.SendBatch(ctx, b)
	a, ok, err := q.Read(br)
	if err != nil || !ok || a.Version != 2 {
		t.Fatalf("exact: %+v %v %v", a, ok, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	for _, expected := range []int64{1, 5} {
		b := &pgx.Batch{}
		q, _ := s.QueueAppend(b, "s-1", expected, ev("t.happened", `{}`), "")
		b.Queue(`INSERT INTO side VALUES ($1)`, fmt.Sprintf("conflict-side-%d", expected))
		br := pool.SendBatch(ctx, b)
		_, _, err := q.Read(br)
		br.Close()
		if !errors.Is(err, eventstore.ErrConflict) {
			t.Fatalf("expected %d: want a conflict, got %v", expected, err)
		}
		if n := sideRows("conflict"); n != 0 {
			t.Fatalf("expected %d: a conflict must abort the batch", expected)
		}
	}
	evs, err := s.Load(ctx, "s-1", 1)
	if err != nil || len(evs) != 2 {
		t.Fatalf("stream s-1: %d events, %v", len(evs), err)
	}
}
