package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// DeviceResets performs the resets devices still owe: every Interval it
// reads the device_resets read model (leases that ended with
// resetOnRelease and whose device.reset is not recorded) and sends
// ResetDevice for each. The lease commands reset at once when a lease
// ends; this sweep catches what they could not — a crash between the
// lease's end and the reset, a reset that failed, a lease a run gave up —
// so the obligation, recorded on the lease-ending event, is always met.
// ResetDevice checks the device's stream and resets through its queue, so
// a reset is done and recorded once however often it is sent. Only the
// process hosting the devices can reset them; elsewhere the command
// answers offline and the row waits.
type DeviceResets struct {
	// Reset is the application's ResetDevice command.
	Reset cqrs.Handler[fleet.ResetDevice, bool]
	Pool  *pgxpool.Pool
	// Interval between sweeps; zero means one second.
	Interval time.Duration
	Logger   *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w DeviceResets) sweep() Sweep[int] {
	return Sweep[int]{Worker: "device-resets", Interval: w.Interval, Default: time.Second, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) {
			return sendEachDue(ctx, func(ctx context.Context, limit int) ([]projections.DueReset, error) {
				return projections.ResetsDue(ctx, w.Pool, limit)
			}, func(ctx context.Context, d projections.DueReset) (bool, error) {
				ok, err := w.Reset.Handle(eventstore.CausedBy(ctx, d.LeaseID), fleet.ResetDevice{DeviceID: d.DeviceID})
				if e := domain.AsError(err); e != nil && e.Code == domain.CodeDeviceUnavailable && e.Extra["reason"] == domain.ReasonOffline {
					return false, nil // another process hosts the device; it resets it
				}
				return ok, err
			})
		}}
}

// RunOnce sends ResetDevice for every device owing a reset and reports
// how many it reset. A device that fails is left for the next sweep; the
// first error is returned after the others were tried.
func (w DeviceResets) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run sweeps until ctx ends.
func (w DeviceResets) Run(ctx context.Context) { w.sweep().Run(ctx) }
