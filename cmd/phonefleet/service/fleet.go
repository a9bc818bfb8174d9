package service

import (
	"context"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/devices"
	"phonefleet/projections"
	"phonefleet/workers"
)

// fleetProjections are the read models of devices, leases, actions, frames and receipts.
func fleetProjections() []projections.Projection { return projections.Fleet() }

// wireFleet builds the device runtime (sim phones, adb devices and the
// gateways' devices, through the gateway hub; calls to the other
// instances through the cluster's node, dialled before it) and the fleet
// capability over it.
func (a *App) wireFleet(context.Context) error {
	a.devices = devices.Assemble(devices.AssembleConfig{Pool: a.db.Pool, ADBAddr: a.cfg.ADBAddr, Gateways: a.newGatewayHub(),
		Transport: a.transport(), Logger: a.logger})
	// A local deployment's sim browsers load pages served on this machine
	// directly; a hosted one's never reach it.
	a.devices.Sim.DirectLoopback = a.cfg.Mode == "local"
	a.capabilities.Fleet = fleet.New(fleet.Config{Store: a.store, ReadModels: a.runner, Runtime: a.devices.Runtime,
		NewSimState: backends.NewSimState})
	return nil
}

// serveFleet puts the fleet to work through the application object. The
// sim phones are driven by the one process holding the database's sim host
// claim, taken here before serving; taking it first marks the actions an
// earlier process left unfinished as outcome unknown (and the runtime does
// the same whenever it takes the claim over later). In local mode the
// organisation's starting phones (SERVICE_SIM_DEVICES) are registered, as
// events, on the first start only. The fleet's workers expire leases,
// drop frames past retention, settle the resets leases owe and, with adb
// discovery, register the adb server's devices.
func (a *App) serveFleet(ctx context.Context) error {
	settle := workers.AbandonedActions{Mark: a.app.Fleet.MarkAbandonedActions, Logger: a.logger}.Settle
	if err := a.devices.Runtime.Prepare(ctx, settle); err != nil {
		a.devices.Runtime.Stop() // gives the host claim back
		return err
	}
	if a.cfg.Mode == "local" && a.orgID != "" {
		ids, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: a.orgID, Backend: domain.BackendSim,
			Count: a.cfg.SimDevices, NamePrefix: "sim", SeedMarker: domain.LocalFleetStream(a.orgID)})
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			a.logger.Info("local sim phones registered", "count", len(ids))
		}
	}
	a.workers = append(a.workers,
		func(ctx context.Context) { a.devices.Runtime.Run(ctx, settle) },
		workers.LeaseExpiry{Expire: a.app.Fleet.ExpireLease, Pool: a.db.Pool, Logger: a.logger}.Run,
		workers.FrameRetention{Pool: a.db.Pool, Logger: a.logger}.Run,
		workers.DeviceResets{Reset: a.app.Fleet.ResetDevice, Pool: a.db.Pool, Logger: a.logger}.Run,
	)
	a.serveADBDiscovery()
	a.serveGatewayHub(settle)
	return nil
}
