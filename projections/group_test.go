package projections_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// runProjections runs projs until the test ends.
func runProjections(t *testing.T, s *eventstore.Store, projs ...projections.Projection) *projections.Runner {
	t.Helper()
	return startRunner(t, s, projs, projections.WithBatchSize(50))
}

func waitForName(t *testing.T, r *projections.Runner, name string, a eventstore.Appended) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testutil.Context(t), 60*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, name, a); err != nil {
		t.Fatalf("%s: WaitFor position %d: %v", name, a.LastPosition, err)
	}
}

// The live projections read the feed together from their lowest checkpoint;
// each applies only the events past its own. A projection that joins when
// another is already at the head starts from the beginning, and the one
// ahead applies nothing twice.
func TestGroupMembersApplyFromTheirOwnCheckpoints(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	appendN(t, s, 2, 150)
	func() {
		r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Audit{}}, projections.WithBatchSize(50))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(testutil.Context(t))
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		waitApplied(t, pool, 300)
	}()
	var keeps int
	var last eventstore.Appended
	for i := range 120 {
		typ := "skip.this"
		if i%4 == 0 {
			typ = "keep.this"
			keeps++
		}
		last = appendType(t, s, typ)
	}
	r := runProjections(t, s, projections.Audit{}, keepOnly{})
	waitForName(t, r, "audit_feed", last)
	waitForName(t, r, "keep_only", last)
	checkFeedExactlyOnce(t, pool)
	var kept int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM keep_only`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st {
		if x.Applied != 420 || x.Lag != 0 || x.State != "live" {
			t.Errorf("%s: applied %d, lag %d, state %s; want 420, 0, live", x.Name, x.Applied, x.Lag, x.State)
		}
	}
	if kept != keeps {
		t.Fatalf("keep_only has %d rows; want %d", kept, keeps)
	}
}

// poisoned fails on every poison.% event.
type poisoned struct{}

func (poisoned) Name() string         { return "poisoned" }
func (poisoned) Tables() []string     { return []string{"poisoned"} }
func (poisoned) EventTypes() []string { return []string{"poison.%", "keep.%"} }
func (poisoned) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.poisoned (position bigint PRIMARY KEY)`)
	return err
}
func (poisoned) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "poison.") {
			return errors.New("poisoned event")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.poisoned VALUES ($1)`, e.Position); err != nil {
			return err
		}
	}
	return nil
}

// A projection whose batch fails does not hold back the others read with
// it: its rows and checkpoint roll back, the others' commit, and its status
// reports the error.
func TestGroupMemberFailureHoldsBackOnlyItself(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	r := runProjections(t, s, projections.Audit{}, keepOnly{}, poisoned{})
	first := appendType(t, s, "keep.first")
	waitForName(t, r, "poisoned", first)
	bad := appendType(t, s, "poison.bad")
	var last eventstore.Appended
	for range 20 {
		last = appendType(t, s, "keep.after")
	}
	waitForName(t, r, "audit_feed", last)
	waitForName(t, r, "keep_only", last)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.Status(testutil.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		p := st[2]
		if p.State == "failing" {
			if p.Position >= bad.LastPosition || !strings.Contains(p.LastError, "poisoned event") {
				t.Fatalf("poisoned at position %d with error %q; want it before the poison event %d, with the error", p.Position, p.LastError, bad.LastPosition)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("poisoned is %s at %d; want failing", p.State, p.Position)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var rows, kept int
	if err := pool.QueryRow(testutil.Context(t), `SELECT (SELECT count(*) FROM poisoned), (SELECT count(*) FROM keep_only)`).Scan(&rows, &kept); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || kept != 21 {
		t.Fatalf("poisoned has %d rows, keep_only %d; want 1 (before the poison) and 21", rows, kept)
	}
	checkFeedExactlyOnce(t, pool)
}

// held is a projection whose apply, while a gate is set, does not return
// (nor heed its context) until the gate opens: a read model waiting on a
// lock, or hung.
type held struct {
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (*held) Name() string         { return "held" }
func (*held) Tables() []string     { return []string{"held"} }
func (*held) EventTypes() []string { return []string{"keep.%"} }
func (*held) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.held (position bigint PRIMARY KEY)`)
	return err
}
func (p *held) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case p.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.held VALUES ($1)`, e.Position); err != nil {
			return err
		}
	}
	return nil
}

// shut makes applies wait; the function it returns lets them through.
func (p *held) shut() (open func()) {
	gate := make(chan struct{})
	p.mu.Lock()
	p.gate = gate
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.gate = nil
			p.mu.Unlock()
			close(gate)
		})
	}
}

// logLines is a slog handler's output, read while it is written.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

// A projection whose apply does not return holds back only itself: past the
// runner's stuckAfter it leaves the group (whose transaction is ended, so
// its checkpoint is free), the others go on, and its status says why. Once
// it returns it catches up alone, each event applied once, and it rejoins
// the group a while later: hung again, it leaves again.
func TestGroupMemberThatHangsHoldsBackOnlyItself(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	h := &held{entered: make(chan struct{}, 1)}
	logs := &logLines{}
	r, err := projections.NewRunner(s, slog.New(slog.NewTextHandler(logs, nil)), []projections.Projection{projections.Audit{}, keepOnly{}, h},
		projections.WithBatchSize(50), projections.WithStuckAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	var opens []func()
	t.Cleanup(func() {
		for _, open := range opens {
			open()
		}
		cancel()
		<-done
	})
	first := appendType(t, s, "keep.first")
	waitForName(t, r, "held", first)

	hang := func(round int) eventstore.Appended {
		t.Helper()
		opens = append(opens, h.shut())
		var last eventstore.Appended
		for range 20 {
			last = appendType(t, s, "keep.after")
		}
		select {
		case <-h.entered:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: held never applied again", round)
		}
		waitForName(t, r, "audit_feed", last)
		waitForName(t, r, "keep_only", last)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			st, err := r.Status(testutil.Context(t))
			if err != nil {
				t.Fatal(err)
			}
			p := st[2]
			if p.Position >= last.LastPosition {
				t.Fatalf("round %d: held at %d; want behind %d", round, p.Position, last.LastPosition)
			}
			if strings.Contains(p.LastError, "did not return within 1s") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: held's error is %q; want it to say its apply did not return", round, p.LastError)
			}
		}
		opens[len(opens)-1]()
		waitForName(t, r, "held", last)
		return last
	}
	hang(1)
	for deadline := time.Now().Add(time.Minute); !logs.has("projection rejoins the group"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("held, caught up alone, never rejoined the group")
		}
	}
	hang(2)

	var rows, kept int
	if err := pool.QueryRow(testutil.Context(t), `SELECT (SELECT count(*) FROM held), (SELECT count(*) FROM keep_only)`).Scan(&rows, &kept); err != nil {
		t.Fatal(err)
	}
	if rows != 41 || kept != 41 {
		t.Fatalf("held has %d rows, keep_only %d; want 41 each", rows, kept)
	}
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if st[2].LastError != "" {
		t.Fatalf("held still reports %q after catching up", st[2].LastError)
	}
	checkFeedExactlyOnce(t, pool)
}

// batchSizes records how many events each Apply was given.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (*batchSizes) Name() string     { return "batch_sizes" }
func (*batchSizes) Tables() []string { return []string{"batch_sizes"} }
func (*batchSizes) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.batch_sizes (n int)`)
	return err
}
func (b *batchSizes) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(evs))
	return nil
}

// A group that transfers its events reads at most MaxTransferBatch of them
// a batch, whatever the runner's batch size: the batch is one row, read
// into one buffer of its size. The events all arrive, in order, once.
func TestGroupTransfersAtMostMaxTransferBatchEvents(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	total := 2*projections.MaxTransferBatch + 500
	appendN(t, s, 5, total/5)
	b := &batchSizes{}
	startRunner(t, s, []projections.Projection{b}, projections.WithBatchSize(4*projections.MaxTransferBatch))
	sum, most := 0, 0
	for deadline := time.Now().Add(60 * time.Second); sum < total && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b.mu.Lock()
		sum, most = 0, 0
		for _, n := range b.sizes {
			sum, most = sum+n, max(most, n)
		}
		b.mu.Unlock()
	}
	time.Sleep(200 * time.Millisecond) // nothing is applied twice after the last
	b.mu.Lock()
	defer b.mu.Unlock()
	sum = 0
	for _, n := range b.sizes {
		sum = sum + n
	}
	if most > projections.MaxTransferBatch || sum != total {
		t.Fatalf("batches %v: the largest %d (want ≤ %d), %d events in all (want %d)", b.sizes, most, projections.MaxTransferBatch, sum, total)
	}
}

// A projection applied inside the server transfers no events, so its batch
// spans more of them than a batch that transfers them (each batch is one
// transaction: the rows' xmin tells the batches apart). 12,000 events
// written before the runner starts are applied in fewer than the three
// batches of 5,000 a transfer would need.
func TestInServerBatchesSpanMoreThanATransferBatch(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	appendN(t, s, 4, 3000)
	startRunner(t, s, []projections.Projection{projections.Audit{}})
	waitApplied(t, pool, 12000)
	var batches int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(DISTINCT xmin::text) FROM proj_audit_feed_v1.audit_feed`).Scan(&batches); err != nil {
		t.Fatal(err)
	}
	if batches > 2 {
		t.Fatalf("12,000 events applied in %d batches; want at most 2", batches)
	}
	checkFeedExactlyOnce(t, pool)
}

// flaky fails its next failures batches, then applies like keepOnly.
type flaky struct{ failures atomic.Int32 }

func (*flaky) Name() string         { return "flaky" }
func (*flaky) Tables() []string     { return []string{"flaky"} }
func (*flaky) EventTypes() []string { return []string{"keep.%"} }
func (*flaky) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.flaky (position bigint PRIMARY KEY)`)
	return err
}
func (p *flaky) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	if p.failures.Add(-1) >= 0 {
		return errors.New("flaky batch")
	}
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.flaky VALUES ($1)`, e.Position); err != nil {
			return err
		}
	}
	return nil
}

// A rebuild whose first batch fails takes over only once the new version
// has caught up: the end of the failed batch's subscription is not "the
// feed had nothing new" (it once was, and the rebuild took over a version
// that had applied nothing).
func TestRebuildWhoseBatchFailsTakesOverOnlyOnceCaughtUp(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	p := &flaky{}
	var last eventstore.Appended
	for range 120 {
		last = appendType(t, s, "keep.this")
	}
	r := runProjections(t, s, p)
	waitForName(t, r, "flaky", last)
	for round := range 3 {
		p.failures.Store(1)
		if err := r.Rebuild(testutil.Context(t), "flaky", nil); err != nil {
			t.Fatal(err)
		}
		var rows int
		if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM flaky`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 120 {
			t.Fatalf("round %d: after the rebuild flaky has %d rows; want 120 (taken over before it caught up)", round, rows)
		}
	}
}
