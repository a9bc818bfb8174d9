package workers

import (
	"context"
	"log/slog"
	"time"

	"phonefleet/commands/checkpoints"
	"phonefleet/commands/cqrs"
)

// ReceiptCheckpoints signs the receipt chains that are due a checkpoint:
// every Interval it sends SignCheckpoints, which reads the chains ahead of
// their last checkpoint and signs those the policy says are due. Several
// instances may run it: each checkpoint is appended at its organisation's
// checkpoint stream version, so a head is signed once.
type ReceiptCheckpoints struct {
	// Sign is the application's SignCheckpoints command.
	Sign cqrs.Handler[checkpoints.SignCheckpoints, int]
	// Interval between passes; zero means ten seconds.
	Interval time.Duration
	Logger   *slog.Logger
}

// sweep is the worker on the one sweep loop.
func (w ReceiptCheckpoints) sweep() Sweep[int] {
	return Sweep[int]{Worker: "receipt-checkpoints", Interval: w.Interval, Default: 10 * time.Second, AtOnce: true, Logger: w.Logger,
		Pass: func(ctx context.Context) (int, error) { return w.Sign.Handle(ctx, checkpoints.SignCheckpoints{}) }}
}

// RunOnce signs every chain due a checkpoint and reports how many.
func (w ReceiptCheckpoints) RunOnce(ctx context.Context) (int, error) { return w.sweep().Once(ctx) }

// Run signs until ctx ends.
func (w ReceiptCheckpoints) Run(ctx context.Context) { w.sweep().Run(ctx) }
