package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newRunner(t *testing.T, s *eventstore.Store, opts ...projections.Option) *projections.Runner {
	t.Helper()
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Audit{}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func appendN(t *testing.T, s *eventstore.Store, writers, perWriter int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			versions := map[string]int64{}
			for written := 0; written < perWriter; {
				stream := fmt.Sprintf("w%d-s%d", w, rng.IntN(20))
				n := min(1+rng.IntN(3), perWriter-written) // 1–3 events per command
				evs := make([]eventstore.NewEvent, n)
				for i := range evs {
					evs[i] = eventstore.NewEvent{Type: "test.happened", SchemaVersion: 1, OrgID: "org_t",
						Data: json.RawMessage(`{"w":1}`), Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "writer"}}
				}
				a, err := s.Append(testutil.Context(t), stream, versions[stream], evs...)
				if err != nil {
					t.Error(err)
					return
				}
				versions[stream] = a.Version
				written += n
			}
		}()
	}
	wg.Wait()
}

// waitApplied waits until the active version of audit_feed has applied want events.
func waitApplied(t *testing.T, pool *pgxpool.Pool, want int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got int64
	for time.Now().Before(deadline) {
		err := pool.QueryRow(testutil.Context(t), `SELECT c.events_applied FROM projection_checkpoints c
			JOIN projection_registry r ON c.consumer_group = r.name || '@' || r.active_version WHERE r.name = 'audit_feed'`).Scan(&got)
		if err == nil && got >= want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("audit_feed applied %d events; want %d", got, want)
}

// checkFeedExactlyOnce asserts that public.audit_feed holds every event once,
// applied in global feed order.
func checkFeedExactlyOnce(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := testutil.Context(t)
	var events, rows, mismatched int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_feed`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	// Pair the n-th event in feed order with the n-th row in applied order.
	err := pool.QueryRow(ctx, `
		WITH e AS (SELECT position, event_id, row_number() OVER (ORDER BY transaction_id, position) n FROM events),
		     a AS (SELECT position, event_id, row_number() OVER (ORDER BY applied_seq) n FROM audit_feed)
		SELECT count(*) FROM e FULL JOIN a USING (n)
		WHERE e.position IS DISTINCT FROM a.position OR e.event_id IS DISTINCT FROM a.event_id`).Scan(&mismatched)
	if err != nil {
		t.Fatal(err)
	}
	if rows != events || mismatched != 0 {
		t.Fatalf("audit_feed has %d rows for %d events, %d out of feed order or missing; want every event once, in order", rows, events, mismatched)
	}
}

func TestConcurrentWritersEveryEventOnceInOrder(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := newRunner(t, s, projections.WithBatchSize(300))
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	appendN(t, s, 32, 500)
	waitApplied(t, pool, 32*500)
	checkFeedExactlyOnce(t, pool)

	var actor string
	if err := pool.QueryRow(testutil.Context(t), `SELECT metadata->>'actorId' FROM audit_feed LIMIT 1`).Scan(&actor); err != nil || actor != "writer" {
		t.Fatalf("got actor %q (%v); want the metadata's actor lifted into the row", actor, err)
	}
}

func TestKilledMidBatchResumesWithoutLossOrDuplicates(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	appendN(t, s, 8, 2500)
	rng := rand.New(rand.NewPCG(1, 2))
	// Start and kill the consumer at random points, many times over.
	for i := 0; i < 15; i++ {
		r := newRunner(t, s, projections.WithBatchSize(400))
		ctx, cancel := context.WithCancel(testutil.Context(t))
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		cancel()
		<-done
	}
	r := newRunner(t, s)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitApplied(t, pool, 8*2500)
	checkFeedExactlyOnce(t, pool)
}

func TestRebuildWhileWritesArriveEndsEqualAndKeepsAnswering(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	appendN(t, s, 4, 2000)

	// The serving instance.
	live := newRunner(t, s)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { live.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitApplied(t, pool, 8000)

	// Writers and readers keep going throughout the rebuild.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written, reads, readErrs atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := s.Append(testutil.Context(t), fmt.Sprintf("during-%d-%d", w, i), eventstore.NoStream,
					eventstore.NewEvent{Type: "test.during", SchemaVersion: 1, OrgID: "org_t", Data: json.RawMessage(`{}`)})
				if err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM audit_feed WHERE org_id = 'org_t'`).Scan(&n); err != nil {
				readErrs.Add(1)
				t.Errorf("read during rebuild: %v", err)
			}
			reads.Add(1)
		}
	}()

	// The operator's process.
	op := newRunner(t, s)
	if err := op.Rebuild(testutil.Context(t), projections.AuditName, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // writes continue after the takeover, consumed by the live instance
	close(stop)
	wg.Wait()
	if reads.Load() == 0 || readErrs.Load() != 0 {
		t.Fatalf("reads during rebuild: %d, failed %d; want reads to keep succeeding", reads.Load(), readErrs.Load())
	}

	st, err := op.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if st[0].ActiveVersion != 2 || st[0].Building != nil {
		t.Fatalf("got status %+v; want version 2 active and no build", st[0])
	}
	waitApplied(t, pool, 8000+written.Load())
	checkFeedExactlyOnce(t, pool)
	var oldSchemas int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM pg_namespace WHERE nspname = 'proj_audit_feed_v1'`).Scan(&oldSchemas); err != nil || oldSchemas != 0 {
		t.Fatalf("old version schema still present (%d, %v)", oldSchemas, err)
	}
}

func TestStatusReportsLag(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := newRunner(t, s)
	if err := r.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1, 10)
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].State != "live" || st[0].Lag != 10 || st[0].Position != 0 {
		t.Fatalf("got %+v; want audit_feed live, position 0, lag 10", st)
	}
}

func TestWaitForReadsYourWrites(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := newRunner(t, s)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := 0; i < 20; i++ {
		a, err := s.Append(testutil.Context(t), fmt.Sprintf("rw-%d", i), eventstore.NoStream,
			eventstore.NewEvent{Type: "test.rw", SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(testutil.Context(t), 10*time.Second)
		err = r.WaitFor(wctx, projections.AuditName, a)
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM audit_feed WHERE position = $1`, a.LastPosition).Scan(&n); err != nil || n != 1 {
			t.Fatalf("after WaitFor the event is not in the read model (%d rows, %v)", n, err)
		}
	}
}

// auditDiffers counts the rows of audit_feed that differ from the event
// they record, column by column, or stand out of feed order.
func auditDiffers(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	err := pool.QueryRow(testutil.Context(t), `
		WITH e AS (SELECT position, transaction_id::text::bigint AS transaction_id, event_id, stream_id, stream_version, event_type,
		                  schema_version, org_id, metadata, occurred_at, row_number() OVER (ORDER BY transaction_id, position) n FROM events),
		     a AS (SELECT position, transaction_id, event_id, stream_id, stream_version, event_type,
		                  schema_version, org_id, metadata, occurred_at, row_number() OVER (ORDER BY applied_seq) n FROM audit_feed)
		SELECT count(*) FROM e FULL JOIN a USING (n)
		WHERE (e.position, e.transaction_id, e.event_id, e.stream_id, e.stream_version, e.event_type, e.schema_version, e.org_id, e.metadata, e.occurred_at)
		      IS DISTINCT FROM
		      (a.position, a.transaction_id, a.event_id, a.stream_id, a.stream_version, a.event_type, a.schema_version, a.org_id, a.metadata, a.occurred_at)`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAuditRowsEqualTheEventsAfterApplyAndRebuild(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	ctx := eventstore.WithMetadata(testutil.Context(t), eventstore.Metadata{ActorKind: "api_key", ActorID: "key_1", RequestID: "req_1"})
	for i := 0; i < 300; i++ {
		evs := make([]eventstore.NewEvent, 1+i%3)
		for j := range evs {
			evs[j] = eventstore.NewEvent{Type: fmt.Sprintf("test.kind_%d", (i+j)%4), SchemaVersion: 1 + j, OrgID: fmt.Sprintf("org_%d", i%5),
				Data: json.RawMessage(`{"i":1}`), Metadata: eventstore.Metadata{CorrelationID: fmt.Sprintf("cor_%d", i)}}
		}
		if _, err := s.Append(ctx, fmt.Sprintf("eq-%d", i%40), eventstore.AnyVersion, evs...); err != nil {
			t.Fatal(err)
		}
	}
	var events int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, s, projections.WithBatchSize(70))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitApplied(t, pool, events)
	if n := auditDiffers(t, pool); n != 0 {
		t.Fatalf("after apply: %d audit rows differ from their events or stand out of feed order; want none", n)
	}
	if err := r.Rebuild(ctx, projections.AuditName, nil); err != nil {
		t.Fatal(err)
	}
	if n := auditDiffers(t, pool); n != 0 {
		t.Fatalf("after rebuild: %d audit rows differ from their events or stand out of feed order; want none", n)
	}
}

// A rebuild run while commits keep arriving takes over (once it has read
// the feed to its end: TestConsumerIsCaughtUpOnceItReadTheFeedToItsEnd),
// and the version that took over holds every event once, in feed order,
// those committed during the rebuild and after it included.
func TestRebuildTakesOverWhileCommitsKeepArriving(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	ctx := eventstore.WithMetadata(testutil.Context(t), eventstore.Metadata{ActorKind: "system", ActorID: "writer", RequestID: "req_1"})
	appendN(t, s, 2, 2000)
	r := newRunner(t, s, projections.WithBatchSize(500))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitApplied(t, pool, 4000)

	// Four writers commit one event after another, without a pause, until
	// the rebuild has answered.
	const writers = 4
	stop, started := make(chan struct{}), make(chan struct{}, writers)
	wrote := make(chan int64, writers)
	for w := range writers {
		go func() {
			var n int64
			defer func() { wrote <- n }()
			for {
				if n == 20 {
					started <- struct{}{}
				}
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Append(ctx, fmt.Sprintf("stream-%d-%d", w, n%50), eventstore.AnyVersion, eventstore.NewEvent{
					Type: "test.happened", SchemaVersion: 1, OrgID: "org_t", Data: json.RawMessage(`{"w":2}`)}); err != nil {
					t.Error(err)
					return
				}
				n++
			}
		}()
	}
	for range writers {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("a writer did not start")
		}
	}
	guard, release := context.WithTimeout(ctx, 30*time.Second)
	defer release()
	count := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	err := r.Rebuild(guard, projections.AuditName, nil)
	after := count()
	close(stop)
	var n int64
	for range writers {
		n += <-wrote
	}
	if err != nil {
		t.Fatalf("the rebuild did not take over while commits kept arriving (%d written meanwhile): %v", n, err)
	}
	if after == before {
		t.Fatalf("no commit arrived while the rebuild ran (%d events before and after): the test proves nothing", before)
	}
	// The version that took over goes on applying what follows, and holds
	// every event once, in feed order.
	waitApplied(t, pool, 4000+n)
	if d := auditDiffers(t, pool); d != 0 {
		t.Fatalf("after the rebuild: %d audit rows differ from their events or stand out of feed order; want none", d)
	}
}

// applyInOneBatch appends evs as one commit of organisation org, so that
// projection p reads them in one batch, and runs p until it has applied
// them. It returns the database.
func applyInOneBatch(t *testing.T, p projections.Projection, org string, evs ...domain.Event) *pgxpool.Pool {
	t.Helper()
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	var news []eventstore.NewEvent
	for _, e := range evs {
		name, version, data, err := domain.Events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		news = append(news, eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: org, Data: data})
	}
	a, err := s.Append(testutil.Context(t), "batch-"+p.Name(), eventstore.NoStream, news...)
	if err != nil {
		t.Fatal(err)
	}
	waitForName(t, startRunner(t, s, []projections.Projection{p}), p.Name(), a)
	return pool
}

// checkRows fails the test unless query's rows, each as a JSON array of
// its columns, are want.
func checkRows(t *testing.T, pool *pgxpool.Pool, query string, want ...string) {
	t.Helper()
	rows, err := pool.Query(testutil.Context(t), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(vals)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
