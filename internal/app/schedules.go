package app

import (
	"context"

	"phonefleet/projections"
)

// scheduleProjections are the read models of schedules.
func scheduleProjections() []projections.Projection {
	return nil
}

// wireSchedules builds the schedule capability and its firing worker.
func (a *App) wireSchedules(ctx context.Context) error {
	return nil
}
