package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/runs"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// RunDeadlines ends overdue runs: every Interval it reads the runs read
// model for live runs past their deadline, or parked past their wait for a
// person, and sends EndOverdueRun for each (failed, deadline_exceeded or
// user_control_timeout). Several instances may run it: the command decides
// on the run's stream, so a run is ended once.
type RunDeadlines struct {
	// End is the application's EndOverdueRun command.
	End  cqrs.Handler[runs.EndOverdueRun, bool]
	Pool *pgxpool.Pool
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// Interval between sweeps; zero means one second.
	Interval time.Duration
	Logger   *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w RunDeadlines) sweep() Sweep[int] {
	now := clock.Now
	if w.Now != nil {
		now = w.Now
	}
	return Sweep[int]{Worker: "run-deadlines", Interval: w.Interval, Default: time.Second, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) {
			return sendEachDue(ctx, func(ctx context.Context, limit int) ([]projections.LiveRun, error) {
				return projections.RunsOverdue(ctx, w.Pool, now(), limit)
			}, func(ctx context.Context, r projections.LiveRun) (bool, error) {
				return w.End.Handle(eventstore.CausedBy(ctx, r.RunID), runs.EndOverdueRun{RunID: r.RunID})
			})
		}}
}

// RunOnce ends every overdue run and reports how many it ended.
func (w RunDeadlines) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run sweeps until ctx ends.
func (w RunDeadlines) Run(ctx context.Context) { w.sweep().Run(ctx) }
