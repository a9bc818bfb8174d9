package service

import (
	"context"

	"phonefleet/http/gatewayhub"
	"phonefleet/internal/backends"
	"phonefleet/internal/gateway"
	"phonefleet/internal/tunnel"
	"phonefleet/projections"
	"phonefleet/workers"
)

// gatewayHubProjections are the read models the gateway hub reads: the
// devices gateways bring.
func gatewayHubProjections() []projections.Projection {
	return []projections.Projection{projections.GatewayDevices{}}
}

// newGatewayHub builds the gateway hub (issue 14), where gateways' tunnels
// end: the device runtime is built with it, since the gateways' devices
// resolve through it and their hosts are held by it. It needs nothing of
// the application: the tunnels' surface (serveGatewayHub) brings that to
// each tunnel.
func (a *App) newGatewayHub() *gateway.Hub {
	a.gatewayHub = gateway.NewHub(gateway.HubConfig{
		Claims: backends.NewGatewayClaims(a.db.Pool),
		Tunnel: tunnel.Options{PingInterval: a.cfg.TunnelPingInterval, MissedPings: a.cfg.TunnelPingMisses},
		Logger: a.logger.With("component", "gateway-hub"),
	})
	return a.gatewayHub
}

// serveGatewayHub builds the tunnels' surface over the hub and the
// application object, hands it to the HTTP edge (GET /gateway/v1/tunnel)
// and adds the sweep settling the gateways whose instance died (every
// instance runs it). settle is the host takeover pass.
func (a *App) serveGatewayHub(settle func(ctx context.Context, host string) error) {
	tunnels := gatewayhub.New(gatewayhub.Config{App: &a.app, Hub: a.gatewayHub, Settle: settle,
		Logger: a.logger.With("component", "gateway-hub")})
	a.deps.GatewayTunnel = tunnels.ServeTunnel
	a.workers = append(a.workers, workers.OrphanedGateways{List: a.app.Gateways.ListGatewaysRecordedServed,
		Settle: tunnels.SettleOrphan, Logger: a.logger}.Run)
}

// stopGatewayHub closes the gateways' tunnels (1001) and releases their
// claims, once nothing runs on their devices any more: after the other
// instances stopped forwarding calls here and the device runtime stopped.
func (a *App) stopGatewayHub() {
	if a.gatewayHub != nil {
		a.gatewayHub.Close()
	}
}
