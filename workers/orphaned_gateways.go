package workers

import (
	"context"
	"log/slog"
	"time"
)

// OrphanedGateways settles, every Interval on every instance, the gateways
// whose instance died and whose tunnel never came back: their actions left
// requested get the outcome unknown and their devices go offline
// (gateway.Hub.SweepOrphans, which takes each such gateway's claim first,
// so one instance settles it). It runs as the "orphaned-gateways" worker.
type OrphanedGateways struct {
	// Sweep is one pass (gateway.Hub.SweepOrphans): how many gateways it
	// settled; errors are the database's.
	Sweep func(ctx context.Context) (int, error)
	// Interval between passes; zero means 5 s.
	Interval time.Duration
	Logger   *slog.Logger
}

// Run sweeps until ctx ends.
func (w OrphanedGateways) Run(ctx context.Context) {
	Sweep[int]{Worker: "orphaned-gateways", Interval: w.Interval, Default: 5 * time.Second, Logger: w.Logger,
		Pass: w.Sweep}.Run(ctx)
}
