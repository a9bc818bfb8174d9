package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands"
	"phonefleet/commands/console"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// opsPrincipals are the callers of the operator-view route tests, chosen
// per request with the X-Test-Principal header.
var opsPrincipals = testPrincipals{
	"local":  domain.LocalOperator("org_a"),
	"admin":  {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"member": {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_member", Role: domain.RoleMember, Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"key":    {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes},
	"app": {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_admin", ClientID: "app_1", Role: domain.RoleAdmin,
		Scopes: []domain.Scope{domain.ScopeDevicesRead}},
}

// opsGate is a projection that keeps no rows and whose Apply, past its
// first `pass` batches, waits for open (so a rebuild stays under way), or
// fails with fail when set. When only is set, batches into other schemas
// (the live version beside the one being built) pass and are not counted.
type opsGate struct {
	name    string
	fail    string
	only    string
	mu      sync.Mutex
	pass    int
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *opsGate) Name() string                                { return p.name }
func (p *opsGate) Tables() []string                            { return nil }
func (p *opsGate) Setup(context.Context, pgx.Tx, string) error { return nil }
func (p *opsGate) open()                                       { p.once.Do(func() { close(p.release) }) }
func (p *opsGate) Apply(_ context.Context, _ pgx.Tx, schema string, _ []eventstore.Event) error {
	if p.fail != "" {
		return errors.New(p.fail)
	}
	if p.only != "" && schema != p.only {
		return nil
	}
	p.mu.Lock()
	through := p.pass > 0
	p.pass--
	p.mu.Unlock()
	if !through {
		p.entered <- struct{}{}
		<-p.release
	}
	return nil
}

// opsEnv is a server whose operator route reads a real runner over three
// projections: one rebuilding (version 2 has read one event of three and
// waits), one failing (its live version runs and fails every batch), one
// live and idle.
type opsEnv struct {
	t *testing.T
	s *Server
	v *apitest.Validator
	// toGo is how many events the rebuild still has to read: all but the
	// first.
	toGo int64
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	pool := testutil.SmallPool(t, 8)
	store := eventstore.New(pool)
	ctx := testutil.Context(t)
	var last eventstore.Appended
	for _, stream := range []string{"ops-a", "ops-b", "ops-c"} {
		a, err := store.Append(ctx, stream, 0, eventstore.NewEvent{Type: "optest.happened", SchemaVersion: 1, OrgID: "org_a",
			Data: json.RawMessage(`{}`), Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	// The feed holds events back while any older transaction is open
	// anywhere on the server (other packages' tests run at once): wait
	// until all three pass, or the rebuild could end after the first.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		passes, err := store.FeedPasses(ctx, last.TransactionID)
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
	rebuilding := &opsGate{name: "ops_rebuilding", only: projections.Schema("ops_rebuilding", 2), pass: 1, entered: make(chan struct{}, 10), release: make(chan struct{})}
	failing := &opsGate{name: "ops_failing", fail: "boom in org_other's row", release: make(chan struct{})}
	idle := &opsGate{name: "ops_idle", pass: 1 << 30, release: make(chan struct{})}
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), []projections.Projection{rebuilding, failing, idle},
		projections.WithBatchSize(1), projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rebuilding.open)
	// Rebuild the first before the runner consumes it live, so the gate's
	// one pass is the new version's.
	rctx, cancel := context.WithCancel(ctx)
	rebuilt := make(chan struct{})
	var rebuildErr error // read only after rebuilt is closed
	go func() { rebuildErr = runner.Rebuild(rctx, rebuilding.name, nil); close(rebuilt) }()
	t.Cleanup(func() { rebuilding.open(); cancel(); <-rebuilt })
	select {
	case <-rebuilding.entered:
	case <-rebuilt:
		t.Fatalf("the rebuild ended before its second batch: %v", rebuildErr)
	case <-time.After(time.Minute):
		t.Fatal("the rebuild never reached its second batch")
	}
	run, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { runner.Run(run); close(ran) }()
	t.Cleanup(func() { rebuilding.open(); stop(); <-ran })
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := runner.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st[1].State == "failing" && st[2].Lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %+v; want ops_failing failing and ops_idle caught up", st)
		}
		time.Sleep(20 * time.Millisecond)
	}

	app := commands.NewApplication(commands.Capabilities{Console: console.New(console.Config{Store: store, Projections: runner})})
	s, _ := newTestServer(t, Deps{Auth: opsPrincipals, App: &app})
	var head, first int64
	if err := pool.QueryRow(ctx, `SELECT max(position), min(position) FROM events`).Scan(&head, &first); err != nil {
		t.Fatal(err)
	}
	return &opsEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), toGo: head - first}
}

func (e *opsEnv) get(principal string) (int, http.Header, map[string]any) {
	e.t.Helper()
	resp, raw := call(e.t, e.s, e.v, principal, httptest.NewRequest(http.MethodGet, "/v1/operators/projections", nil))
	return resp.StatusCode, resp.Header, jsonObject(e.t, "GET /v1/operators/projections", raw)
}

// byName returns the projections of a 200 answer by name.
func byName(t *testing.T, body map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	list, _ := body["projections"].([]any)
	for _, p := range list {
		m := p.(map[string]any)
		out[m["name"].(string)] = m
	}
	return out
}

func TestOperatorProjectionsRouteShowsStateLagAndRebuildProgress(t *testing.T) {
	e := newOpsEnv(t)
	status, hdr, body := e.get("local")
	if status != http.StatusOK || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("got %d %v %v; want 200, no-store", status, hdr, body)
	}
	got := byName(t, body)
	if len(got) != 3 {
		t.Fatalf("got %v; want the three projections", body)
	}
	r := got["ops_rebuilding"]
	if r["state"] != "rebuilding" || r["version"] != float64(1) || r["rebuild"] == nil {
		t.Errorf("ops_rebuilding: got %v; want version 1 rebuilding with a rebuild", r)
	} else {
		b := r["rebuild"].(map[string]any)
		p, _ := b["progress"].(float64)
		if b["version"] != float64(2) || b["lag"] != float64(e.toGo) || p <= 0 || p >= 1 || b["startedAt"] == nil {
			t.Errorf("rebuild: got %v; want version 2, %d events to go, a progress between 0 and 1, a start", b, e.toGo)
		}
	}
	f := got["ops_failing"]
	if f["state"] != "failing" || f["ok"] != false || !strings.Contains(f["lastError"].(string), "boom") || f["rebuild"] != nil {
		t.Errorf("ops_failing: got %v; want failing, not ok, its error told to the local operator", f)
	}
	if i := got["ops_idle"]; i["state"] != "live" || i["ok"] != true || i["lag"] != float64(0) || i["lastError"] != nil || i["updatedAt"] == nil {
		t.Errorf("ops_idle: got %v; want live, ok, caught up", i)
	}

	status, _, body = e.get("admin")
	if status != http.StatusOK {
		t.Fatalf("admin: got %d %v; want 200", status, body)
	}
	if f := byName(t, body)["ops_failing"]; f["state"] != "failing" || f["lastError"] != nil {
		t.Errorf("admin: got %v; want failing with no error text (the local operator's only)", f)
	}
	if strings.Contains(string(mustJSON(t, body)), "position") {
		t.Errorf("admin: got %v; want no feed positions", body)
	}
}

func TestOperatorProjectionsRouteRefusesMembersKeysAndApps(t *testing.T) {
	e := newOpsEnv(t)
	for _, principal := range []string{"member", "key", "app"} {
		status, _, body := e.get(principal)
		if status != http.StatusForbidden || errCode(body) != "permission_denied" {
			t.Errorf("%s: got %d %v; want 403 permission_denied", principal, status, body)
		}
	}
	if status, _, body := e.get("nobody"); status != http.StatusUnauthorized {
		t.Errorf("no credential: got %d %v; want 401", status, body)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
