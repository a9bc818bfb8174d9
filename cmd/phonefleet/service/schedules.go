package service

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

// wireSchedules builds the schedule capability.
func (a *App) wireSchedules(context.Context) error {
	a.capabilities.Schedules = schedules.New(schedules.Config{Store: a.store, ReadModels: a.runner})
	return nil
}

// serveSchedules adds the firing worker, which records firings and
// starts their runs through the application object.
func (a *App) serveSchedules(context.Context) error {
	a.workers = append(a.workers, a.scheduleWorker(nil).Run)
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
