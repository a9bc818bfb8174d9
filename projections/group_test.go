package projections_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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
	r, err := projections.NewRunner(s, quiet, projs, projections.WithBatchSize(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
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

// held is a projection whose apply, once shut, does not return (nor heed
// its context) until opened: a read model waiting on a lock, or hung.
type held struct {
	shut    chan struct{} // closed: applies wait for open
	open    chan struct{}
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
	select {
	case <-p.shut:
		select {
		case p.entered <- struct{}{}:
		default:
		}
		<-p.open
	default:
	}
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.held VALUES ($1)`, e.Position); err != nil {
			return err
		}
	}
	return nil
}

// A projection whose apply does not return holds back only itself: past the
// runner's stuckAfter it leaves the group (whose transaction is ended, so
// its checkpoint is free), the others go on, its status says why, and once
// it returns it catches up alone, each event applied once.
func TestGroupMemberThatHangsHoldsBackOnlyItself(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	h := &held{shut: make(chan struct{}), open: make(chan struct{}), entered: make(chan struct{}, 1)}
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Audit{}, keepOnly{}, h},
		projections.WithBatchSize(50), projections.WithStuckAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	var opened sync.Once
	release := func() { opened.Do(func() { close(h.open) }) }
	t.Cleanup(func() { release(); cancel(); <-done })

	first := appendType(t, s, "keep.first")
	waitForName(t, r, "held", first)
	close(h.shut)
	var last eventstore.Appended
	for range 20 {
		last = appendType(t, s, "keep.after")
	}
	select {
	case <-h.entered:
	case <-time.After(time.Minute):
		t.Fatal("held never applied again")
	}
	waitForName(t, r, "audit_feed", last)
	waitForName(t, r, "keep_only", last)
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if p := st[2]; p.Position >= last.LastPosition || !strings.Contains(p.LastError, "did not return within 1s") {
		t.Fatalf("held at %d with error %q; want behind %d, saying its apply did not return", p.Position, p.LastError, last.LastPosition)
	}
	release()
	waitForName(t, r, "held", last)
	var rows, kept int
	if err := pool.QueryRow(testutil.Context(t), `SELECT (SELECT count(*) FROM held), (SELECT count(*) FROM keep_only)`).Scan(&rows, &kept); err != nil {
		t.Fatal(err)
	}
	if rows != 21 || kept != 21 {
		t.Fatalf("held has %d rows, keep_only %d; want 21 each", rows, kept)
	}
	checkFeedExactlyOnce(t, pool)
}
