package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/eventstore"
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
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Interval between sweeps; zero means one second.
	Interval time.Duration
	Logger   *slog.Logger
}

// RunOnce expires every lease past its expiry and reports how many it
// expired.
func (w LeaseExpiry) RunOnce(ctx context.Context) (int, error) {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	n := 0
	ctx = workerPass(ctx, "lease-expiry")
	for {
		due, err := projections.LeasesPastExpiry(ctx, w.Pool, now(), 500)
		if err != nil {
			return n, err
		}
		expired := 0
		for _, l := range due {
			ok, err := w.Expire.Handle(eventstore.CausedBy(ctx, l.LeaseID), fleet.ExpireLease{DeviceID: l.DeviceID})
			if err != nil {
				return n, err
			}
			if ok {
				expired++
			}
		}
		n += expired
		// Rows the read model has not caught up on yet are left for the
		// next sweep rather than read again at once.
		if len(due) < 500 || expired == 0 {
			return n, nil
		}
	}
}

// Run sweeps until ctx ends.
func (w LeaseExpiry) Run(ctx context.Context) {
	SweepEvery(ctx, w.Interval, time.Second, w.Logger, "lease expiry sweep failed", func(ctx context.Context) error {
		_, err := w.RunOnce(ctx)
		return err
	})
}
