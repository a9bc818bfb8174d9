package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"phonefleet/eventstore"
)

// SweepEvery runs once every interval (fallback when interval ≤ 0) until
// ctx ends, logging a failure (as failed, with the error) and carrying on:
// a sweep that fails is simply tried again at the next tick.
func SweepEvery(ctx context.Context, interval, fallback time.Duration, logger *slog.Logger, failed string, once func(context.Context) error) {
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

// workerPass returns ctx carrying the metadata of one pass of a worker:
// the worker is the actor, and the pass has its own request id, which is
// also its events' correlation and cause unless a command names a nearer
// cause (eventstore.CausedBy).
func workerPass(ctx context.Context, worker string) context.Context {
	return eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "system", ActorID: worker,
		RequestID: "wrk_" + uuid.Must(uuid.NewV7()).String()})
}
