package app

import (
	"context"
	"time"

	"phonefleet/commands/schedules"
	"phonefleet/projections"
	"phonefleet/workers"
)

// scheduleProjections are the read models of schedules.
func scheduleProjections() []projections.Projection {
	return []projections.Projection{projections.Schedules{}}
}

// wireSchedules builds the schedule capability and its firing worker.
func (a *App) wireSchedules(ctx context.Context) error {
	a.capabilities.Schedules = schedules.New(schedules.Config{Store: a.store, ReadModels: a.runner})
	a.workers = append(a.workers, func(ctx context.Context) {
		// The application object is built after every capability; the
		// worker sends its commands through it once the service runs.
		a.scheduleWorker(nil).Run(ctx)
	})
	return nil
}

// scheduleWorker is the firing worker over the application object, with
// clock now (nil: the wall clock).
func (a *App) scheduleWorker(now func() time.Time) workers.Schedules {
	c := a.app.Schedules
	return workers.NewSchedules(workers.Schedules{Fire: c.FireSchedule, Complete: c.CompleteScheduleFiring,
		Resolve: c.ResolveScheduleFiring, StartRun: a.app.Runs.StartRun, Pool: a.db.Pool, Now: now,
		Logger: a.logger.With("worker", "schedules")})
}
