package app

import (
	"context"

	"phonefleet/workers"
)

// wirePool adds the shared pay-as-you-go pool's worker: every second it
// gives back the units whose lease has ended (or whose organisation lost
// pay-as-you-go access). Taking a unit is hosted-only, so a local
// deployment lends nothing and runs no worker.
func (a *App) wirePool() {
	if a.cfg.Mode != "hosted" {
		return
	}
	a.workers = append(a.workers, func(ctx context.Context) {
		// The application object is built after every capability; the
		// worker sends its command through it once the service runs.
		workers.PoolReturns{Return: a.app.Provisioning.ReturnPoolDevices, Logger: a.logger.With("worker", "pool-returns")}.Run(ctx)
	})
}
