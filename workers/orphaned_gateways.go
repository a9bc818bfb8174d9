package workers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/gateways"
)

// OrphanedGateways settles, every Interval on every instance, the gateways
// whose instance died and whose tunnel never came back: their actions left
// requested get the outcome unknown and their devices go offline. It asks
// the application which gateways the records show served, and settles
// each one no instance serves (Settle takes its claim first, so one
// instance settles it). It runs as the "orphaned-gateways" worker.
type OrphanedGateways struct {
	// List is the application's ListGatewaysRecordedServed.
	List cqrs.Handler[gateways.ListGatewaysRecordedServed, []string]
	// Settle settles one gateway unless a tunnel of it is served or
	// another process holds its claim, and reports whether it did
	// (gatewayhub.Server.SettleOrphan); errors are the database's.
	Settle func(ctx context.Context, gatewayID string) (bool, error)
	// Interval between passes; zero means 5 s.
	Interval time.Duration
	Logger   *slog.Logger
}

// Run sweeps until ctx ends.
func (w OrphanedGateways) Run(ctx context.Context) {
	Sweep[int]{Worker: "orphaned-gateways", Interval: w.Interval, Default: 5 * time.Second, Logger: w.Logger,
		Pass: w.Sweep}.Run(ctx)
}

// Sweep is one pass: it returns how many gateways it settled. Errors are
// the database's; what it did not reach is swept next time.
func (w OrphanedGateways) Sweep(ctx context.Context) (int, error) {
	gws, err := w.List.Handle(ctx, gateways.ListGatewaysRecordedServed{})
	if err != nil {
		return 0, err
	}
	settled := 0
	for _, gw := range gws {
		done, err := w.Settle(ctx, gw)
		if err != nil {
			return settled, fmt.Errorf("gateway %s: %w", gw, err)
		}
		if done {
			settled++
		}
	}
	return settled, nil
}
