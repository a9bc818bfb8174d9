package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/provisioning"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// FulfilmentSweeps moves fulfilments along with time and inventory: every
// Interval it reads the fulfilments read model for phones awaiting
// provisioning (oldest first, the queue for free units) and for
// provisioned phones whose end is due, and sends SweepFulfilment for each.
// The command decides on the fulfilment's stream: it provisions an
// awaiting phone when a unit of its slot is free for it (fulfilment.changed),
// moves a passed estimate (no event), gives a phone up undelivered once
// UndeliveredAfter has passed since its payment (no event), and ends a
// day pass (no event) or a subscription whose renewal was cancelled
// (fulfilment.changed) when its time is up. Several instances may run it:
// each decision appends at the fulfilment stream's version and a device is
// registered once per fulfilment.
type FulfilmentSweeps struct {
	// Sweep is the application's SweepFulfilment command.
	Sweep cqrs.Handler[provisioning.SweepFulfilment, string]
	Pool  *pgxpool.Pool
	// Now is the clock choosing which ends are due; nil means clock.Now.
	// The command decides with the provisioning capability's clock.
	Now func() time.Time
	// Interval between sweeps; zero means 10 seconds.
	Interval time.Duration
	// UndeliveredAfter is how long a paid phone may await provisioning;
	// zero means domain.DefaultUndeliveredAfter.
	UndeliveredAfter time.Duration
	Logger           *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w FulfilmentSweeps) sweep() Sweep[map[string]int] {
	return Sweep[map[string]int]{Worker: "fulfilment-sweeps", Interval: w.Interval, Default: 10 * time.Second,
		Logger: w.Logger, Pass: w.pass}
}

// RunOnce sweeps every awaiting fulfilment and every provisioned one whose
// end is due, and reports how many of each outcome it caused (keyed by
// the command's answer). A fulfilment that fails is left for the next
// sweep; the first error is returned after the others were tried.
func (w FulfilmentSweeps) RunOnce(ctx context.Context) (map[string]int, error) {
	return w.sweep().Once(ctx)
}

// Run sweeps until ctx ends.
func (w FulfilmentSweeps) Run(ctx context.Context) { w.sweep().Run(ctx) }

// pass is one sweep: one page of each kind.
func (w FulfilmentSweeps) pass(ctx context.Context) (map[string]int, error) {
	now := clock.Now
	if w.Now != nil {
		now = w.Now
	}
	awaiting, err := projections.AwaitingFulfilments(ctx, w.Pool, sweepBatch)
	if err != nil {
		return nil, err
	}
	ending, err := projections.EndingFulfilments(ctx, w.Pool, now(), sweepBatch)
	if err != nil {
		return nil, err
	}
	done := map[string]int{}
	var first error
	for _, f := range append(awaiting, ending...) {
		did, err := w.Sweep.Handle(eventstore.CausedBy(ctx, f.FulfilmentID),
			provisioning.SweepFulfilment{FulfilmentID: f.FulfilmentID, UndeliveredAfter: w.UndeliveredAfter})
		if err != nil && first == nil {
			first = err
		}
		if did != provisioning.SweptNothing {
			done[did]++
		}
	}
	return done, first
}
