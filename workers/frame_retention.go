package workers

import (
	"context"
	"log/slog"
	"phonefleet/internal/clock"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// FrameRetention deletes stored frames past their retention (table
// frames, expires_at), in batches claimed with FOR UPDATE SKIP LOCKED so
// that several instances can sweep at once. A frame is unreadable from the
// moment it expires whether or not it has been swept yet; the frames
// index keeps its history.
type FrameRetention struct {
	Pool *pgxpool.Pool
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// Interval between sweeps; zero means one minute.
	Interval time.Duration
	// Batch is the most rows one statement deletes; zero means 1000.
	Batch  int
	Logger *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w FrameRetention) sweep() Sweep[int64] {
	now := clock.Now
	if w.Now != nil {
		now = w.Now
	}
	batch := w.Batch
	if batch <= 0 {
		batch = 1000
	}
	return Sweep[int64]{Worker: "frame-retention", Interval: w.Interval, Default: time.Minute, Logger: w.Logger,
		Pass: func(ctx context.Context) (int64, error) {
			var total int64
			for {
				tag, err := w.Pool.Exec(ctx, `DELETE FROM frames WHERE frame_id IN (
					SELECT frame_id FROM frames WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, now(), batch)
				if err != nil {
					return total, err
				}
				total += tag.RowsAffected()
				if tag.RowsAffected() < int64(batch) {
					return total, nil
				}
			}
		}}
}

// RunOnce deletes every expired frame and reports how many.
func (w FrameRetention) RunOnce(ctx context.Context) (int64, error) { return w.sweep().Once(ctx) }

// Run sweeps until ctx ends.
func (w FrameRetention) Run(ctx context.Context) { w.sweep().Run(ctx) }
