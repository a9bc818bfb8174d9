package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"phonefleet/eventstore"
)

// Sweep is the one loop of the periodic workers: a pass, made as the
// worker, every Interval until the context ends. A pass that fails is
// logged and simply made again at the next turn; nothing is retried within
// a pass by the loop. Every periodic worker runs on it (expiries, sweeps,
// schedules, the run executor's poll, adb discovery, the rate-limit
// sweep); a worker keeps only its pass, and Once (a worker's RunOnce) is
// the pass its tests make.
//
// It is not the reactor's loop: a Reactor claims when attempts end and
// slots free, and backs off while claims fail, which a fixed turn cannot.
type Sweep[R any] struct {
	// Worker names the worker: the actor of the events its passes cause
	// (each pass has its own request id, see workerPass) and the "worker"
	// of its log lines.
	Worker string
	// Interval is the pause between the end of one pass and the start of
	// the next; zero means Default, which must be positive.
	Interval, Default time.Duration
	// AtOnce makes the first pass at once instead of after one Interval.
	AtOnce bool
	// Wake, when not nil, starts a pass before the Interval is over each
	// time it receives.
	Wake <-chan struct{}
	// Logger receives failed passes; nil means slog.Default().
	Logger *slog.Logger
	// Pass is one pass. Its context carries the pass's event metadata.
	Pass func(ctx context.Context) (R, error)
}

// Once makes one pass as the worker and returns what it came to.
func (s Sweep[R]) Once(ctx context.Context) (R, error) {
	return s.Pass(workerPass(ctx, s.Worker))
}

// Run makes passes until ctx ends, logging each failed one.
func (s Sweep[R]) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = s.Default
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.Default()
	}
	first := interval
	if s.AtOnce {
		first = 0
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.Wake:
		}
		if _, err := s.Once(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("worker pass failed", "worker", s.Worker, "err", err)
		}
		t.Reset(interval)
	}
}

// sweepBatch bounds the rows one read of a pass takes.
const sweepBatch = 500

// sendEachDue sends a command for every row a read model lists as due,
// sweepBatch rows at a time, and reports how many it made a difference to
// (send's true). A row whose command fails is left for the next pass; the
// first error is returned after the other rows were tried. It reads again
// only after a full page that made a difference: rows the read model has
// not caught up on yet are left for the next pass rather than read again
// at once.
func sendEachDue[T any](ctx context.Context, due func(ctx context.Context, limit int) ([]T, error),
	send func(ctx context.Context, row T) (bool, error)) (int, error) {
	n := 0
	for {
		rows, err := due(ctx, sweepBatch)
		if err != nil {
			return n, err
		}
		did := 0
		var first error
		for _, r := range rows {
			ok, err := send(ctx, r)
			if err != nil && first == nil {
				first = err
			}
			if ok {
				did++
			}
		}
		n += did
		if first != nil || len(rows) < sweepBatch || did == 0 {
			return n, first
		}
	}
}

// workerPass returns ctx carrying the metadata of one pass of a worker:
// the worker is the actor, and the pass has its own request id, which is
// also its events' correlation and cause unless a command names a nearer
// cause (eventstore.CausedBy).
func workerPass(ctx context.Context, worker string) context.Context {
	return eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "system", ActorID: worker,
		RequestID: "wrk_" + uuid.Must(uuid.NewV7()).String()})
}
