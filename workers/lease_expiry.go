package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// LeaseExpiry records the expiry of leases that ran out: every Interval it
// reads the leases read model for active leases past their expiry and
// sends ExpireLease for each. Several instances may run it: the command
// appends at the device stream's version, so a lease is expired once.
type LeaseExpiry struct {
	// Expire is the application's ExpireLease command.
	Expire cqrs.Handler[fleet.ExpireLease, bool]
	Pool   *pgxpool.Pool
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// Interval between sweeps; zero means one second.
	Interval time.Duration
	Logger   *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w LeaseExpiry) sweep() Sweep[int] {
	now := clock.Now
	if w.Now != nil {
		now = w.Now
	}
	return Sweep[int]{Worker: "lease-expiry", Interval: w.Interval, Default: time.Second, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) {
			return sendEachDue(ctx, func(ctx context.Context, limit int) ([]projections.ExpiredLease, error) {
				return projections.LeasesPastExpiry(ctx, w.Pool, now(), limit)
			}, func(ctx context.Context, l projections.ExpiredLease) (bool, error) {
				return w.Expire.Handle(eventstore.CausedBy(ctx, l.LeaseID), fleet.ExpireLease{DeviceID: l.DeviceID})
			})
		}}
}

// RunOnce expires every lease past its expiry and reports how many it
// expired.
func (w LeaseExpiry) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run sweeps until ctx ends.
func (w LeaseExpiry) Run(ctx context.Context) { w.sweep().Run(ctx) }
