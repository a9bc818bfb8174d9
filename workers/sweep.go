package workers

import (
	"context"
	"log/slog"
	"time"
)

// sweepEvery runs once every interval (fallback when interval ≤ 0) until
// ctx ends, logging a failure (as failed, with the error) and carrying on:
// a sweep that fails is simply tried again at the next tick.
func sweepEvery(ctx context.Context, interval, fallback time.Duration, logger *slog.Logger, failed string, once func(context.Context) error) {
	if interval <= 0 {
		interval = fallback
	}
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := once(ctx); err != nil && ctx.Err() == nil {
			logger.Warn(failed, "err", err)
		}
	}
}
