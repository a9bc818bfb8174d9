package app

import (
	"context"

	"phonefleet/internal/fleetwire"
	"phonefleet/projections"
	"phonefleet/workers"
)

// fleetProjections are the read models of devices, leases, actions, frames and receipts.
func fleetProjections() []projections.Projection { return projections.Fleet() }

// wireFleet prepares devices, leases, actions, frames and receipts: it hands
// the fleet to the application and adds its workers.
//
// The sim phones are driven by the one process holding the database's sim
// host claim, taken here (fleetwire.New) before serving; taking it first
// marks the actions an earlier process left unfinished as outcome unknown.
// In local mode the organisation's starting phones (SERVICE_SIM_DEVICES)
// are registered, as events, on the first start only.
func (a *App) wireFleet(ctx context.Context) error {
	fl, err := fleetwire.New(ctx, fleetwire.Config{Store: a.store, Runner: a.runner, Logger: a.logger, ADBAddr: a.cfg.ADBAddr,
		Gateways: a.newGatewayHub()})
	if err != nil {
		return err
	}
	a.startGatewayHub(fl)
	fleet := fl.Commands
	if a.cfg.Mode == "local" && a.orgID != "" {
		ids, err := fleet.SeedLocalFleet(ctx, a.orgID, a.cfg.SimDevices)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			a.logger.Info("local sim phones registered", "count", len(ids))
		}
	}
	a.wireADB(fl)
	a.capabilities.Fleet = fleet
	a.runtime = fl.Runtime
	a.workers = append(a.workers,
		fl.Runtime.Run,
		// The application object is built after every capability; the
		// worker sends its command through it once the service runs.
		func(ctx context.Context) {
			workers.LeaseExpiry{Expire: a.app.Fleet.ExpireLease, Pool: a.db.Pool, Logger: a.logger}.Run(ctx)
		},
		workers.FrameRetention{Pool: a.db.Pool, Logger: a.logger}.Run,
		func(ctx context.Context) {
			workers.DeviceResets{Reset: a.app.Fleet.ResetDevice, Pool: a.db.Pool, Logger: a.logger}.Run(ctx)
		},
	)
	return nil
}
