// Package gatewayhub is the application's side of gateway tunnels (GET
// /gateway/v1/tunnel, issue 14): it authenticates the gateway, hands the
// tunnel to the gateway hub (internal/gateway), which accepts it, holds
// the gateway's claim and drives its devices over it, and tells the hub
// what the tunnel means to the service — through the application object,
// as a worker: the gateway's devices registered and recorded online or
// offline, its connection and its end recorded, its revocation read. It
// also settles, for the orphaned-gateway sweep, a gateway whose instance
// died. It is a surface like REST and MCP: it holds no decision of its
// own.
package gatewayhub

import (
	"context"
	"log/slog"
	"net/http"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/gateway"
	"phonefleet/internal/identity"
	"phonefleet/internal/tunnel"
)

// How a gateway's devices are recorded offline: one no longer in its list
// (as adb discovery says of a device it stopped listing), and every one
// when its tunnel ends.
const (
	stateGone                = "gone"
	stateGatewayDisconnected = "gateway_disconnected"
)

// Config configures a Server.
type Config struct {
	// App is the application object.
	App *commands.Application
	// Hub serves the tunnels and holds the gateways' claims; the device
	// runtime resolves the gateways' devices through it.
	Hub *gateway.Hub
	// Settle is the host takeover pass (workers.AbandonedActions.Settle):
	// it marks the actions an earlier holder of a gateway's host left
	// unfinished as outcome unknown.
	Settle func(ctx context.Context, host string) error
	Logger *slog.Logger
}

// Server serves gateway tunnels over the hub, through the application.
type Server struct {
	cfg Config
	log *slog.Logger
}

// New returns the tunnels' surface over cfg.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, log: cfg.Logger}
}

// ServeTunnel serves a gateway's tunnel (GET /gateway/v1/tunnel; a
// kernel.HandlerFunc). The gateway's credential (Authorization: Bearer
// pfg_…) is checked before the upgrade: a refusal is returned as the 401
// error, for the surface's envelope, and so is service_unavailable while
// the service shuts down or the database cannot be reached (retryable). After the upgrade the hub serves the tunnel
// until it ends, and ServeTunnel returns nil.
func (s *Server) ServeTunnel(w http.ResponseWriter, r *http.Request) error {
	cred := ""
	if v := r.Header.Get("Authorization"); v != "" {
		tok, err := identity.ParseBearer(v)
		if err != nil {
			return domain.Unauthorized(domain.ReasonMalformedCredentials, "the Authorization header is not Bearer <gateway credential>")
		}
		cred = tok
	}
	p, err := s.cfg.App.Gateways.AuthenticateGateway.Handle(r.Context(), gateways.AuthenticateGateway{Credential: cred})
	if eventstore.Transient(err) { // the database is away: the gateway asks again
		return domain.Errorf(domain.CodeServiceUnavailable, "the service cannot check the gateway's credential now; try again shortly").
			WithRetryable(true).Wrap(err)
	}
	if err != nil {
		return err
	}
	// What is recorded for the tunnel is the hub's own act, in the
	// request that opened the tunnel.
	meta, _ := eventstore.MetadataFrom(r.Context())
	if meta.RequestID == "" {
		meta = eventstore.Metadata{RequestID: domain.NewID(domain.PrefixRequest)}
	}
	meta.ActorKind, meta.ActorID = "system", "gateway-hub"
	ctx := eventstore.WithMetadata(context.WithoutCancel(r.Context()), meta)
	meta, _ = eventstore.MetadataFrom(ctx)
	gw := gateway.Gateway{ID: p.GatewayID, OrgID: p.OrgID, Name: p.Name}
	return s.cfg.Hub.Serve(ctx, w, r, gw, &site{s: s, gw: gw, meta: meta})
}

// site is one tunnel as the application sees it (gateway.Site).
type site struct {
	s  *Server
	gw gateway.Gateway
	// meta is the metadata of what is recorded for the tunnel: the hub as
	// the actor, in the request that opened the tunnel.
	meta eventstore.Metadata
}

// Admit implements gateway.Site: it settles what an earlier holder of the
// gateway's host left (when the hub took it over), registers the devices
// the hello reports (once per key), records them online and the
// gateway's other devices offline, and records the tunnel connected.
func (t *site) Admit(ctx context.Context, hello tunnel.Hello, instance string, tookOver bool) (gateway.Devices, error) {
	app := t.s.cfg.App
	if tookOver {
		if err := t.s.cfg.Settle(ctx, domain.GatewayHostKey(t.gw.ID)); err != nil {
			return gateway.Devices{}, err
		}
	}
	ids, err := app.Fleet.RegisterGatewayDevices.Handle(ctx, t.register(hello.Devices))
	if err != nil {
		return gateway.Devices{}, err
	}
	known, err := app.Fleet.ListGatewayDevices.Handle(ctx, fleet.ListGatewayDevices{GatewayID: t.gw.ID})
	if err != nil {
		return gateway.Devices{}, err
	}
	for k, id := range ids {
		known[k] = id
	}
	served, err := t.s.recordConnections(ctx, known, byKey(hello.Devices), stateGone)
	if err != nil {
		return gateway.Devices{}, err
	}
	if _, err := app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: t.gw.ID, Connected: true,
		Instance: instance, Version: hello.Version, Channel: hello.Channel, Devices: len(served)}); err != nil {
		return gateway.Devices{}, err
	}
	return gateway.Devices{IDs: known, Served: served}, nil
}

// Update implements gateway.Site: devices new to the gateway are
// registered, and each is recorded online or offline as listed.
func (t *site) Update(ctx context.Context, known map[string]string, list []tunnel.DeviceInfo) (gateway.Devices, error) {
	ctx = eventstore.WithMetadata(ctx, t.meta)
	ids, err := t.s.cfg.App.Fleet.RegisterGatewayDevices.Handle(ctx, t.register(list))
	if err != nil {
		return gateway.Devices{}, err
	}
	if known == nil {
		known = map[string]string{}
	}
	for k, id := range ids {
		known[k] = id
	}
	served, err := t.s.recordConnections(ctx, known, byKey(list), stateGone)
	return gateway.Devices{IDs: known, Served: served}, err
}

// Ended implements gateway.Site: the gateway's devices are recorded
// offline and the tunnel's end is recorded. What fails is logged: the
// orphaned-gateway sweep, or the gateway's next connection, records it.
func (t *site) Ended(ctx context.Context, ids map[string]string, instance, reason string) {
	if _, err := t.s.recordConnections(ctx, ids, nil, stateGatewayDisconnected); err != nil {
		t.s.log.Warn("recording a gateway's devices offline failed", "gatewayId", t.gw.ID, "err", err)
	}
	if _, err := t.s.cfg.App.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: t.gw.ID,
		Instance: instance, Reason: reason}); err != nil {
		t.s.log.Warn("recording a gateway's disconnection failed", "gatewayId", t.gw.ID, "err", err)
	}
}

// Revoked implements gateway.Site.
func (t *site) Revoked(ctx context.Context) (bool, error) {
	return t.s.cfg.App.Gateways.GatewayRevoked.Handle(ctx, gateways.GatewayRevoked{GatewayID: t.gw.ID})
}

// register is the registration of the devices of list.
func (t *site) register(list []tunnel.DeviceInfo) fleet.RegisterGatewayDevices {
	reported := make([]fleet.GatewayDevice, 0, len(list))
	for _, d := range list {
		reported = append(reported, fleet.GatewayDevice{Key: d.Key, Backend: d.Backend, Model: d.Model, Serial: d.Serial,
			Width: d.Width, Height: d.Height})
	}
	return fleet.RegisterGatewayDevices{GatewayID: t.gw.ID, GatewayName: t.gw.Name, OrgID: t.gw.OrgID, Devices: reported}
}

func byKey(list []tunnel.DeviceInfo) map[string]tunnel.DeviceInfo {
	devices := make(map[string]tunnel.DeviceInfo, len(list))
	for _, d := range list {
		devices[d.Key] = d
	}
	return devices
}

// recordConnections records the devices reported (present in reported)
// online and the gateway's other devices offline (state) and returns the
// reported devices that can be served: a device retired from its
// organisation is not. Errors are the database's.
func (s *Server) recordConnections(ctx context.Context, ids map[string]string,
	reported map[string]tunnel.DeviceInfo, state string) (map[string]tunnel.DeviceInfo, error) {
	served := map[string]tunnel.DeviceInfo{}
	for key, id := range ids {
		info, online := reported[key]
		_, err := s.cfg.App.Fleet.RecordDeviceConnection.Handle(ctx, fleet.RecordDeviceConnection{DeviceID: id, Online: online, State: state})
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

// SettleOrphan settles a gateway the records show served whose claim
// nobody holds (its instance died, and the gateway has not come back),
// unless a tunnel of it is served here or another process holds its
// claim: holding the claim, it marks the gateway's unfinished actions
// outcome unknown (when another process held it last), records its
// devices offline and its tunnel ended (domain.GatewayReasonInstanceLost).
// It reports whether it settled the gateway; errors are the database's,
// and what it did not reach is settled next time. The orphaned-gateway
// sweep calls it (workers.OrphanedGateways), on every instance.
func (s *Server) SettleOrphan(ctx context.Context, gatewayID string) (bool, error) {
	app := s.cfg.App
	settled, err := s.cfg.Hub.Settle(ctx, gatewayID, func(ctx context.Context, tookOver bool) error {
		// When this process held it last, its own jobs settle their actions.
		if tookOver {
			if err := s.cfg.Settle(ctx, domain.GatewayHostKey(gatewayID)); err != nil {
				return err
			}
		}
		ids, err := app.Fleet.ListGatewayDevices.Handle(ctx, fleet.ListGatewayDevices{GatewayID: gatewayID})
		if err != nil {
			return err
		}
		if _, err := s.recordConnections(ctx, ids, nil, stateGatewayDisconnected); err != nil {
			return err
		}
		// Holding the claim, this process knows no tunnel of the gateway
		// is served anywhere: whichever the stream shows open has ended.
		_, err = app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: gatewayID,
			Reason: domain.GatewayReasonInstanceLost})
		return err
	})
	if settled {
		s.log.Info("gateway without a tunnel settled", "gatewayId", gatewayID)
	}
	return settled, err
}
