package app

import (
	"context"

	"phonefleet/commands"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// usageProjections are the read models of device time.
func usageProjections() []projections.Projection {
	return []projections.Projection{projections.Usage{}}
}

// wireUsage builds the usage capability (GET /v1/usage): device time
// from the usage read model, which each read lets catch up first.
func (a *App) wireUsage(context.Context) error {
	a.capabilities.Usage = commands.NewUsage(commands.UsageConfig{Pool: a.db.Pool,
		Wait: func(ctx context.Context, ap eventstore.Appended) error {
			return a.runner.WaitFor(ctx, projections.UsageName, ap)
		}})
	return nil
}
