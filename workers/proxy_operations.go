package workers

import (
	"context"
	"log/slog"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/proxies"
)

// ProxyOperations performs the managed proxies' pending operations
// (assign, unassign, rotate): every Interval, and at once when Wake
// receives (an operation was just recorded), it sends
// PerformProxyOperations, which configures the devices and records each
// outcome. An operation is finished once: a pass that stops half-way
// leaves it pending for the next.
type ProxyOperations struct {
	Perform cqrs.Handler[proxies.PerformProxyOperations, int]
	// Interval between passes; zero means one second.
	Interval time.Duration
	Wake     <-chan struct{}
	Logger   *slog.Logger
}

func (w ProxyOperations) sweep() Sweep[int] {
	return Sweep[int]{Worker: "proxy-operations", Interval: w.Interval, Default: time.Second, Wake: w.Wake, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) { return w.Perform.Handle(ctx, proxies.PerformProxyOperations{}) }}
}

// RunOnce makes one pass and reports how many operations it finished.
func (w ProxyOperations) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run makes passes until ctx ends.
func (w ProxyOperations) Run(ctx context.Context) { w.sweep().Run(ctx) }
