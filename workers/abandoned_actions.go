package workers

import (
	"context"
	"log/slog"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
)

// AbandonedActions is the device runtime's host takeover pass
// (internal/devices.Config.OnHost): when this process becomes the
// devices' host, it marks every action an earlier host left requested
// but unfinished as outcome unknown, so that such an action is never run
// again, and says how many it found. It acts as the worker
// "device-runtime".
type AbandonedActions struct {
	// Mark is the MarkAbandonedActions command.
	Mark cqrs.Handler[fleet.MarkAbandonedActions, int]
	// Host is the host taken over (domain.HostSim, or a gateway's key).
	Host   string
	Logger *slog.Logger
}

// RunOnce marks the abandoned actions. Its errors are the database's; the
// actions it did not reach are marked at the next takeover.
func (w AbandonedActions) RunOnce(ctx context.Context) error {
	n, err := w.Mark.Handle(workerPass(ctx, "device-runtime"), fleet.MarkAbandonedActions{Host: w.Host})
	if n > 0 {
		logger := w.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("actions left unfinished by an earlier process marked outcome unknown", "count", n, "host", w.Host)
	}
	return err
}
