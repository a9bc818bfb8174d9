package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/copilot"
	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// CopilotSweeps records what time alone decides on copilot threads: every
// Interval it lists the threads with a pending approval past its expiry or
// a turn in flight untouched for LostAfter (projections.CopilotThreadsDue)
// and sends SweepThread for each, which records the expiries
// (copilot.approval_expired) and ends a lost turn failed (turn_lost) when
// the thread's own stream says so. Nobody has to decide for an expiry to
// be recorded, and a thread whose turn's process died takes messages
// again.
type CopilotSweeps struct {
	// Sweep is the application's SweepThread command.
	Sweep cqrs.Handler[copilot.SweepThread, bool]
	Pool  *pgxpool.Pool
	// Now is the clock; nil means clock.Now. It must be the copilot's.
	Now func() time.Time
	// LostAfter is zero for domain.CopilotTurnLostAfter.
	LostAfter time.Duration
	// Interval between sweeps; zero means ten seconds.
	Interval time.Duration
	Logger   *slog.Logger
}

func (w CopilotSweeps) sweep() Sweep[int] {
	return Sweep[int]{Worker: "copilot-sweeps", Interval: w.Interval, Default: 10 * time.Second, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) {
			now := clock.Now
			if w.Now != nil {
				now = w.Now
			}
			lost := w.LostAfter
			if lost <= 0 {
				lost = domain.CopilotTurnLostAfter
			}
			at := now()
			return sendEachDue(ctx, func(ctx context.Context, limit int) ([]string, error) {
				return projections.CopilotThreadsDue(ctx, w.Pool, at, at.Add(-lost), limit)
			}, func(ctx context.Context, threadID string) (bool, error) {
				return w.Sweep.Handle(eventstore.CausedBy(ctx, threadID), copilot.SweepThread{ThreadID: threadID, LostAfter: lost})
			})
		}}
}

// RunOnce sweeps once and reports how many threads it recorded something
// on. A thread that fails is left for the next sweep; the first error is
// returned after the others were tried.
func (w CopilotSweeps) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run sweeps until ctx ends.
func (w CopilotSweeps) Run(ctx context.Context) { w.sweep().Run(ctx) }
