package gatewayhub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/gatewayhub"
	"phonefleet/http/kernel"
	"phonefleet/internal/backends"
	"phonefleet/internal/devices"
	"phonefleet/internal/gateway"
	"phonefleet/internal/identity"
	"phonefleet/internal/sim"
	"phonefleet/internal/tunnel"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

var quiet = slog.New(slog.DiscardHandler)

// hubEnv is one database with the fleet's and the gateways' read models
// running, the gateway capability, and an enrolled gateway's credential.
type hubEnv struct {
	pool   *pgxpool.Pool
	store  *eventstore.Store
	runner *projections.Runner
	app    commands.Application
	// gateways is the gateway capability every instance serves.
	gateways *gateways.Gateways
	admin    domain.Auth
	// operator is the organisation's operator (every scope).
	operator   domain.Auth
	gatewayID  string
	credential string
}

func newHubEnv(t *testing.T) *hubEnv {
	t.Helper()
	return newHubEnvOn(t, testutil.DatabaseURL(t))
}

// newHubEnvOn is newHubEnv on the database at url.
func newHubEnvOn(t *testing.T, url string) *hubEnv {
	t.Helper()
	ctx := testutil.Context(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet,
		append(projections.Fleet(), projections.Gateways{}, projections.GatewayDevices{}), projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = runner.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	hasher, err := identity.NewHasher(bytes.Repeat([]byte{7}, identity.PepperLen))
	if err != nil {
		t.Fatal(err)
	}
	e := &hubEnv{pool: pool, store: store, runner: runner,
		gateways: gateways.New(gateways.Config{Store: store, Hasher: hasher})}
	e.app = commands.NewApplication(commands.Capabilities{Logger: quiet, Gateways: e.gateways})
	orgID := domain.NewID(domain.PrefixOrganisation)
	e.admin = domain.Auth{OrgID: orgID, Kind: domain.PrincipalConsole, UserID: "u_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	e.operator = domain.LocalOperator(orgID)
	e.gatewayID, e.credential = e.enroll(t)
	return e
}

// enroll enrolls a gateway and returns its id and credential.
func (e *hubEnv) enroll(t *testing.T) (string, string) {
	t.Helper()
	ctx := testutil.Context(t)
	code, err := e.app.Gateways.CreateGatewayEnrollmentCode.Handle(ctx, gateways.CreateGatewayEnrollmentCode{Auth: e.admin, Name: "rack"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: code.Code})
	if err != nil {
		t.Fatal(err)
	}
	return g.GatewayID, g.Credential
}

// instance is one process of the service: a fleet with its gateway hub,
// serving the tunnel over HTTP.
type instance struct {
	fl      *fleet.Fleet
	runtime *devices.Runtime
	// app is the instance's application object (its fleet, the shared
	// gateways), as its tunnels' surface receives it.
	app    *commands.Application
	hub    *gateway.Hub
	claims *backends.GatewayClaims
	// tunnels is the surface serving the hub's tunnels.
	tunnels *gatewayhub.Server
	url     string
}

type instanceOptions struct {
	// checkEvery is the hub's CheckEvery; zero means 50 ms.
	checkEvery time.Duration
	// tunnel is the hub's Tunnel (heartbeats).
	tunnel tunnel.Options
}

func (e *hubEnv) instance(t *testing.T, opts instanceOptions) *instance {
	t.Helper()
	if opts.checkEvery == 0 {
		opts.checkEvery = 50 * time.Millisecond
	}
	claims := backends.NewGatewayClaims(e.pool)
	hub := gateway.NewHub(gateway.HubConfig{Claims: claims, CheckEvery: opts.checkEvery, Tunnel: opts.tunnel, Logger: quiet})
	rt := devices.Assemble(devices.AssembleConfig{Pool: e.pool, Gateways: hub, Logger: quiet}).Runtime
	fl := fleet.New(fleet.Config{Store: e.store, ReadModels: e.runner, Runtime: rt, NewSimState: backends.NewSimState,
		WaitForReceipts: true})
	app := commands.NewApplication(commands.Capabilities{Fleet: fl, Gateways: e.gateways, Logger: quiet})
	settle := workers.AbandonedActions{Mark: app.Fleet.MarkAbandonedActions, Logger: quiet}.Settle
	if err := rt.Prepare(testutil.Context(t), settle); err != nil {
		t.Fatal(err)
	}
	tunnels := gatewayhub.New(gatewayhub.Config{App: &app, Hub: hub, Settle: settle, Logger: quiet})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(runCtx, settle); close(done) }()
	srv := httptest.NewServer(kernel.HandlerFunc(tunnels.ServeTunnel))
	t.Cleanup(func() {
		hub.Close()
		srv.Close()
		stop()
		<-done
	})
	return &instance{fl: fl, runtime: rt, app: &app, hub: hub, claims: claims, tunnels: tunnels, url: srv.URL}
}

// sweepOrphans is one pass of the orphaned-gateway sweep on the instance.
func (in *instance) sweepOrphans(ctx context.Context) (int, error) {
	return workers.OrphanedGateways{List: in.app.Gateways.ListGatewaysRecordedServed, Settle: in.tunnels.SettleOrphan}.Sweep(ctx)
}

// fakeGateway answers the tunnel's device calls with real sim phones, as
// a gateway would, without the gateway process.
type fakeGateway struct {
	keys   []string
	phones map[string]*backends.SimDevice

	mu sync.Mutex
	// hold, when set, stops every act before it reaches the phone, after
	// it says so on acting, until hold is closed or the tunnel ends.
	hold   chan struct{}
	acting chan string
}

func newFakeGateway(t *testing.T, keys ...string) *fakeGateway {
	t.Helper()
	g := &fakeGateway{keys: keys, phones: map[string]*backends.SimDevice{}, acting: make(chan string, 16)}
	for _, k := range keys {
		p, err := sim.New(sim.DefaultModel, "GW-"+strings.ToUpper(k))
		if err != nil {
			t.Fatal(err)
		}
		g.phones[k] = backends.NewSimDevice(p)
	}
	return g
}

func (g *fakeGateway) infos() []tunnel.DeviceInfo {
	var out []tunnel.DeviceInfo
	for _, k := range g.keys {
		p := g.phones[k]
		m := p.Phone().Model()
		out = append(out, tunnel.DeviceInfo{Key: k, Backend: domain.BackendSim, Model: m.Name, Serial: p.Phone().Serial(),
			Width: m.Width, Height: m.Height, Capabilities: p.Capabilities()})
	}
	return out
}

func (g *fakeGateway) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	var dp tunnel.DeviceParams
	if err := json.Unmarshal(params, &dp); err != nil {
		return nil, err
	}
	d := g.phones[dp.Device]
	if d == nil {
		return nil, domain.Errorf(domain.CodeDeviceDisconnected, "no device %s", dp.Device)
	}
	switch method {
	case tunnel.MethodObserve:
		var p tunnel.ObserveParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		obs, err := d.Observe(ctx, p.Options())
		return tunnel.Observation(obs), err
	case tunnel.MethodAct:
		var p tunnel.ActParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		a, err := p.Action()
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		hold := g.hold
		g.mu.Unlock()
		if hold != nil {
			g.acting <- dp.Device
			select {
			case <-hold:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return d.Act(ctx, a)
	case tunnel.MethodWake:
		return struct{}{}, d.Wake(ctx)
	case tunnel.MethodStop:
		return struct{}{}, d.Stop(ctx)
	case tunnel.MethodReset:
		return struct{}{}, d.Reset(ctx)
	case tunnel.MethodCapabilities:
		return d.Capabilities(), nil
	}
	return nil, tunnel.ErrUnknownMethod
}

// connect opens the gateway's tunnel to base and says hello.
func (g *fakeGateway) connect(t *testing.T, base, credential string) (*tunnel.Peer, tunnel.Welcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peer, err := tunnel.Dial(ctx, base, credential, g.handle, tunnel.Options{Logger: quiet})
	if err != nil {
		return nil, tunnel.Welcome{}, err
	}
	t.Cleanup(func() { peer.Close(websocket.StatusNormalClosure, "test over") })
	var w tunnel.Welcome
	err = peer.Call(ctx, tunnel.MethodHello, tunnel.Hello{Version: "test", Channel: "stable", Devices: g.infos()}, &w)
	return peer, w, err
}

func (g *fakeGateway) mustConnect(t *testing.T, base, credential string) (*tunnel.Peer, map[string]string) {
	t.Helper()
	peer, w, err := g.connect(t, base, credential)
	if err != nil {
		t.Fatalf("connecting the gateway: %v", err)
	}
	ids := map[string]string{}
	for _, d := range w.Devices {
		ids[d.Key] = d.DeviceID
	}
	if len(ids) != len(g.keys) {
		t.Fatalf("welcome: %+v; want the %d devices", w, len(g.keys))
	}
	return peer, ids
}

// eventually polls cond until it holds, failing after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// status reads a device's status from the devices read model.
func (e *hubEnv) status(t *testing.T, deviceID string) string {
	t.Helper()
	var s string
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT status FROM public.devices WHERE device_id = $1`, deviceID).Scan(&s); err != nil {
		return "missing"
	}
	return s
}

func (e *hubEnv) lease(t *testing.T, in *instance, deviceID string) string {
	t.Helper()
	l, err := in.fl.AcquireLease().Handle(testutil.Context(t), fleet.AcquireLease{Auth: e.operator, DeviceID: deviceID, TTLSeconds: 600})
	if err != nil {
		t.Fatalf("leasing %s: %v", deviceID, err)
	}
	return l.LeaseID
}

// connections returns the gateway.connected and gateway.disconnected
// events of a gateway's stream, in order.
func (e *hubEnv) connections(t *testing.T, gatewayID string) []domain.Event {
	t.Helper()
	evs, err := e.store.Load(testutil.Context(t), domain.GatewayStream(gatewayID), 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []domain.Event
	for _, r := range evs {
		ev, err := domain.Events.Decode(r.Type, r.SchemaVersion, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.(type) {
		case domain.GatewayConnected, domain.GatewayDisconnected:
			out = append(out, ev)
		}
	}
	return out
}

// waitConnections waits until a gateway's stream holds n connection
// events and returns them.
func (e *hubEnv) waitConnections(t *testing.T, gatewayID string, n int) []domain.Event {
	t.Helper()
	var evs []domain.Event
	eventually(t, fmt.Sprintf("%d connection events", n), func() bool {
		evs = e.connections(t, gatewayID)
		return len(evs) >= n
	})
	if len(evs) != n {
		t.Fatalf("connection events: %+v; want %d", evs, n)
	}
	return evs
}

// wantDisconnected checks that ev is a gateway.disconnected of gatewayID's
// tunnel at instance, for reason, and returns when it happened.
func wantDisconnected(t *testing.T, ev domain.Event, gatewayID, instance, reason string) time.Time {
	t.Helper()
	d, ok := ev.(domain.GatewayDisconnected)
	if !ok || d.GatewayID != gatewayID || d.Instance != instance || d.Reason != reason || d.At.IsZero() {
		t.Fatalf("event %#v; want gateway.disconnected of %s at %s, %s", ev, gatewayID, instance, reason)
	}
	return d.At
}

// view waits until the gateway's row in the gateways read model passes ok
// and returns it.
func (e *hubEnv) view(t *testing.T, gatewayID, what string, ok func(v projections.GatewayView) bool) projections.GatewayView {
	t.Helper()
	var got projections.GatewayView
	eventually(t, what, func() bool {
		vs, err := projections.ListGateways(testutil.Context(t), e.pool, e.admin.OrgID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.GatewayID == gatewayID {
				got = v
				return ok(v)
			}
		}
		return false
	})
	return got
}

// holder returns the process holding a gateway's claim, as gateway_hosts
// records it.
func (e *hubEnv) holder(t *testing.T, gatewayID string) string {
	t.Helper()
	var id string
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT holder FROM gateway_hosts WHERE gateway_id = $1`, gatewayID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *hubEnv) idempotencyState(t *testing.T, key string) (state, host string) {
	t.Helper()
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT state, host FROM action_idempotency WHERE org_id = $1 AND idempotency_key = $2`,
		e.operator.OrgID, key).Scan(&state, &host); err != nil {
		t.Fatalf("idempotency row %s: %v", key, err)
	}
	return state, host
}

// A gateway's devices are registered on its first hello and keep their ids
// on the next; they are online while its tunnel is open, driven through it
// (the action acts on the gateway's phone, the receipt commits, the
// picture is drawn here from the phone's state), and offline once it
// closes, when the claim is free again.
func TestHubServesAGatewaysDevices(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1", "sim-2")
	ctx := testutil.Context(t)
	key := domain.GatewayHostKey(e.gatewayID)

	peer, ids := g.mustConnect(t, a.url, e.credential)
	if !a.hub.Holds(key) || !slices.Contains(a.runtime.HeldHosts(), key) {
		t.Fatalf("after the welcome: hub holds %v, runtime holds %v; want %s", a.hub.Held(), a.runtime.HeldHosts(), key)
	}
	for _, id := range ids {
		eventually(t, "the gateway's device shows online", func() bool { return e.status(t, id) == domain.DeviceOnline })
	}

	dev := ids["sim-1"]
	leaseID := e.lease(t, a, dev)
	out, err := a.fl.PerformAction().Handle(ctx, fleet.PerformAction{Auth: e.operator, DeviceID: dev, LeaseID: leaseID,
		Action: "open_app", Arguments: json.RawMessage(`{"package":"` + sim.PkgNotes + `"}`), IdempotencyKey: "open-notes"})
	if err != nil {
		t.Fatalf("acting on the gateway's device: %v", err)
	}
	if out.Receipt.State != "committed" || out.Receipt.Frames.Before == "" {
		t.Fatalf("receipt: %+v; want committed with frames", out.Receipt)
	}
	if fg := g.phones["sim-1"].Phone().Foreground(); fg != sim.PkgNotes {
		t.Fatalf("the gateway's phone shows %s; want %s", fg, sim.PkgNotes)
	}
	if fg := g.phones["sim-2"].Phone().Foreground(); fg == sim.PkgNotes {
		t.Fatal("the other phone acted too")
	}
	if state, host := e.idempotencyState(t, "open-notes"); state != "committed" || host != key {
		t.Fatalf("idempotency row: %s on %s; want committed on %s", state, host, key)
	}

	obs, err := a.fl.ObserveDevice().Handle(ctx, fleet.ObserveDevice{Auth: e.operator, DeviceID: dev, Image: true, Marks: true})
	if err != nil {
		t.Fatalf("observing with marks: %v", err)
	}
	if len(obs.Image) == 0 || len(obs.Marks) == 0 || obs.Frame.ScreenHash != g.phones["sim-1"].Phone().ScreenHash() {
		t.Fatalf("observation: %d bytes, %d marks, hash %s; want a marked picture of the phone's screen %s",
			len(obs.Image), len(obs.Marks), obs.Frame.ScreenHash, g.phones["sim-1"].Phone().ScreenHash())
	}

	peer.Close(websocket.StatusNormalClosure, "bye")
	for _, id := range ids {
		eventually(t, "the device goes offline with its gateway", func() bool { return e.status(t, id) == domain.DeviceOffline })
	}
	eventually(t, "the claim is released", func() bool {
		_, held, err := backends.HostState(e.pool)(ctx, key)
		return err == nil && !held && !a.hub.Holds(key)
	})
	_, err = a.fl.PerformAction().Handle(ctx, fleet.PerformAction{Auth: e.operator, DeviceID: dev, LeaseID: leaseID,
		Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "home-offline"})
	if domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("acting while the gateway is away: %v; want device_unavailable", err)
	}

	// The gateway comes back: the same devices, registered once.
	_, again := g.mustConnect(t, a.url, e.credential)
	if again["sim-1"] != ids["sim-1"] || again["sim-2"] != ids["sim-2"] {
		t.Fatalf("second welcome: %v; want the first ids %v", again, ids)
	}
	for _, id := range ids {
		eventually(t, "the device comes back online", func() bool { return e.status(t, id) == domain.DeviceOnline })
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'device.registered' AND org_id = $1`, e.admin.OrgID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("device.registered events: %d (%v); want 2", n, err)
	}
	if _, err := a.fl.PerformAction().Handle(ctx, fleet.PerformAction{Auth: e.operator, DeviceID: dev, LeaseID: leaseID,
		Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "home-again"}); err != nil {
		t.Fatalf("acting after the gateway came back: %v", err)
	}
}

// Each tunnel of a gateway is recorded on its stream, connected when
// welcomed (by this process, with the version, channel and devices the
// hello gave) and disconnected when it ends, with why: closed by the
// gateway, or replaced by the gateway's newer tunnel at the same
// instance. The gateways read model follows: connected, through which
// instance, since when, the running version, and when last seen.
func TestHubRecordsTheGatewaysConnections(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1", "sim-2")
	gw := e.gatewayID
	if v := e.view(t, gw, "the enrolled gateway is listed", func(projections.GatewayView) bool { return true }); v.Connected ||
		v.Instance != nil || v.ConnectedAt != nil || v.LastSeenAt != nil || v.Version != "" {
		t.Fatalf("before any tunnel: %+v; want never connected, no version", v)
	}

	// connected is checked as the welcome's: recorded before it answers.
	connected := func(ev domain.Event, instance string) time.Time {
		t.Helper()
		c, ok := ev.(domain.GatewayConnected)
		if !ok || c.GatewayID != gw || c.Instance != instance || c.Version != "test" || c.Channel != "stable" || c.Devices != 2 || c.At.IsZero() {
			t.Fatalf("event %#v; want gateway.connected of %s at %s, version test, channel stable, 2 devices", ev, gw, instance)
		}
		return c.At
	}
	isConnected := func(instance string, since time.Time) func(v projections.GatewayView) bool {
		return func(v projections.GatewayView) bool {
			return v.Connected && v.Instance != nil && *v.Instance == instance && v.Version == "test" &&
				v.ConnectedAt != nil && v.ConnectedAt.Equal(since) && v.LastSeenAt != nil && v.LastSeenAt.Equal(since)
		}
	}
	isDisconnected := func(at time.Time) func(v projections.GatewayView) bool {
		return func(v projections.GatewayView) bool {
			return !v.Connected && v.Instance == nil && v.ConnectedAt == nil && v.Version == "test" &&
				v.LastSeenAt != nil && v.LastSeenAt.Equal(at)
		}
	}

	peer, _ := g.mustConnect(t, a.url, e.credential)
	inst := e.holder(t, gw)
	evs := e.connections(t, gw)
	if len(evs) != 1 {
		t.Fatalf("after the welcome: %+v; want one gateway.connected", evs)
	}
	since := connected(evs[0], inst)
	e.view(t, gw, "the view shows the tunnel", isConnected(inst, since))

	// The gateway closes its tunnel.
	peer.Close(websocket.StatusNormalClosure, "bye")
	evs = e.waitConnections(t, gw, 2)
	at := wantDisconnected(t, evs[1], gw, inst, domain.GatewayReasonClosedByGateway)
	e.view(t, gw, "the view shows no tunnel, last seen at its end", isDisconnected(at))

	// It comes back, then opens a second tunnel to the same instance,
	// which replaces the first.
	first, _ := g.mustConnect(t, a.url, e.credential)
	evs = e.connections(t, gw)
	if len(evs) != 3 {
		t.Fatalf("after reconnecting: %+v; want a third event", evs)
	}
	connected(evs[2], inst)
	g.mustConnect(t, a.url, e.credential)
	evs = e.connections(t, gw)
	if len(evs) != 5 {
		t.Fatalf("after the second tunnel: %+v; want the first's end and the second's start", evs)
	}
	wantDisconnected(t, evs[3], gw, inst, domain.GatewayReasonReplaced)
	since = connected(evs[4], inst)
	select {
	case <-first.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the replaced tunnel stayed open")
	}
	e.view(t, gw, "the view shows the second tunnel", isConnected(inst, since))
	if !a.hub.Holds(domain.GatewayHostKey(gw)) {
		t.Fatal("the instance does not serve the gateway's second tunnel")
	}
}

// A gateway that stops answering pings is dropped, and its tunnel's end
// recorded as heartbeat_lost. (It has no device: a tunnel is recorded
// whatever it serves.)
func TestHubRecordsALostHeartbeat(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{tunnel: tunnel.Options{PingInterval: 200 * time.Millisecond, PingTimeout: 200 * time.Millisecond,
		Logger: quiet}})
	ctx, cancel := context.WithTimeout(testutil.Context(t), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+tunnel.Path, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e.credential}}, Subprotocols: []string{tunnel.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	hello := `{"jsonrpc":"2.0","id":1,"method":"` + tunnel.MethodHello + `","params":{"version":"test","channel":"stable","devices":[]}}`
	if err := conn.Write(ctx, websocket.MessageText, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	// Reading the welcome answers the pings meanwhile; nothing reads
	// afterwards, so no later ping is answered.
	if _, answer, err := conn.Read(ctx); err != nil || !strings.Contains(string(answer), `"result"`) {
		t.Fatalf("the hello's answer: %s (%v); want a welcome", answer, err)
	}
	inst := e.holder(t, e.gatewayID)
	evs := e.waitConnections(t, e.gatewayID, 2)
	if c, ok := evs[0].(domain.GatewayConnected); !ok || c.Instance != inst || c.Devices != 0 {
		t.Fatalf("first event %#v; want gateway.connected at %s with no device", evs[0], inst)
	}
	wantDisconnected(t, evs[1], e.gatewayID, inst, domain.GatewayReasonHeartbeatLost)
}

// A gateway that drops its tunnel while an action is on its phone leaves
// the action's outcome unknown (it may have happened), and its devices go
// offline.
func TestHubGatewayGoneMidAction(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1")
	g.hold = make(chan struct{})
	peer, ids := g.mustConnect(t, a.url, e.credential)
	dev := ids["sim-1"]
	leaseID := e.lease(t, a, dev)

	type result struct {
		out fleet.ActOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := a.fl.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: e.operator, DeviceID: dev,
			LeaseID: leaseID, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "mid-act"})
		done <- result{out, err}
	}()
	select {
	case <-g.acting:
	case <-time.After(20 * time.Second):
		t.Fatal("the action never reached the gateway")
	}
	peer.Close(websocket.StatusGoingAway, "gateway killed")
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the action did not end after its gateway went away")
	}
	if domain.ErrorCode(r.err) != domain.CodeActionOutcomeUnknown {
		t.Fatalf("the action's answer: %+v %v; want action_outcome_unknown", r.out, r.err)
	}
	if state, _ := e.idempotencyState(t, "mid-act"); state != "unknown" {
		t.Fatalf("idempotency row: %s; want unknown", state)
	}
	eventually(t, "the device goes offline", func() bool { return e.status(t, dev) == domain.DeviceOffline })
}

// While one instance serves a gateway, another refuses its tunnel
// (service_unavailable, retryable) and closes it; once the first lets it
// go, the other takes it.
func TestHubRefusesAGatewayServedElsewhere(t *testing.T) {
	e := newHubEnv(t)
	a, b := e.instance(t, instanceOptions{}), e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1")
	peer, ids := g.mustConnect(t, a.url, e.credential)

	second, _, err := g.connect(t, b.url, e.credential)
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.CodeServiceUnavailable || de.Retryable == nil || !*de.Retryable {
		t.Fatalf("hello at the second instance: %v; want service_unavailable, retryable", err)
	}
	select {
	case <-second.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the refused tunnel stayed open")
	}
	if b.hub.Holds(domain.GatewayHostKey(e.gatewayID)) {
		t.Fatal("the second instance holds the gateway")
	}

	peer.Close(websocket.StatusNormalClosure, "moving")
	eventually(t, "the first instance lets the gateway go", func() bool { return !a.hub.Holds(domain.GatewayHostKey(e.gatewayID)) })
	var moved map[string]string
	eventually(t, "the second instance takes the gateway", func() bool {
		_, w, err := g.connect(t, b.url, e.credential)
		if err != nil {
			return false
		}
		moved = map[string]string{}
		for _, d := range w.Devices {
			moved[d.Key] = d.DeviceID
		}
		return true
	})
	if moved["sim-1"] != ids["sim-1"] || !b.hub.Holds(domain.GatewayHostKey(e.gatewayID)) {
		t.Fatalf("at the second instance: %v; want %v, held there", moved, ids)
	}
}

// A gateway whose instance died (its claim is free, its action recorded
// as requested, its devices online, its tunnel recorded open) is settled
// by another instance's sweep: the action's outcome is unknown, the
// devices go offline and the tunnel's end is recorded (instance_lost). So
// is a gateway with no device whose tunnel alone is recorded open. A
// gateway served by a live instance is left alone.
func TestHubSweepsAnOrphanedGateway(t *testing.T) {
	e := newHubEnv(t)
	// The instance that dies never looks at its claim again.
	dying := e.instance(t, instanceOptions{checkEvery: time.Hour})
	survivor := e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1")
	g.hold = make(chan struct{})
	t.Cleanup(func() { close(g.hold) })
	_, ids := g.mustConnect(t, dying.url, e.credential)
	dev := ids["sim-1"]
	leaseID := e.lease(t, dying, dev)
	go func() {
		_, _ = dying.fl.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: e.operator, DeviceID: dev,
			LeaseID: leaseID, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "orphaned"})
	}()
	select {
	case <-g.acting:
	case <-time.After(20 * time.Second):
		t.Fatal("the action never reached the gateway")
	}
	// A gateway without devices loses its instance too.
	bareID, bareCred := e.enroll(t)
	newFakeGateway(t).mustConnect(t, dying.url, bareCred)
	dyingInst := e.holder(t, e.gatewayID)
	// Another gateway, served by the survivor, is not an orphan.
	otherID, otherCred := e.enroll(t)
	other := newFakeGateway(t, "sim-9")
	_, otherIDs := other.mustConnect(t, survivor.url, otherCred)
	eventually(t, "the devices show online", func() bool {
		return e.status(t, dev) == domain.DeviceOnline && e.status(t, otherIDs["sim-9"]) == domain.DeviceOnline
	})

	e.view(t, bareID, "the gateway without devices shows connected", func(v projections.GatewayView) bool { return v.Connected })

	// The dying instance's database connection goes, and its locks with it
	// (once the server has ended that session's backend).
	dying.claims.Close()
	ctx := testutil.Context(t)
	eventually(t, "the dying instance's gateway claims are free", func() bool {
		for _, gw := range []string{e.gatewayID, bareID} {
			if _, held, err := backends.HostState(e.pool)(ctx, domain.GatewayHostKey(gw)); err != nil || held {
				return false
			}
		}
		return true
	})
	settled, err := survivor.sweepOrphans(ctx)
	if err != nil || settled != 2 {
		t.Fatalf("sweep: settled %d (%v); want 2", settled, err)
	}
	if state, _ := e.idempotencyState(t, "orphaned"); state != "unknown" {
		t.Fatalf("the orphaned action: %s; want unknown", state)
	}
	eventually(t, "the orphaned device goes offline", func() bool { return e.status(t, dev) == domain.DeviceOffline })
	if !survivor.hub.Holds(domain.GatewayHostKey(otherID)) || e.status(t, otherIDs["sim-9"]) != domain.DeviceOnline {
		t.Fatal("the sweep touched a gateway that is served")
	}
	if _, held, err := backends.HostState(e.pool)(ctx, domain.GatewayHostKey(e.gatewayID)); err != nil || held {
		t.Fatalf("after the sweep the orphan's claim is held %v (%v); want released", held, err)
	}
	for _, gw := range []string{e.gatewayID, bareID} {
		evs := e.waitConnections(t, gw, 2)
		wantDisconnected(t, evs[1], gw, dyingInst, domain.GatewayReasonInstanceLost)
		e.view(t, gw, "the orphan shows no tunnel", func(v projections.GatewayView) bool { return !v.Connected })
	}
	if evs := e.connections(t, otherID); len(evs) != 1 {
		t.Fatalf("the served gateway's connection events: %+v; want its gateway.connected alone", evs)
	}
	if settled, err := survivor.sweepOrphans(ctx); err != nil || settled != 0 {
		t.Fatalf("a second sweep: settled %d (%v); want none", settled, err)
	}
}

// A credential that is forged, malformed or missing is refused with 401 in
// the surface's envelope, before any upgrade.
func TestHubRefusesBadCredentialsBeforeUpgrading(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{})
	forged, err := identity.NewGatewayCredential(e.gatewayID) // the right id, another secret
	if err != nil {
		t.Fatal(err)
	}
	g := newFakeGateway(t, "sim-1")
	if _, _, err := g.connect(t, a.url, forged.Token); !errors.Is(err, tunnel.ErrRefused) {
		t.Fatalf("a forged credential: %v; want refused", err)
	}
	for _, auth := range []string{"Bearer " + forged.Token, "Basic abc", ""} {
		status, body, env := handshake(t, a.url, auth)
		if status != http.StatusUnauthorized || env.Error.Code != string(domain.CodeUnauthorized) {
			t.Errorf("Authorization %q: %d %s; want 401 with the unauthorized envelope", auth, status, body)
		}
	}
	if a.hub.Holds(domain.GatewayHostKey(e.gatewayID)) {
		t.Fatal("a refused credential's gateway is held")
	}
}

// handshakeEnvelope is the error envelope of a refused handshake.
type handshakeEnvelope struct {
	Error struct {
		Code      string `json:"code"`
		Retryable *bool  `json:"retryable"`
	} `json:"error"`
}

// handshake sends a WebSocket upgrade of the tunnel to base with the
// Authorization auth (none when empty) and returns the answer's status,
// body and error envelope (zero when it is not one).
func handshake(t *testing.T, base, auth string) (int, []byte, handshakeEnvelope) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+tunnel.Path, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-WebSocket-Protocol", tunnel.Subprotocol)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var env handshakeEnvelope
	_ = json.Unmarshal(body, &env)
	return resp.StatusCode, body, env
}

// While the database cannot be reached the gateway's credential cannot be
// checked: the handshake answers 503 service_unavailable, retryable (the
// gateway tries again), not 500; once the database is back the tunnel
// opens.
func TestHubAnswers503WhileTheDatabaseIsAway(t *testing.T) {
	u, err := url.Parse(testutil.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.NewCutProxy(t, u.Host)
	e := newHubEnvOn(t, proxy.URL(t, testutil.DatabaseURL(t)))
	a := e.instance(t, instanceOptions{})
	proxy.Cut()
	status, body, env := handshake(t, a.url, "Bearer "+e.credential)
	if status != http.StatusServiceUnavailable || env.Error.Code != string(domain.CodeServiceUnavailable) ||
		env.Error.Retryable == nil || !*env.Error.Retryable {
		t.Fatalf("the handshake with the database away: %d %s; want 503 service_unavailable, retryable", status, body)
	}
	proxy.Restore()
	g := newFakeGateway(t, "sim-1")
	// The pool may hand out a connection the cut broke once more, as a
	// gateway's retry would meet it.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, _, err := g.connect(t, a.url, e.credential)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "503") {
			t.Fatalf("the database back: %v; want the tunnel open", err)
		}
	}
}

// Revoking a gateway closes its tunnel (policy violation, "revoked"), its
// devices go offline, and its credential no longer opens one.
func TestHubClosesARevokedGatewaysTunnel(t *testing.T) {
	e := newHubEnv(t)
	a := e.instance(t, instanceOptions{})
	g := newFakeGateway(t, "sim-1")
	peer, ids := g.mustConnect(t, a.url, e.credential)
	if _, err := e.app.Gateways.RevokeGateway.Handle(testutil.Context(t), gateways.RevokeGateway{Auth: e.admin, GatewayID: e.gatewayID}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-peer.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the revoked gateway's tunnel stayed open")
	}
	var ce websocket.CloseError
	if !errors.As(peer.Err(), &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "revoked" {
		t.Fatalf("the tunnel ended with %v; want 1008 revoked", peer.Err())
	}
	eventually(t, "the device goes offline", func() bool { return e.status(t, ids["sim-1"]) == domain.DeviceOffline })
	evs := e.waitConnections(t, e.gatewayID, 2)
	wantDisconnected(t, evs[1], e.gatewayID, e.holder(t, e.gatewayID), domain.GatewayReasonRevoked)
	e.view(t, e.gatewayID, "the view shows the revoked gateway without its tunnel", func(v projections.GatewayView) bool {
		return v.State == domain.GatewayStateRevoked && !v.Connected
	})
	if _, _, err := g.connect(t, a.url, e.credential); !errors.Is(err, tunnel.ErrRefused) {
		t.Fatalf("reconnecting with the revoked credential: %v; want refused", err)
	}
}
