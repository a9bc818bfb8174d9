package service

import (
	"phonefleet/internal/backends"
	"phonefleet/internal/gateway"
	"phonefleet/projections"
	"phonefleet/workers"
)

// gatewayHubProjections are the read models the gateway hub reads: the
// devices gateways bring.
func gatewayHubProjections() []projections.Projection {
	return []projections.Projection{projections.GatewayDevices{}}
}

// newGatewayHub builds the gateway hub (issue 14), where gateways' tunnels
// end (GET /gateway/v1/tunnel): the device runtime is built with it, since
// the gateways' devices resolve through it and their hosts are held by
// it; it receives the application object once that exists
// (serveGatewayHub).
func (a *App) newGatewayHub() *gateway.Hub {
	a.gatewayHub = gateway.NewHub(gateway.HubConfig{
		Claims: backends.NewGatewayClaims(a.db.Pool),
		Store:  a.store,
		Logger: a.logger.With("component", "gateway-hub"),
	})
	return a.gatewayHub
}

// serveGatewayHub gives the hub the application object, hands its tunnel
// to the HTTP edge and adds the sweep settling the gateways whose instance
// died (every instance runs it).
func (a *App) serveGatewayHub() {
	hub := a.gatewayHub
	hub.SetApplication(&a.app)
	a.deps.GatewayTunnel = hub.ServeTunnel
	a.workers = append(a.workers, workers.OrphanedGateways{Sweep: hub.SweepOrphans, Logger: a.logger}.Run)
}

// stopGatewayHub closes the gateways' tunnels (1001) and releases their
// claims, once nothing runs on their devices any more: after the other
// instances stopped forwarding calls here and the device runtime stopped.
func (a *App) stopGatewayHub() {
	if a.gatewayHub != nil {
		a.gatewayHub.Close()
	}
}
