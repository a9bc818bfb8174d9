package workers

import (
	"context"
	"log/slog"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
)

// AbandonedActions is the host takeover pass (internal/devices.Settle):
// when this process becomes the holder of a host (the devices' sim host,
// or a gateway's), it marks every action an earlier holder left requested
// but unfinished as outcome unknown, so that such an action is never run
// again, and says how many it found. It acts as the worker
// "device-runtime".
type AbandonedActions struct {
	// Mark is the application's MarkAbandonedActions.
	Mark   cqrs.Handler[fleet.MarkAbandonedActions, int]
	Logger *slog.Logger
}

// Settle marks the actions abandoned under host (domain.HostSim, or a
// gateway's key). Its errors are the database's; the actions it did not
// reach are marked at the next takeover.
func (w AbandonedActions) Settle(ctx context.Context, host string) error {
	n, err := w.Mark.Handle(workerPass(ctx, "device-runtime"), fleet.MarkAbandonedActions{Host: host})
	if n > 0 {
		logger := w.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("actions left unfinished by an earlier process marked outcome unknown", "count", n, "host", host)
	}
	return err
}
