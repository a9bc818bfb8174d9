package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/runs"
	"phonefleet/eventstore"
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
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Interval between sweeps; zero means one second.
	Interval time.Duration
	Logger   *slog.Logger
}

// RunOnce ends every overdue run and reports how many it ended.
func (w RunDeadlines) RunOnce(ctx context.Context) (int, error) {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	n := 0
	ctx = workerPass(ctx, "run-deadlines")
	for {
		due, err := projections.RunsOverdue(ctx, w.Pool, now(), 500)
		if err != nil {
			return n, err
		}
		ended := 0
		for _, r := range due {
			ok, err := w.End.Handle(eventstore.CausedBy(ctx, r.RunID), runs.EndOverdueRun{RunID: r.RunID})
			if err != nil {
				return n, err
			}
			if ok {
				ended++
			}
		}
		n += ended
		// Rows the read model has not caught up on yet are left for the
		// next sweep rather than read again at once.
		if len(due) < 500 || ended == 0 {
			return n, nil
		}
	}
}

// Run sweeps until ctx ends.
func (w RunDeadlines) Run(ctx context.Context) {
	SweepEvery(ctx, w.Interval, time.Second, w.Logger, "run deadline sweep failed", func(ctx context.Context) error {
		_, err := w.RunOnce(ctx)
		return err
	})
}
