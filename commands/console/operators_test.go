package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands"
	"phonefleet/commands/console"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// opProjection is a read model for the operator-view tests: it keeps no
// rows; Apply lets the first `pass` batches through, then reports each
// further batch on entered and waits for release (or fails with failWith).
type opProjection struct {
	name     string
	failWith string

	mu       sync.Mutex
	pass     int
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
}

func newOpProjection(name string, pass int) *opProjection {
	return &opProjection{name: name, pass: pass, entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (p *opProjection) Name() string                                { return p.name }
func (p *opProjection) Tables() []string                            { return nil }
func (p *opProjection) Setup(context.Context, pgx.Tx, string) error { return nil }
func (p *opProjection) open()                                       { p.released.Do(func() { close(p.release) }) }
func (p *opProjection) Apply(_ context.Context, _ pgx.Tx, _ string, _ []eventstore.Event) error {
	if p.failWith != "" {
		return errors.New(p.failWith)
	}
	p.mu.Lock()
	through := p.pass > 0
	p.pass--
	p.mu.Unlock()
	if through {
		return nil
	}
	p.entered <- struct{}{}
	<-p.release // the batch's context is never cancelled (a started batch finishes)
	return nil
}

// opEnv is a store with n events and a runner over one opProjection.
type opEnv struct {
	store  *eventstore.Store
	runner *projections.Runner
	proj   *opProjection
}

func newOpEnv(t *testing.T, proj *opProjection, events int) *opEnv {
	t.Helper()
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool)
	var last eventstore.Appended
	for i := range events {
		a, err := store.Append(testutil.Context(t), "optest-"+string(rune('a'+i)), 0, eventstore.NewEvent{Type: "optest.happened",
			SchemaVersion: 1, OrgID: "org_t", Data: json.RawMessage(`{}`), Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	// The feed holds events back while any older transaction is open
	// anywhere on the server (other packages' tests run at once): wait until
	// all pass, or a rebuild could count itself done after the first.
	for deadline := time.Now().Add(time.Minute); events > 0; time.Sleep(10 * time.Millisecond) {
		passes, err := store.FeedPasses(testutil.Context(t), last.TransactionID)
		if err != nil {
			t.Fatal(err)
		}
		if passes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the feed held the test's events back for a minute")
		}
	}
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), []projections.Projection{proj},
		projections.WithBatchSize(1), projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proj.open) // runs before the pool closes: nothing stays blocked
	return &opEnv{store: store, runner: runner, proj: proj}
}

var (
	opLocal  = domain.LocalOperator("org_t")
	opAdmin  = domain.Auth{OrgID: "org_t", Kind: domain.PrincipalConsole, UserID: "u_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	opMember = domain.Auth{OrgID: "org_t", Kind: domain.PrincipalConsole, UserID: "u_member", Role: domain.RoleMember,
		Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	opKey = domain.Auth{OrgID: "org_t", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes}
	opApp = domain.Auth{OrgID: "org_t", Kind: domain.PrincipalApp, UserID: "u_admin", ClientID: "app_1",
		Role: domain.RoleAdmin, Scopes: []domain.Scope{domain.ScopeDevicesRead}}
)

func TestProjectionStatusAdmitsAdminsAndTheLocalOperatorOnly(t *testing.T) {
	e := newOpEnv(t, newOpProjection("optest_access", 100), 2)
	h := console.GetProjectionStatusHandler{Projections: e.runner}
	ctx := testutil.Context(t)
	for _, tc := range []struct {
		name string
		auth domain.Auth
	}{{"local operator", opLocal}, {"console admin", opAdmin}} {
		got, err := h.Handle(ctx, console.GetProjectionStatus{Auth: tc.auth})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got.Projections) != 1 {
			t.Fatalf("%s: got %+v; want the one projection", tc.name, got)
		}
		p := got.Projections[0]
		// Nothing consumes yet: the live version trails the two events.
		if p.Name != "optest_access" || p.Version != 1 || p.State != "live" || p.Lag != 2 || !p.OK || p.Rebuild != nil {
			t.Errorf("%s: got %+v; want version 1 live, 2 events behind, no rebuild", tc.name, p)
		}
	}
	for _, tc := range []struct {
		name    string
		auth    domain.Auth
		mention string
	}{
		{"member", opMember, "admin"},
		{"API key with every scope", opKey, "API key"},
		{"OAuth app", opApp, "the console"},
	} {
		_, err := h.Handle(ctx, console.GetProjectionStatus{Auth: tc.auth})
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != domain.CodePermissionDenied || !strings.Contains(de.Message, tc.mention) {
			t.Errorf("%s: got %v; want permission_denied mentioning %q", tc.name, err, tc.mention)
		}
	}
}

func TestProjectionStatusShowsARebuildUnderWayWithItsProgress(t *testing.T) {
	// Version 2 reads one event of four, then waits on the gate.
	e := newOpEnv(t, newOpProjection("optest_rebuild", 1), 4)
	h := console.GetProjectionStatusHandler{Projections: e.runner}
	ctx := testutil.Context(t)
	rebuilt := make(chan error, 1)
	go func() { rebuilt <- e.runner.Rebuild(ctx, "optest_rebuild", nil) }()
	select {
	case <-e.proj.entered:
	case err := <-rebuilt:
		t.Fatalf("the rebuild ended before its second batch: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the rebuild never reached its second batch")
	}

	var head, first int64
	if err := e.store.Pool().QueryRow(ctx, `SELECT max(position), min(position) FROM events`).Scan(&head, &first); err != nil {
		t.Fatal(err)
	}
	got, err := h.Handle(ctx, console.GetProjectionStatus{Auth: opAdmin})
	if err != nil {
		t.Fatal(err)
	}
	p := got.Projections[0]
	if p.State != "rebuilding" || p.Version != 1 || p.Lag != head || p.Rebuild == nil {
		t.Fatalf("got %+v; want version 1 rebuilding, trailing the whole feed, with a rebuild", p)
	}
	b := *p.Rebuild
	want := float64(first) / float64(head)
	if b.Version != 2 || b.Lag != head-first || b.Progress != want || b.StartedAt.IsZero() {
		t.Errorf("got rebuild %+v; want version 2 with %d events to go, progress %v, a start time", b, head-first, want)
	}

	e.proj.open()
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	got, err = h.Handle(ctx, console.GetProjectionStatus{Auth: opAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Projections[0]; p.State != "live" || p.Version != 2 || p.Lag != 0 || p.Rebuild != nil || p.UpdatedAt.IsZero() {
		t.Errorf("after the takeover: got %+v; want version 2 live, caught up, no rebuild", p)
	}
}

func TestProjectionStatusTellsTheLastErrorToTheLocalOperatorOnly(t *testing.T) {
	proj := newOpProjection("optest_failing", 0)
	proj.failWith = "boom: duplicate key (org_other, secret_name)"
	e := newOpEnv(t, proj, 1)
	h := console.GetProjectionStatusHandler{Projections: e.runner}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { e.runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(time.Minute)
	var local console.ProjectionStatus
	for {
		var err error
		if local, err = h.Handle(ctx, console.GetProjectionStatus{Auth: opLocal}); err != nil {
			t.Fatal(err)
		}
		if local.Projections[0].State == "failing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %+v; the projection never failed", local)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p := local.Projections[0]; p.OK || !strings.Contains(p.LastError, proj.failWith) {
		t.Errorf("local operator: got %+v; want not OK with the error told", p)
	}
	admin, err := h.Handle(ctx, console.GetProjectionStatus{Auth: opAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if p := admin.Projections[0]; p.State != "failing" || p.OK || p.LastError != "" {
		t.Errorf("hosted admin: got %+v; want failing, not OK, and no error text", p)
	}
}

func TestProjectionStatusIsUnavailableWithoutTheCapability(t *testing.T) {
	app := commands.NewApplication(commands.Capabilities{})
	_, err := app.Console.GetProjectionStatus.Handle(testutil.Context(t), console.GetProjectionStatus{Auth: opLocal})
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.CodeServiceUnavailable {
		t.Errorf("got %v; want service_unavailable", err)
	}
}
