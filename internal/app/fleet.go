package app

import (
	"context"

	"phonefleet/commands"
	httpapi "phonefleet/http"
	"phonefleet/internal/backends"
	"phonefleet/projections"
	"phonefleet/workers"
)

// fleetProjections are the read models of devices, leases, actions, frames and receipts.
func fleetProjections() []projections.Projection { return projections.Fleet() }

// wireFleet prepares devices, leases, actions, frames and receipts: it fills a.deps and adds workers.
//
// The sim phones are driven by the one process holding the database's sim
// host claim, taken here before serving; taking it first marks the actions
// an earlier process left unfinished as outcome unknown. In local mode the
// organisation's starting phones (SERVICE_SIM_DEVICES) are registered, as
// events, on the first start only.
func (a *App) wireFleet(ctx context.Context) error {
	sim := backends.NewSimHost(a.db.Pool)
	fleet := commands.NewFleet(commands.FleetConfig{Store: a.store, Runner: a.runner,
		Backends: &backends.Registry{Sim: sim}})
	exec := workers.NewExecutor(fleet, sim, workers.ExecutorOptions{Logger: a.logger})
	if err := exec.Prepare(ctx); err != nil {
		return err
	}
	if a.cfg.Mode == "local" && a.orgID != "" {
		ids, err := fleet.SeedLocalFleet(ctx, a.orgID, a.cfg.SimDevices)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			a.logger.Info("local sim phones registered", "count", len(ids))
		}
	}
	a.deps.Fleet = httpapi.FleetDeps{Fleet: fleet}
	a.workers = append(a.workers,
		exec.Run,
		workers.LeaseExpiry{Fleet: fleet, Pool: a.db.Pool, Logger: a.logger}.Run,
		workers.FrameRetention{Pool: a.db.Pool, Logger: a.logger}.Run,
	)
	return nil
}
