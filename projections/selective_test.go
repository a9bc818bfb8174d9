package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// keepOnly records the events it is given; it reads only keep.* events.
type keepOnly struct{}

func (keepOnly) Name() string         { return "keep_only" }
func (keepOnly) Tables() []string     { return []string{"keep_only"} }
func (keepOnly) EventTypes() []string { return []string{"keep.%"} }
func (keepOnly) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.keep_only (position bigint PRIMARY KEY, event_type text NOT NULL)`)
	return err
}
func (keepOnly) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.keep_only VALUES ($1, $2)`, e.Position, e.Type); err != nil {
			return err
		}
	}
	return nil
}

func TestSelectiveProjectionGetsOnlyItsTypesAndPassesTheRest(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	for i := 0; i < 300; i++ {
		typ := "skip.this"
		if i%3 == 0 {
			typ = "keep.this"
		}
		if _, err := s.Append(testutil.Context(t), fmt.Sprintf("sel-%d", i), eventstore.NoStream,
			eventstore.NewEvent{Type: typ, SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.Append(testutil.Context(t), "sel-last", eventstore.NoStream,
		eventstore.NewEvent{Type: "skip.last", SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(s, quiet, []projections.Projection{keepOnly{}}, projections.WithBatchSize(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := r.WaitFor(testutil.Context(t), "keep_only", last); err != nil {
		t.Fatal(err)
	}
	var kept, other int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FILTER (WHERE event_type = 'keep.this'), count(*) FILTER (WHERE event_type <> 'keep.this') FROM keep_only`).Scan(&kept, &other); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if kept != 100 || other != 0 || st[0].Applied != 301 || st[0].Lag != 0 {
		t.Fatalf("got %d kept, %d others, %d consumed, lag %d; want 100, 0, 301 (the checkpoint passes skipped events), 0",
			kept, other, st[0].Applied, st[0].Lag)
	}
}

// runKeepOnly runs keepOnly with a poll of an hour, so that only commit
// wake-ups (and WaitFor) make it read.
func runKeepOnly(t *testing.T, s *eventstore.Store) *projections.Runner {
	t.Helper()
	return startRunner(t, s, []projections.Projection{keepOnly{}}, projections.WithPollInterval(time.Hour))
}

// startRunner runs the projections until the test ends.
func startRunner(t *testing.T, s *eventstore.Store, projs []projections.Projection, opts ...projections.Option) *projections.Runner {
	t.Helper()
	r, err := projections.NewRunner(s, quiet, projs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func appendType(t *testing.T, s *eventstore.Store, typ string) eventstore.Appended {
	t.Helper()
	a, err := s.Append(testutil.Context(t), "sel-"+uuid.NewString(), eventstore.NoStream,
		eventstore.NewEvent{Type: typ, SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func waitFor(t *testing.T, r *projections.Runner, a eventstore.Appended) {
	t.Helper()
	waitForName(t, r, "keep_only", a)
}

// A selective projection is not woken by commits of types it does not read
// (issue 28: each action's commits woke every projection, each running a
// transaction to find nothing); it reads them along with its next own one.
func TestSelectiveProjectionSleepsThroughOtherTypes(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := runKeepOnly(t, s)
	waitFor(t, r, appendType(t, s, "keep.first"))
	var skipped eventstore.Appended
	for range 30 {
		skipped = appendType(t, s, "skip.this")
	}
	time.Sleep(500 * time.Millisecond) // time to read, were it woken
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Position >= skipped.LastPosition {
		t.Fatalf("the projection read up to %d after 30 commits of a type it does not read (last %d); want it asleep", st[0].Position, skipped.LastPosition)
	}
	waitFor(t, r, appendType(t, s, "keep.second"))
	var n int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM keep_only`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("got %d rows (%v); want the two keep events", n, err)
	}
}

// WaitFor on a commit holding none of a projection's types returns at once,
// not at the projection's poll: it wakes the consumer.
func TestWaitForACommitOfOtherTypes(t *testing.T) {
	s := eventstore.New(testutil.FreshPool(t))
	r := runKeepOnly(t, s)
	waitFor(t, r, appendType(t, s, "skip.only"))
}

// An event of the projection's types held back behind a transaction in
// flight (the feed is gap-safe) is read when a later commit of other types
// lands, not only at the poll: after a commit of its types the consumer
// waits on every commit.
func TestSelectiveProjectionReadsAnEventHeldBackByOtherTypes(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := runKeepOnly(t, s)
	waitFor(t, r, appendType(t, s, "keep.first"))
	ctx := testutil.Context(t)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // an xid, older than the next append's
		t.Fatal(err)
	}
	held := appendType(t, s, "keep.held")
	time.Sleep(200 * time.Millisecond) // let the consumer find it held back
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	appendType(t, s, "skip.after")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM keep_only WHERE position = $1`, held.LastPosition).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the held-back event was not read after the commit of other types that followed its holder")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
