// Package gateway is the control plane's end of gateway tunnels (issue
// 14), and the gateway program at the other end (agent.go): a gateway, a
// computer at a site with phones, holds an outbound WebSocket tunnel
// (package tunnel) to one instance of the service, and that instance
// drives the gateway's devices over it. The Hub accepts the tunnels,
// holds each gateway's host claim while its tunnel is open, and resolves
// the gateway's devices to backends that call over the tunnel. What a
// tunnel means to the service — the gateway's devices registered and
// recorded online or offline, its connection recorded, its revocation —
// is the application's: the surface serving the tunnel (http/gatewayhub)
// gives the hub a Site for each one.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/tunnel"
)

// Defaults of HubConfig.
const (
	DefaultHelloTimeout = 10 * time.Second
	DefaultCheckEvery   = 2 * time.Second
)

// refusalGrace is how long a refused hello's answer is given to reach the
// gateway (which closes on it) before the hub closes the connection.
const refusalGrace = 2 * time.Second

// HubConfig configures a Hub.
type HubConfig struct {
	// Claims are this process's gateway host claims.
	Claims *backends.GatewayClaims
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

// Hub serves gateway tunnels (for GET /gateway/v1/tunnel) and the devices
// of the gateways whose tunnels end here. It implements
// internal/devices.HostSet (a gateway's host is held here while its
// tunnel is served) and backends.GatewayBackends. A gateway's tunnel is
// served by the one process holding its claim; a second tunnel of the
// gateway reaching another instance is refused (service_unavailable,
// retryable) until the first one's process lets the claim go: at once
// when that process or its database connection dies, or when its tunnel
// ends; a half-open tunnel (the network dropped without a close) holds it
// until that instance's heartbeats fail (Tunnel.MissedPings pings
// unanswered: about 8 s by default).
//
// The device runtime is built with the hub (its gateways' hosts and
// devices), and the application over the runtime; the hub needs none of
// it: each tunnel brings its Site.
type Hub struct {
	cfg HubConfig
	log *slog.Logger

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

// Gateway is the gateway a tunnel serves, as its credential says.
type Gateway struct {
	ID    string
	OrgID string
	// Name is the gateway's name: its devices are named after it.
	Name string
}

// Devices are a gateway's devices as the application knows them: the id
// of every one of them by the gateway's key for it, and those the gateway
// reports now that are served (a device retired from its organisation is
// not).
type Devices struct {
	IDs    map[string]string
	Served map[string]tunnel.DeviceInfo
}

// Site is what a tunnel means to the service: what the hub asks of the
// application while it serves one gateway's tunnel (http/gatewayhub
// implements it over the application object, one per tunnel). The hub
// calls it holding the gateway's claim, one call at a time per gateway
// (Revoked aside), with the tunnel's context.
type Site interface {
	// Admit takes the gateway that said hello: it settles the actions an
	// earlier holder of the gateway's host left unfinished (tookOver),
	// registers the devices the hello reports, records them online and
	// the gateway's other devices offline, and records the tunnel
	// connected through instance (this process, as the claim's holder).
	// Its error answers the hello: service_unavailable (retryable) when
	// the database failed, invalid_argument for a device list that cannot
	// be registered.
	Admit(ctx context.Context, hello tunnel.Hello, instance string, tookOver bool) (Devices, error)
	// Update takes the gateway's new device list: the devices new to it
	// are registered, and each of known (and of them) is recorded online
	// or offline as listed. With an error, Devices may still hold the ids
	// known then (IDs), and Served is not to be used.
	Update(ctx context.Context, known map[string]string, list []tunnel.DeviceInfo) (Devices, error)
	// Ended records the tunnel's end: the devices of ids offline, and the
	// tunnel through instance ended for reason (domain.GatewayReason…).
	// What it cannot record is left to the orphaned-gateway sweep or the
	// gateway's next tunnel.
	Ended(ctx context.Context, ids map[string]string, instance, reason string)
	// Revoked reports whether the gateway has been revoked since; its
	// tunnel is then closed. Errors are the database's.
	Revoked(ctx context.Context) (bool, error)
}

// tunnelConn is one gateway's tunnel.
type tunnelConn struct {
	h    *Hub
	gw   Gateway
	site Site
	peer *tunnel.Peer

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

// Serve serves the tunnel of a gateway whose credential the caller has
// checked (the surface's GET /gateway/v1/tunnel): it upgrades the
// connection and serves the tunnel until it ends — the gateway's hello,
// its device lists and device calls to it — asking site what each step
// means to the service. ctx carries what the hub records for the tunnel
// (its event metadata) and outlives the request. It answers
// service_unavailable (retryable) while the hub closes, before the
// upgrade; after it, it returns nil.
func (h *Hub) Serve(ctx context.Context, w http.ResponseWriter, r *http.Request, gw Gateway, site Site) error {
	if !h.enter() {
		return domain.Errorf(domain.CodeServiceUnavailable, "this instance is shutting down; connect to another").WithRetryable(true)
	}
	defer h.serving.Done()
	c := &tunnelConn{h: h, gw: gw, site: site, hello: make(chan helloCall),
		ready: make(chan struct{}), ended: make(chan struct{}), devices: map[string]tunnel.DeviceInfo{}, ids: map[string]string{}}
	defer close(c.ended)
	peer, err := tunnel.Accept(w, r, c.handle, h.cfg.Tunnel)
	if err != nil {
		h.log.Debug("gateway tunnel not opened", "gatewayId", gw.ID, "err", err)
		return nil // Accept has answered
	}
	c.peer = peer
	reason := h.serve(ctx, c)
	h.log.Info("gateway tunnel closed", "gatewayId", gw.ID, "reason", reason, "err", c.peer.Err())
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
	h.log.Info("gateway tunnel connected", "gatewayId", c.gw.ID, "devices", len(welcome.Devices),
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
		return nil, c.h.update(ctx, c, changed.Devices)
	}
	return nil, tunnel.ErrUnknownMethod
}

// admit makes this process the host of a gateway that said hello: it
// takes the gateway's claim, has the site admit it (settling what another
// process left unfinished on it, registering and recording its devices,
// recording the tunnel) and starts serving its devices. A tunnel of the
// gateway still open here is closed first: the gateway opened a new one.
// Errors answer the hello: service_unavailable (retryable) when another
// process holds the claim or the database failed, and the site's.
func (h *Hub) admit(ctx context.Context, c *tunnelConn, hello tunnel.Hello) (tunnel.Welcome, error) {
	gw := c.gw.ID
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
	if c.instance, err = h.cfg.Claims.Holder(ctx, gw); err != nil {
		return release(err)
	}
	devs, err := c.site.Admit(ctx, hello, c.instance, tookOver)
	if err != nil {
		return release(err)
	}
	c.mu.Lock()
	c.devices, c.ids = devs.Served, devs.IDs
	c.mu.Unlock()
	h.mu.Lock()
	h.tunnels[gw] = c
	h.mu.Unlock()
	close(c.ready)
	return tunnel.Welcome{GatewayID: gw, OrgID: c.gw.OrgID, Devices: welcomeDevices(devs.Served, devs.IDs)}, nil
}

// lockOpen takes c's gateway lock once no other tunnel of the gateway is
// served here, closing such a tunnel and waiting for it to be dropped. It
// returns nil when c's own connection ends first.
func (h *Hub) lockOpen(c *tunnelConn) (unlock func()) {
	mu := h.gatewayLock(c.gw.ID)
	for {
		mu.Lock()
		h.mu.RLock()
		old := h.tunnels[c.gw.ID]
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

func welcomeDevices(served map[string]tunnel.DeviceInfo, ids map[string]string) []tunnel.DeviceID {
	out := make([]tunnel.DeviceID, 0, len(served))
	for key := range served {
		out = append(out, tunnel.DeviceID{Key: key, DeviceID: ids[key]})
	}
	slices.SortFunc(out, func(a, b tunnel.DeviceID) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// update takes a gateway's new device list, as the site records it.
func (h *Hub) update(ctx context.Context, c *tunnelConn, list []tunnel.DeviceInfo) error {
	mu := h.gatewayLock(c.gw.ID)
	mu.Lock()
	defer mu.Unlock()
	h.mu.RLock()
	current := h.tunnels[c.gw.ID] == c
	h.mu.RUnlock()
	if !current {
		return nil // dropped meanwhile
	}
	c.mu.Lock()
	known := maps.Clone(c.ids)
	c.mu.Unlock()
	devs, err := c.site.Update(ctx, known, list)
	c.mu.Lock()
	if devs.IDs != nil {
		c.ids = devs.IDs
	}
	if err == nil {
		c.devices = devs.Served
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
	key := domain.GatewayHostKey(c.gw.ID)
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
		revoked, err := c.site.Revoked(ctx)
		if err != nil {
			h.log.Warn("gateway state unreadable", "gatewayId", c.gw.ID, "err", err)
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

// drop stops serving an ended tunnel: its devices are no longer resolved
// here, the site records them offline and the tunnel's end (for reason),
// and the gateway's claim is released.
func (h *Hub) drop(ctx context.Context, c *tunnelConn, reason string) {
	mu := h.gatewayLock(c.gw.ID)
	mu.Lock()
	defer mu.Unlock()
	h.mu.Lock()
	if h.tunnels[c.gw.ID] == c {
		delete(h.tunnels, c.gw.ID)
	}
	h.mu.Unlock()
	c.peer.Close(websocket.StatusGoingAway, "ended")
	c.mu.Lock()
	ids := c.ids
	c.devices = map[string]tunnel.DeviceInfo{}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c.site.Ended(ctx, ids, c.instance, reason)
	h.cfg.Claims.Release(c.gw.ID)
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

// Fence returns this process's claim on gateway host key as its writes
// carry it (domain.HostFence); ok is false unless Holds(key).
func (h *Hub) Fence(key string) (domain.HostFence, bool) {
	if !h.Holds(key) {
		return domain.HostFence{}, false
	}
	return h.cfg.Claims.Fence(key)
}

// Lose gives up gateway host key at once: the database refused a write of
// this process's under it as fenced (another process took the gateway's
// claim). The claim is released, so Holds is false from now on, and the
// tunnel's watch closes the tunnel at its next check.
func (h *Hub) Lose(key string) {
	if gw, ok := strings.CutPrefix(key, domain.GatewayHostKey("")); ok {
		h.cfg.Claims.Release(gw)
	}
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

// Settle settles gateway gatewayID unless a tunnel of it is served here
// or another process holds its claim: it takes the gateway's claim, runs
// settle with it held (tookOver: another process held it last, so what
// that one left unfinished must be settled too), and releases it. It
// reports whether it settled the gateway; errors are the claim's and
// settle's. The orphaned-gateway sweep settles, through it, the gateways
// whose instance died and whose tunnel never came back: holding the
// claim, this process knows no tunnel of the gateway is served anywhere.
func (h *Hub) Settle(ctx context.Context, gatewayID string, settle func(ctx context.Context, tookOver bool) error) (bool, error) {
	mu := h.gatewayLock(gatewayID)
	mu.Lock()
	defer mu.Unlock()
	key := domain.GatewayHostKey(gatewayID)
	h.mu.RLock()
	_, served := h.tunnels[gatewayID]
	h.mu.RUnlock()
	if served || h.cfg.Claims.Holds(key) {
		return false, nil
	}
	tookOver, err := h.cfg.Claims.Take(ctx, gatewayID)
	if errors.Is(err, backends.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer h.cfg.Claims.Release(gatewayID)
	if err := settle(ctx, tookOver); err != nil {
		return false, err
	}
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
