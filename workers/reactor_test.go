package workers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// toyRetryGap is the toy reaction's retry schedule: a failed effect is due
// again this long after its attempt.
const toyRetryGap = 30 * time.Second

// toyOutcome is what acting on a toy item came to.
type toyOutcome struct {
	OK bool
	At time.Time
}

type toyAttempt = workers.Attempt[struct{}, toyOutcome]

// toy is a reaction small enough to read at a glance, on a real database:
// toy_work holds the items (due time, recorded attempts) and their claims
// in one row, the effect is counted in memory (the "world"), and each
// attempt is recorded as toy.attempted in stream toy-<key> at version
// attempt−1, in the same unit as the row's new state.
type toy struct {
	pool  *pgxpool.Pool
	store *eventstore.Store
	clock *testutil.Clock
	// world counts the effects made, by key#attempt.
	world *toyWorld
	// act, when not nil, decides an attempt's outcome (and may block);
	// nil means every effect succeeds.
	act func(ctx context.Context, c workers.Claimed[struct{}]) bool
	// claimFailures is how many claims fail before claims work.
	claimFailures atomic.Int32
	claims        chan time.Time // when not nil, gets the time of every claim
}

type toyWorld struct {
	mu   sync.Mutex
	acts map[string]int
}

func (w *toyWorld) count(key string, attempt int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acts[fmt.Sprintf("%s#%d", key, attempt)]
}

func (w *toyWorld) all() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.acts))
	for k, v := range w.acts {
		out[k] = v
	}
	return out
}

func (x *toy) Claim(ctx context.Context, l workers.Lease, n int) ([]workers.Claimed[struct{}], error) {
	if x.claims != nil {
		x.claims <- time.Now()
	}
	if x.claimFailures.Add(-1) >= 0 {
		return nil, errors.New("toy: claim refused")
	}
	rows, err := x.pool.Query(ctx, `WITH picked AS (
		SELECT key FROM toy_work
		WHERE NOT done AND due_at <= $1 AND (claimed_attempt <= attempts OR leased_until <= $1)
		ORDER BY due_at, key LIMIT $2
		FOR UPDATE SKIP LOCKED)
	UPDATE toy_work w SET claimed_attempt = w.attempts + 1, claimed_by = $3, leased_until = $4
	FROM picked p WHERE w.key = p.key
	RETURNING w.key, w.claimed_attempt`, l.Now, n, l.Holder, l.Until)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (workers.Claimed[struct{}], error) {
		var c workers.Claimed[struct{}]
		return c, r.Scan(&c.Key, &c.Attempt)
	})
}

func (x *toy) Act(ctx context.Context, c workers.Claimed[struct{}]) toyOutcome {
	ok := x.act == nil || x.act(ctx, c)
	x.world.mu.Lock()
	x.world.acts[fmt.Sprintf("%s#%d", c.Key, c.Attempt)]++
	x.world.mu.Unlock()
	return toyOutcome{OK: ok, At: x.clock.Now()}
}

func (x *toy) Record(ctx context.Context, c workers.Claimed[struct{}], o toyOutcome) (eventstore.Appended, error) {
	data := fmt.Appendf(nil, `{"attempt": %d, "ok": %t}`, c.Attempt, o.OK)
	u := (&eventstore.Unit{}).
		Append("toy-"+c.Key, int64(c.Attempt-1), eventstore.NewEvent{Type: "toy.attempted", SchemaVersion: 1, OrgID: "org_toy", Data: data}).
		Exec(`UPDATE toy_work SET attempts = $2, done = $3, due_at = $4, leased_until = '-infinity' WHERE key = $1`,
			c.Key, c.Attempt, o.OK, o.At.Add(toyRetryGap))
	cm, err := x.store.Commit(ctx, u)
	if err != nil {
		return eventstore.Appended{}, err
	}
	return cm.Appends[0], nil
}

// toyEnv is a database with toy_work and n items due now.
type toyEnv struct {
	pool  *pgxpool.Pool
	store *eventstore.Store
	clock *testutil.Clock
	world *toyWorld
}

func newToyEnv(t *testing.T, n int) *toyEnv {
	t.Helper()
	pool := testutil.FreshPool(t)
	e := &toyEnv{pool: pool, store: eventstore.New(pool, eventstore.WithGroupCommit()), clock: newClock(), world: &toyWorld{acts: map[string]int{}}}
	if _, err := pool.Exec(testutil.Context(t), `CREATE TABLE toy_work (
		key             text PRIMARY KEY,
		due_at          timestamptz NOT NULL,
		attempts        integer NOT NULL DEFAULT 0,
		done            boolean NOT NULL DEFAULT false,
		claimed_attempt integer NOT NULL DEFAULT 0,
		claimed_by      text,
		leased_until    timestamptz NOT NULL DEFAULT '-infinity')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(testutil.Context(t), `INSERT INTO toy_work (key, due_at)
		SELECT 'item-' || lpad(i::text, 4, '0'), $2 FROM generate_series(1, $1) i`, n, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *toyEnv) toy() *toy {
	return &toy{pool: e.pool, store: e.store, clock: e.clock, world: e.world}
}

func (e *toyEnv) reactor(x *toy, id string, onAttempt func(toyAttempt)) *workers.Reactor[struct{}, toyOutcome] {
	return workers.NewReactor(workers.Reaction[struct{}, toyOutcome](x), workers.ReactorConfig[struct{}, toyOutcome]{
		Name: "toy", ID: id, Now: e.clock.Now, Concurrency: 4, Poll: 5 * time.Millisecond, Logger: quiet, OnAttempt: onAttempt})
}

func (e *toyEnv) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM toy_work WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorded returns the metadata of the attempt events of key, in order.
func (e *toyEnv) recorded(t *testing.T, key string) []eventstore.Metadata {
	t.Helper()
	evs, err := e.store.Load(testutil.Context(t), "toy-"+key, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]eventstore.Metadata, len(evs))
	for i, ev := range evs {
		if out[i], err = ev.DecodeMetadata(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestReactorTwoInstancesActAndRecordEachAttemptOnce runs two reactors
// (two instances) over the same due items. Every first effect fails; once
// the clock passes the retry gap the second succeeds. Each attempt must be
// made once and recorded once, by the instance that made it.
func TestReactorTwoInstancesActAndRecordEachAttemptOnce(t *testing.T) {
	const n = 80
	e := newToyEnv(t, n)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, id := range []string{"one", "two"} {
		x := e.toy()
		x.act = func(_ context.Context, c workers.Claimed[struct{}]) bool { return c.Attempt > 1 }
		r := e.reactor(x, id, func(a toyAttempt) {
			if a.Err != nil {
				failed.Add(1)
			}
		})
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(ctx) }()
	}
	waitUntil(t, "every first attempt recorded", func() bool { return e.count(t, `attempts = 1 AND NOT done`) == n })
	time.Sleep(50 * time.Millisecond) // a second first attempt would be made now
	e.clock.Advance(toyRetryGap)
	waitUntil(t, "every item done", func() bool { return e.count(t, `attempts = 2 AND done`) == n })
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()

	if f := failed.Load(); f != 0 {
		t.Errorf("%d attempts failed to record; want none", f)
	}
	acts := e.world.all()
	if len(acts) != 2*n {
		t.Errorf("got effects for %d key#attempts; want %d", len(acts), 2*n)
	}
	by := map[string]int{}
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("item-%04d", i)
		for attempt := 1; attempt <= 2; attempt++ {
			if c := e.world.count(key, attempt); c != 1 {
				t.Errorf("%s attempt %d made %d times; want once", key, attempt, c)
			}
		}
		md := e.recorded(t, key)
		if len(md) != 2 {
			t.Errorf("%s: got %d attempt events; want 2", key, len(md))
			continue
		}
		for i, m := range md {
			if want := fmt.Sprintf("%s#%d", key, i+1); m.RequestID != want || m.CausationID != key || m.ActorKind != "system" {
				t.Errorf("%s attempt %d: got metadata %+v; want request %s, caused by %s, a system actor", key, i+1, m, want, key)
			}
			by[m.ActorID]++
		}
	}
	for actor := range by {
		if actor != "toy:one" && actor != "toy:two" {
			t.Errorf("attempt recorded by %q; want toy:one or toy:two", actor)
		}
	}
	t.Logf("attempts recorded by instance: %v", by)
}

// TestReactorRetriesAFailedEffectAfterItsGap: a failed effect is recorded,
// is not due again before its retry gap has passed, and is made again (as
// attempt 2) once it has.
func TestReactorRetriesAFailedEffectAfterItsGap(t *testing.T) {
	e := newToyEnv(t, 1)
	x := e.toy()
	x.act = func(_ context.Context, c workers.Claimed[struct{}]) bool { return c.Attempt >= 2 }
	var seen []toyAttempt
	r := e.reactor(x, "solo", func(a toyAttempt) { seen = append(seen, a) })
	once := func() []toyAttempt {
		t.Helper()
		got, err := r.Once(testutil.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			if a.Err != nil || a.Appended.LastPosition == 0 {
				t.Fatalf("attempt %d: got err %v, appended %+v; want it recorded", a.Attempt, a.Err, a.Appended)
			}
		}
		return got
	}
	if got := once(); len(got) != 1 || got[0].Attempt != 1 || got[0].Outcome.OK {
		t.Fatalf("got %+v; want attempt 1, failed", got)
	}
	if got := once(); len(got) != 0 {
		t.Fatalf("got %d attempts right after the failure; want none", len(got))
	}
	e.clock.Advance(toyRetryGap - time.Second)
	if got := once(); len(got) != 0 {
		t.Fatalf("got %d attempts a second before the gap ends; want none", len(got))
	}
	e.clock.Advance(time.Second)
	if got := once(); len(got) != 1 || got[0].Attempt != 2 || !got[0].Outcome.OK || got[0].Key != "item-0001" {
		t.Fatalf("got %+v; want attempt 2 of item-0001, succeeded", got)
	}
	e.clock.Advance(time.Hour)
	if got := once(); len(got) != 0 {
		t.Fatalf("got %d attempts after success; want none", len(got))
	}
	if len(seen) != 2 {
		t.Errorf("OnAttempt saw %d attempts; want 2", len(seen))
	}
	if md := e.recorded(t, "item-0001"); len(md) != 2 {
		t.Errorf("got %d attempt events; want 2", len(md))
	}
}

// TestReactorBacksOffWhileClaimsFail: a claim that fails is retried after
// twice the wait of the one before, and work resumes once claims succeed.
func TestReactorBacksOffWhileClaimsFail(t *testing.T) {
	e := newToyEnv(t, 1)
	x := e.toy()
	x.claimFailures.Store(4)
	x.claims = make(chan time.Time, 1024)
	r := workers.NewReactor(workers.Reaction[struct{}, toyOutcome](x), workers.ReactorConfig[struct{}, toyOutcome]{
		Name: "toy", ID: "solo", Now: e.clock.Now, Poll: 10 * time.Millisecond, Logger: quiet})
	ctx, cancel := context.WithCancel(testutil.Context(t))
	stopped := make(chan struct{})
	go func() { r.Run(ctx); close(stopped) }()
	waitUntil(t, "the item done", func() bool { return e.count(t, `done`) == 1 })
	cancel()
	<-stopped
	close(x.claims)
	var at []time.Time
	for c := range x.claims {
		at = append(at, c)
	}
	if len(at) < 5 {
		t.Fatalf("got %d claims; want at least 5 (4 failures, then work)", len(at))
	}
	// After failure k the reactor waits Poll·2^k before claiming again.
	for k := 1; k <= 4; k++ {
		want := 10 * time.Millisecond << k
		if gap := at[k].Sub(at[k-1]); gap < want {
			t.Errorf("claim %d came %s after failure %d; want at least %s", k+1, gap, k, want)
		}
	}
}

// TestReactorStoppedMidFlightRecordsItsAttempt: a reactor whose context
// ends while an effect is under way lets the effect finish, with a context
// that did not end, and records the attempt before Run returns.
func TestReactorStoppedMidFlightRecordsItsAttempt(t *testing.T) {
	e := newToyEnv(t, 1)
	x := e.toy()
	started, release := make(chan struct{}), make(chan struct{})
	var actErr error
	x.act = func(ctx context.Context, _ workers.Claimed[struct{}]) bool {
		close(started)
		<-release
		actErr = ctx.Err()
		return true
	}
	var seen []toyAttempt
	r := e.reactor(x, "stopping", func(a toyAttempt) { seen = append(seen, a) })
	ctx, cancel := context.WithCancel(testutil.Context(t))
	stopped := make(chan struct{})
	go func() { r.Run(ctx); close(stopped) }()
	<-started
	cancel()
	select {
	case <-stopped:
		t.Fatal("Run returned while an attempt was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-stopped
	if actErr != nil {
		t.Errorf("the effect's context ended (%v) when the reactor stopped; want it to run on", actErr)
	}
	if len(seen) != 1 || seen[0].Err != nil || seen[0].Appended.LastPosition == 0 {
		t.Fatalf("got %+v; want the one attempt recorded", seen)
	}
	if md := e.recorded(t, "item-0001"); len(md) != 1 || md[0].ActorID != "toy:stopping" {
		t.Fatalf("got attempt events %+v; want one, by toy:stopping", md)
	}
	if got := e.count(t, `done AND attempts = 1`); got != 1 {
		t.Errorf("the item is not done after the stop")
	}
}

// TestReactorTakesOverAnExpiredClaim: an instance hangs between acting and
// recording. Its claim holds while the lease lasts; after it, another
// instance makes the attempt again (same key and number) and records it,
// and the hung instance's late record finds the attempt on record.
func TestReactorTakesOverAnExpiredClaim(t *testing.T) {
	e := newToyEnv(t, 1)
	hung := e.toy()
	started, release := make(chan struct{}), make(chan struct{})
	hung.act = func(context.Context, workers.Claimed[struct{}]) bool {
		close(started)
		<-release
		return true
	}
	a := e.reactor(hung, "hung", nil)
	late := make(chan []toyAttempt, 1)
	go func() {
		got, err := a.Once(testutil.Context(t))
		if err != nil {
			t.Error(err)
		}
		late <- got
	}()
	<-started

	b := e.reactor(e.toy(), "taker", nil)
	if got, err := b.Once(testutil.Context(t)); err != nil || len(got) != 0 {
		t.Fatalf("got %d attempts (%v) while the hung claim's lease lasts; want none", len(got), err)
	}
	e.clock.Advance(time.Minute) // the default lease
	got, err := b.Once(testutil.Context(t))
	if err != nil || len(got) != 1 || got[0].Key != "item-0001" || got[0].Attempt != 1 || got[0].Err != nil || got[0].Appended.LastPosition == 0 {
		t.Fatalf("got %+v (%v); want attempt 1 of item-0001 taken over and recorded", got, err)
	}
	close(release)
	lateGot := <-late
	if len(lateGot) != 1 || lateGot[0].Err != nil || lateGot[0].Appended != (eventstore.Appended{}) {
		t.Fatalf("the hung instance's late attempt: got %+v; want it counted as recorded already, appending nothing", lateGot)
	}
	if c := e.world.count("item-0001", 1); c != 2 {
		t.Errorf("attempt 1 made %d times; want twice (the hung one and the takeover: at least once)", c)
	}
	md := e.recorded(t, "item-0001")
	if len(md) != 1 || md[0].ActorID != "toy:taker" {
		t.Fatalf("got attempt events %+v; want one, recorded by toy:taker", md)
	}
	if got, err := b.Once(testutil.Context(t)); err != nil || len(got) != 0 {
		t.Fatalf("got %d attempts (%v) of a recorded success; want none", len(got), err)
	}
}
