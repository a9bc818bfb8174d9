package app

import (
	"context"
	"time"

	"phonefleet/workers"
)

// wireFulfilments adds the fulfilment sweeps (provisioning phones as units
// free up, moving passed estimates, the undelivered-order sweep, day passes
// and cancelled renewals ending) to the workers. The fulfilments read model
// is listed in provisioningProjections.
func (a *App) wireFulfilments() {
	a.workers = append(a.workers, func(ctx context.Context) {
		// The application object is built after every capability; the
		// worker sends its commands through it once the service runs.
		a.fulfilmentSweeps(nil).Run(ctx)
	})
}

// fulfilmentSweeps is the sweeps worker over the application object, with
// clock now (nil: the wall clock).
func (a *App) fulfilmentSweeps(now func() time.Time) workers.FulfilmentSweeps {
	return workers.FulfilmentSweeps{Sweep: a.app.Provisioning.SweepFulfilment, Pool: a.db.Pool, Now: now,
		Logger: a.logger.With("worker", "fulfilment-sweeps")}
}
