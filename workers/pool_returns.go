package workers

import (
	"context"
	"log/slog"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/provisioning"
)

// PoolReturns gives units of the shared pay-as-you-go pool back: every
// Interval it sends ReturnPoolDevices, which retires from its organisation
// each lent device no lease is in force on any more (released, or run out
// without renewal; the lease-expiry worker need not have recorded it) or
// whose organisation lost pay-as-you-go access, and records its unit
// returned, in one append per unit. Several instances may run it: the pool
// stream's version lets one of them record each return, and a pass that
// stops half-way leaves nothing half done.
type PoolReturns struct {
	// Return is the application's ReturnPoolDevices command.
	Return cqrs.Handler[provisioning.ReturnPoolDevices, int]
	// Interval between passes; zero means one second, which bounds how
	// long a unit whose lease ended stays out (the retryAfterMs a refused
	// take names is at least that).
	Interval time.Duration
	Logger   *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w PoolReturns) sweep() Sweep[int] {
	return Sweep[int]{Worker: "pool-returns", Interval: w.Interval, Default: time.Second, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) { return w.Return.Handle(ctx, provisioning.ReturnPoolDevices{}) }}
}

// RunOnce makes one pass and reports how many units it put back.
func (w PoolReturns) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run makes a pass every Interval until ctx ends.
func (w PoolReturns) Run(ctx context.Context) { w.sweep().Run(ctx) }
