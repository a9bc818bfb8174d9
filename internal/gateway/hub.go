// Package gateway is the control plane's end of gateway tunnels (issue
// 14): a gateway, a computer at a site with phones, holds an outbound
// WebSocket tunnel (package tunnel) to one instance of the service, and
// that instance drives the gateway's devices over it. The Hub accepts the
// tunnels, holds each gateway's host claim while its tunnel is open, and
// resolves the gateway's devices to backends that call over the tunnel.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/backends"
	"phonefleet/internal/identity"
	"phonefleet/internal/tunnel"
	"phonefleet/projections"
	"phonefleet/workers"
)

// Defaults of HubConfig.
const (
	DefaultHelloTimeout = 10 * time.Second
	DefaultCheckEvery   = 2 * time.Second
)

// How a gateway's devices are recorded offline: one no longer in its list
// (as adb discovery says of a device it stopped listing), and every one
// when its tunnel ends.
const (
	stateGone                = "gone"
	stateGatewayDisconnected = "gateway_disconnected"
)

// refusalGrace is how long a refused hello's answer is given to reach the
// gateway (which closes on it) before the hub closes the connection.
const refusalGrace = 2 * time.Second

// HubConfig configures a Hub.
type HubConfig struct {
	// Claims are this process's gateway host claims.
	Claims *backends.GatewayClaims
	// Store is the event store: the hub reads the gateways' streams
	// (revocation) and the gateway devices' read model through it.
	Store *eventstore.Store
	// HelloTimeout bounds the wait for a new tunnel's hello; zero means
	// DefaultHelloTimeout.
	HelloTimeout time.Duration
	// CheckEvery is how often an open tunnel's claim and gateway are
	// checked (a lost claim or a revoked gateway closes it); zero means
	// DefaultCheckEvery.
	CheckEvery time.Duration
	// Tunnel tunes the tunnels (heartbeats); its Logger defaults to
	// Logger.
	Tunnel tunnel.Options
	Logger *slog.Logger
}

// Hub serves gateway tunnels (GET /gateway/v1/tunnel) and the devices of
// the gateways whose tunnels end here. It implements
// internal/devices.HostSet (a gateway's host is held here while its
// tunnel is served) and backends.GatewayBackends. A gateway's tunnel is
// served by the one process holding its claim; a second tunnel of the
// gateway reaching another instance is refused (service_unavailable,
// retryable) until the first one's process lets the claim go: at once
// when that process or its database connection dies, or when its tunnel
// ends; a half-open tunnel (the network dropped without a close) holds it
// until that instance's heartbeats fail (two pings unanswered).
//
// The hub needs the application object, and the fleet's runtime needs the
// hub: build the hub, the fleet with it, then SetApplication.
type Hub struct {
	cfg HubConfig
	log *slog.Logger
	app atomic.Pointer[commands.Application]

	mu      sync.RWMutex
	tunnels map[string]*tunnelConn // by gateway id, once welcomed
	// gatewayMu serializes, per gateway, admitting a tunnel, dropping one
	// and sweeping the gateway.
	gatewayMu map[string]*sync.Mutex
	closing   chan struct{}
	closed    bool
	serving   sync.WaitGroup
}

// NewHub returns a hub serving no tunnel yet.
func NewHub(cfg HubConfig) *Hub {
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = DefaultCheckEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tunnel.Logger == nil {
		cfg.Tunnel.Logger = cfg.Logger
	}
	return &Hub{cfg: cfg, log: cfg.Logger, tunnels: map[string]*tunnelConn{}, gatewayMu: map[string]*sync.Mutex{},
		closing: make(chan struct{})}
}

// SetApplication gives the hub the application object. Call it once,
// before serving; until then every tunnel is refused
// (service_unavailable).
func (h *Hub) SetApplication(app *commands.Application) { h.app.Store(app) }

// tunnelConn is one gateway's tunnel.
type tunnelConn struct {
	h         *Hub
	gatewayID string
	orgID     string
	// name is the gateway's name: its devices are named after it.
	name string
	peer *tunnel.Peer
	// meta is the metadata of what the hub records for the tunnel: the
	// hub as the actor, in the request that opened the tunnel.
	meta eventstore.Metadata

	helloSaid atomic.Bool
	hello     chan helloCall
	// replaced is set when a newer tunnel of the gateway closes this one.
	replaced atomic.Bool
	// instance is this process's id as recorded for the tunnel (the
	// gateway claim's holder), once welcomed.
	instance string
	// ready is closed once the tunnel is welcomed, ended once it is
	// dropped (or refused).
	ready chan struct{}
	ended chan struct{}

	mu sync.Mutex
	// devices are the devices the gateway reports now, by its key.
	devices map[string]tunnel.DeviceInfo
	// ids are the ids of every device of the gateway known here, by key.
	ids map[string]string
}

type helloCall struct {
	hello  tunnel.Hello
	answer chan helloAnswer
}

type helloAnswer struct {
	welcome tunnel.Welcome
	err     error
}

// ServeTunnel serves a gateway's tunnel (GET /gateway/v1/tunnel; a
// kernel.HandlerFunc). The gateway's credential (Authorization: Bearer
// pfg_…) is checked before the upgrade: a refusal is returned as the
// 401 error, for the surface's envelope, and so is service_unavailable
// while the service shuts down. After the upgrade it serves the tunnel
// until it ends and returns nil: the gateway's hello, its device list,
// and device calls to it.
func (h *Hub) ServeTunnel(w http.ResponseWriter, r *http.Request) error {
	cred := ""
	if v := r.Header.Get("Authorization"); v != "" {
		tok, err := identity.ParseBearer(v)
		if err != nil {
			return domain.Unauthorized(domain.ReasonMalformedCredentials, "the Authorization header is not Bearer <gateway credential>")
		}
		cred = tok
	}
	app := h.app.Load()
	if app == nil {
		return domain.Errorf(domain.CodeServiceUnavailable, "this instance is starting; connect again").WithRetryable(true)
	}
	p, err := app.Gateways.AuthenticateGateway.Handle(r.Context(), gateways.AuthenticateGateway{Credential: cred})
	if err != nil {
		return err
	}
	if !h.enter() {
		return domain.Errorf(domain.CodeServiceUnavailable, "this instance is shutting down; connect to another").WithRetryable(true)
	}
	defer h.serving.Done()
	// What the hub records for the tunnel is its own act, in the request
	// that opened the tunnel.
	meta, _ := eventstore.MetadataFrom(r.Context())
	if meta.RequestID == "" {
		meta = eventstore.Metadata{RequestID: domain.NewID(domain.PrefixRequest)}
	}
	meta.ActorKind, meta.ActorID = "system", "gateway-hub"
	ctx := eventstore.WithMetadata(context.WithoutCancel(r.Context()), meta)
	meta, _ = eventstore.MetadataFrom(ctx)
	c := &tunnelConn{h: h, gatewayID: p.GatewayID, orgID: p.OrgID, name: p.Name, meta: meta, hello: make(chan helloCall),
		ready: make(chan struct{}), ended: make(chan struct{}), devices: map[string]tunnel.DeviceInfo{}, ids: map[string]string{}}
	defer close(c.ended)
	peer, err := tunnel.Accept(w, r, c.handle, h.cfg.Tunnel)
	if err != nil {
		h.log.Debug("gateway tunnel not opened", "gatewayId", c.gatewayID, "err", err)
		return nil // Accept has answered
	}
	c.peer = peer
	reason := h.serve(ctx, c)
	h.log.Info("gateway tunnel closed", "gatewayId", c.gatewayID, "reason", reason, "err", c.peer.Err())
	return nil
}

// enter counts a tunnel in, unless the hub is closing.
func (h *Hub) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.serving.Add(1)
	return true
}

// serve runs an accepted tunnel to its end and says why it ended.
func (h *Hub) serve(ctx context.Context, c *tunnelConn) string {
	timer := time.NewTimer(h.cfg.HelloTimeout)
	defer timer.Stop()
	var call helloCall
	select {
	case call = <-c.hello:
	case <-timer.C:
		c.peer.Close(websocket.StatusPolicyViolation, "no hello")
		return "no hello"
	case <-c.peer.Done():
		return "ended before its hello"
	case <-h.closing:
		c.peer.Close(websocket.StatusGoingAway, "shutting down")
		return "shutting down"
	}
	welcome, err := h.admit(ctx, c, call.hello)
	call.answer <- helloAnswer{welcome: welcome, err: err}
	if err != nil {
		select {
		case <-c.peer.Done():
		case <-time.After(refusalGrace):
		}
		c.peer.Close(websocket.StatusTryAgainLater, "refused")
		return "hello refused: " + err.Error()
	}
	h.log.Info("gateway tunnel connected", "gatewayId", c.gatewayID, "devices", len(welcome.Devices),
		"version", call.hello.Version)
	reason := h.watch(ctx, c)
	h.drop(ctx, c, reason)
	return reason
}

// handle answers the gateway's messages.
func (c *tunnelConn) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case tunnel.MethodHello:
		if c.helloSaid.Swap(true) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "a gateway says hello once per connection")
		}
		var hello tunnel.Hello
		if err := json.Unmarshal(params, &hello); err != nil {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "the hello cannot be read").Wrap(err)
		}
		call := helloCall{hello: hello, answer: make(chan helloAnswer, 1)}
		select {
		case c.hello <- call:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		a := <-call.answer
		return a.welcome, a.err
	case tunnel.MethodDevices:
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var changed tunnel.DevicesChanged
		if err := json.Unmarshal(params, &changed); err != nil {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "the device list cannot be read").Wrap(err)
		}
		return nil, c.h.update(eventstore.WithMetadata(ctx, c.meta), c, changed.Devices)
	}
	return nil, tunnel.ErrUnknownMethod
}

// admit makes this process the host of a gateway that said hello: it
// takes the gateway's claim, settles the actions another process left
// unfinished on it, registers the devices it reports (once per key),
// records them online and its other devices offline, and starts serving
// them. A tunnel of the gateway still open here is closed first: the
// gateway opened a new one. Errors answer the hello: service_unavailable
// (retryable) when another process holds the claim or the database
// failed, invalid_argument for a device list that cannot be registered.
func (h *Hub) admit(ctx context.Context, c *tunnelConn, hello tunnel.Hello) (tunnel.Welcome, error) {
	app := h.app.Load()
	if app == nil {
		return tunnel.Welcome{}, domain.Errorf(domain.CodeServiceUnavailable, "this instance is starting; try again").WithRetryable(true)
	}
	gw, key := c.gatewayID, domain.GatewayHostKey(c.gatewayID)
	unlock := h.lockOpen(c)
	if unlock == nil {
		return tunnel.Welcome{}, domain.Errorf(domain.CodeServiceUnavailable, "the connection ended").WithRetryable(true)
	}
	defer unlock()
	tookOver, err := h.cfg.Claims.Take(ctx, gw)
	if errors.Is(err, backends.ErrHeld) {
		return tunnel.Welcome{}, domain.Errorf(domain.CodeServiceUnavailable,
			"another instance of the service serves this gateway now; try again shortly").WithRetryable(true)
	}
	if err != nil {
		return tunnel.Welcome{}, unavailable(err)
	}
	release := func(err error) (tunnel.Welcome, error) {
		h.cfg.Claims.Release(gw)
		var de *domain.Error
		if errors.As(err, &de) {
			return tunnel.Welcome{}, de
		}
		return tunnel.Welcome{}, unavailable(err)
	}
	if tookOver {
		if err := h.markAbandoned(ctx, app, key); err != nil {
			return release(err)
		}
	}
	reported := make([]fleet.GatewayDevice, 0, len(hello.Devices))
	for _, d := range hello.Devices {
		reported = append(reported, fleet.GatewayDevice{Key: d.Key, Backend: d.Backend, Model: d.Model, Serial: d.Serial,
			Width: d.Width, Height: d.Height})
	}
	ids, err := app.Fleet.RegisterGatewayDevices.Handle(ctx, fleet.RegisterGatewayDevices{GatewayID: gw, GatewayName: c.name, OrgID: c.orgID, Devices: reported})
	if err != nil {
		return release(err)
	}
	known, err := projections.GatewayDeviceIDs(ctx, h.cfg.Store.Pool(), gw)
	if err != nil {
		return release(err)
	}
	for k, id := range ids {
		known[k] = id
	}
	devices := map[string]tunnel.DeviceInfo{}
	for _, d := range hello.Devices {
		devices[d.Key] = d
	}
	served, err := h.recordConnections(ctx, app, known, devices, stateGone)
	if err != nil {
		return release(err)
	}
	if c.instance, err = h.holder(ctx, gw); err != nil {
		return release(err)
	}
	if _, err := app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: gw, Connected: true,
		Instance: c.instance, Version: hello.Version, Channel: hello.Channel, Devices: len(served)}); err != nil {
		return release(err)
	}
	c.mu.Lock()
	c.devices, c.ids = served, known
	c.mu.Unlock()
	h.mu.Lock()
	h.tunnels[gw] = c
	h.mu.Unlock()
	close(c.ready)
	return tunnel.Welcome{GatewayID: gw, OrgID: c.orgID, Devices: welcomeDevices(served, known)}, nil
}

// lockOpen takes c's gateway lock once no other tunnel of the gateway is
// served here, closing such a tunnel and waiting for it to be dropped. It
// returns nil when c's own connection ends first.
func (h *Hub) lockOpen(c *tunnelConn) (unlock func()) {
	mu := h.gatewayLock(c.gatewayID)
	for {
		mu.Lock()
		h.mu.RLock()
		old := h.tunnels[c.gatewayID]
		h.mu.RUnlock()
		if old == nil {
			return mu.Unlock
		}
		mu.Unlock()
		old.replaced.Store(true)
		old.peer.Close(websocket.StatusPolicyViolation, "replaced by a new connection of the gateway")
		select {
		case <-old.ended:
		case <-c.peer.Done():
			return nil
		}
	}
}

func (h *Hub) gatewayLock(gatewayID string) *sync.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	mu, ok := h.gatewayMu[gatewayID]
	if !ok {
		mu = &sync.Mutex{}
		h.gatewayMu[gatewayID] = mu
	}
	return mu
}

// recordConnections records the devices reported (present in reported)
// online and the gateway's other devices offline (state) and returns the
// reported devices that can be served: a device retired from its
// organisation is not. Errors are the database's.
func (h *Hub) recordConnections(ctx context.Context, app *commands.Application, ids map[string]string,
	reported map[string]tunnel.DeviceInfo, state string) (map[string]tunnel.DeviceInfo, error) {
	served := map[string]tunnel.DeviceInfo{}
	for key, id := range ids {
		info, online := reported[key]
		_, err := app.Fleet.RecordDeviceConnection.Handle(ctx, fleet.RecordDeviceConnection{DeviceID: id, Online: online, State: state})
		if domain.ErrorCode(err) == domain.CodeDeviceUnavailable {
			continue // retired: it is not served
		}
		if err != nil {
			return nil, err
		}
		if online {
			served[key] = info
		}
	}
	return served, nil
}

// holder returns this process's id as the holder of gateway gatewayID's
// claim (table gateway_hosts), which it holds: the instance recorded as
// serving the gateway's tunnel.
func (h *Hub) holder(ctx context.Context, gatewayID string) (string, error) {
	var id string
	err := h.cfg.Store.Pool().QueryRow(ctx, `SELECT holder FROM gateway_hosts WHERE gateway_id = $1`, gatewayID).Scan(&id)
	return id, err
}

func welcomeDevices(served map[string]tunnel.DeviceInfo, ids map[string]string) []tunnel.DeviceID {
	out := make([]tunnel.DeviceID, 0, len(served))
	for key := range served {
		out = append(out, tunnel.DeviceID{Key: key, DeviceID: ids[key]})
	}
	slices.SortFunc(out, func(a, b tunnel.DeviceID) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// markAbandoned settles the actions recorded under host and left without
// an outcome by the process that held it before.
func (h *Hub) markAbandoned(ctx context.Context, app *commands.Application, host string) error {
	return workers.AbandonedActions{Mark: app.Fleet.MarkAbandonedActions, Logger: h.log}.Settle(ctx, host)
}

// update takes a gateway's new device list: devices new to it are
// registered, and each is recorded online or offline as listed.
func (h *Hub) update(ctx context.Context, c *tunnelConn, list []tunnel.DeviceInfo) error {
	app := h.app.Load()
	mu := h.gatewayLock(c.gatewayID)
	mu.Lock()
	defer mu.Unlock()
	h.mu.RLock()
	current := h.tunnels[c.gatewayID] == c
	h.mu.RUnlock()
	if !current {
		return nil // dropped meanwhile
	}
	reported := make([]fleet.GatewayDevice, 0, len(list))
	devices := map[string]tunnel.DeviceInfo{}
	for _, d := range list {
		reported = append(reported, fleet.GatewayDevice{Key: d.Key, Backend: d.Backend, Model: d.Model, Serial: d.Serial,
			Width: d.Width, Height: d.Height})
		devices[d.Key] = d
	}
	ids, err := app.Fleet.RegisterGatewayDevices.Handle(ctx, fleet.RegisterGatewayDevices{GatewayID: c.gatewayID, GatewayName: c.name, OrgID: c.orgID, Devices: reported})
	if err != nil {
		return err
	}
	c.mu.Lock()
	known := make(map[string]string, len(c.ids)+len(ids))
	for k, id := range c.ids {
		known[k] = id
	}
	c.mu.Unlock()
	for k, id := range ids {
		known[k] = id
	}
	served, err := h.recordConnections(ctx, app, known, devices, stateGone)
	c.mu.Lock()
	c.ids = known
	if err == nil {
		c.devices = served
	}
	c.mu.Unlock()
	return err
}

// watch waits for the tunnel to end, closing it when this process loses
// the gateway's claim, the gateway is revoked, or the hub closes, and
// says why it ended (domain.GatewayReason…).
func (h *Hub) watch(ctx context.Context, c *tunnelConn) string {
	t := time.NewTicker(h.cfg.CheckEvery)
	defer t.Stop()
	key := domain.GatewayHostKey(c.gatewayID)
	for {
		select {
		case <-c.peer.Done():
			return endedReason(c)
		case <-h.closing:
			c.peer.Close(websocket.StatusGoingAway, "shutting down")
			return domain.GatewayReasonShuttingDown
		case <-t.C:
		}
		if err := h.cfg.Claims.Check(ctx); err != nil || !h.cfg.Claims.Holds(key) {
			c.peer.Close(websocket.StatusTryAgainLater, "claim lost")
			return domain.GatewayReasonClaimLost
		}
		revoked, err := h.revoked(ctx, c.gatewayID)
		if err != nil {
			h.log.Warn("gateway state unreadable", "gatewayId", c.gatewayID, "err", err)
			continue
		}
		if revoked {
			c.peer.Close(websocket.StatusPolicyViolation, "revoked")
			return domain.GatewayReasonRevoked
		}
	}
}

// endedReason says why a tunnel that watch did not close ended: a newer
// tunnel of the gateway replaced it, the gateway closed it (a close frame
// came), its heartbeats went unanswered (a ping timed out), or the
// connection broke.
func endedReason(c *tunnelConn) string {
	err := c.peer.Err()
	switch {
	case c.replaced.Load():
		return domain.GatewayReasonReplaced
	case websocket.CloseStatus(err) != -1:
		return domain.GatewayReasonClosedByGateway
	case errors.Is(err, context.DeadlineExceeded):
		return domain.GatewayReasonHeartbeatLost
	}
	return domain.GatewayReasonConnectionLost
}

// revoked reports whether the gateway's stream records its revocation.
func (h *Hub) revoked(ctx context.Context, gatewayID string) (bool, error) {
	evs, err := h.cfg.Store.Load(ctx, domain.GatewayStream(gatewayID), 1)
	if err != nil {
		return false, err
	}
	var g domain.Gateway
	for _, e := range evs {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return false, err
		}
		g.Apply(ev)
	}
	return g.State() == domain.GatewayStateRevoked, nil
}

// drop stops serving an ended tunnel: its devices are no longer resolved
// here, are recorded offline, its end is recorded (for reason), and the
// gateway's claim is released.
func (h *Hub) drop(ctx context.Context, c *tunnelConn, reason string) {
	mu := h.gatewayLock(c.gatewayID)
	mu.Lock()
	defer mu.Unlock()
	h.mu.Lock()
	if h.tunnels[c.gatewayID] == c {
		delete(h.tunnels, c.gatewayID)
	}
	h.mu.Unlock()
	c.peer.Close(websocket.StatusGoingAway, "ended")
	c.mu.Lock()
	ids := c.ids
	c.devices = map[string]tunnel.DeviceInfo{}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if app := h.app.Load(); app != nil {
		if _, err := h.recordConnections(ctx, app, ids, nil, stateGatewayDisconnected); err != nil {
			// The orphaned-gateway sweep records them once the claim is free.
			h.log.Warn("recording a gateway's devices offline failed", "gatewayId", c.gatewayID, "err", err)
		}
		if _, err := app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: c.gatewayID,
			Instance: c.instance, Reason: reason}); err != nil {
			// The sweep, or the gateway's next connection, records the end.
			h.log.Warn("recording a gateway's disconnection failed", "gatewayId", c.gatewayID, "err", err)
		}
	}
	h.cfg.Claims.Release(c.gatewayID)
}

// Holds implements devices.HostSet: whether a gateway's tunnel is served
// here, under its claim, now.
func (h *Hub) Holds(key string) bool {
	gw, ok := strings.CutPrefix(key, domain.GatewayHostKey(""))
	if !ok {
		return false
	}
	h.mu.RLock()
	_, served := h.tunnels[gw]
	h.mu.RUnlock()
	return served && h.cfg.Claims.Holds(key)
}

// Held implements devices.HostSet: the host keys of the gateways whose
// tunnels are served here, sorted.
func (h *Hub) Held() []string {
	h.mu.RLock()
	keys := make([]string, 0, len(h.tunnels))
	for gw := range h.tunnels {
		if key := domain.GatewayHostKey(gw); h.cfg.Claims.Holds(key) {
			keys = append(keys, key)
		}
	}
	h.mu.RUnlock()
	slices.Sort(keys)
	return keys
}

// Device implements backends.GatewayBackends: the backend of a gateway's
// device, calling over the gateway's tunnel. Errors: device_unavailable
// (offline) when the tunnel is not served here or the gateway does not
// report the device now.
func (h *Hub) Device(_ context.Context, d *domain.Device) (domain.Backend, error) {
	h.mu.RLock()
	c := h.tunnels[d.GatewayID]
	h.mu.RUnlock()
	if c == nil || !h.cfg.Claims.Holds(domain.GatewayHostKey(d.GatewayID)) {
		return nil, gatewayOffline(d.ID, "its gateway is not connected to this instance")
	}
	c.mu.Lock()
	info, ok := c.devices[d.GatewayKey]
	c.mu.Unlock()
	if !ok {
		return nil, gatewayOffline(d.ID, "its gateway does not report it now")
	}
	return &tunnelDevice{peer: c.peer, deviceID: d.ID, info: info}, nil
}

// SweepOrphans settles the gateways no instance serves that look served:
// those with actions recorded as requested under their host, with
// devices recorded online, or recorded connected, whose claim nobody
// holds (their instance died, and the gateway has not come back). It
// takes each one's claim, marks its unfinished actions outcome unknown
// (when another process held it last), records its devices offline and
// its tunnel ended (domain.GatewayReasonInstanceLost), and releases it.
// A gateway whose claim another process holds is left to it. It returns
// how many gateways it settled; errors are the database's, and what it
// did not reach is swept next time. Every instance runs it (workers).
func (h *Hub) SweepOrphans(ctx context.Context) (int, error) {
	app := h.app.Load()
	if app == nil {
		return 0, nil
	}
	pool := h.cfg.Store.Pool()
	rows, err := pool.Query(ctx, `SELECT DISTINCT substr(host, 4) FROM action_idempotency
		WHERE state = 'requested' AND host LIKE 'gw.%' ORDER BY 1`)
	if err != nil {
		return 0, err
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	online, err := projections.GatewaysWithOnlineDevices(ctx, pool)
	if err != nil {
		return 0, err
	}
	connected, err := projections.ConnectedGateways(ctx, pool)
	if err != nil {
		return 0, err
	}
	gateways := slices.Compact(slices.Sorted(slices.Values(slices.Concat(open, online, connected))))
	settled := 0
	for _, gw := range gateways {
		done, err := h.sweep(ctx, app, gw)
		if err != nil {
			return settled, fmt.Errorf("gateway %s: %w", gw, err)
		}
		if done {
			settled++
		}
	}
	return settled, nil
}

// sweep settles one gateway unless a tunnel of it is served here or
// another process holds its claim.
func (h *Hub) sweep(ctx context.Context, app *commands.Application, gw string) (bool, error) {
	mu := h.gatewayLock(gw)
	mu.Lock()
	defer mu.Unlock()
	key := domain.GatewayHostKey(gw)
	h.mu.RLock()
	_, served := h.tunnels[gw]
	h.mu.RUnlock()
	if served || h.cfg.Claims.Holds(key) {
		return false, nil
	}
	tookOver, err := h.cfg.Claims.Take(ctx, gw)
	if errors.Is(err, backends.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer h.cfg.Claims.Release(gw)
	// When this process held it last, its own jobs settle their actions.
	if tookOver {
		if err := h.markAbandoned(ctx, app, key); err != nil {
			return false, err
		}
	}
	ids, err := projections.GatewayDeviceIDs(ctx, h.cfg.Store.Pool(), gw)
	if err != nil {
		return false, err
	}
	if _, err := h.recordConnections(ctx, app, ids, nil, stateGatewayDisconnected); err != nil {
		return false, err
	}
	// Holding the claim, this process knows no tunnel of the gateway is
	// served anywhere: whichever the stream shows open has ended.
	if _, err := app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: gw,
		Reason: domain.GatewayReasonInstanceLost}); err != nil {
		return false, err
	}
	h.log.Info("gateway without a tunnel settled", "gatewayId", gw)
	return true, nil
}

// Close closes every tunnel (1001, going away), waits for each to be
// dropped (devices recorded offline, claims released; at most about
// fifteen seconds each, in parallel), refuses new tunnels, and closes
// the claims' connection. Call it at shutdown, once the device runtime
// has stopped and the other instances no longer forward calls here.
func (h *Hub) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.closing)
	}
	h.mu.Unlock()
	h.serving.Wait()
	h.cfg.Claims.Close()
}

func gatewayOffline(deviceID, why string) error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "device %s is offline: %s", deviceID, why).
		With("reason", domain.ReasonOffline).With("deviceId", deviceID).WithRetryable(true)
}

func unavailable(err error) *domain.Error {
	return domain.Errorf(domain.CodeServiceUnavailable, "the service cannot take the gateway now; try again shortly").
		WithRetryable(true).Wrap(err)
}
