package service

import (
	"context"
	"fmt"
	"time"

	"phonefleet/commands/checkpoints"
	"phonefleet/domain"
	"phonefleet/workers"
)

// wireCheckpoints builds receipt checkpoints: the signing keys are sealed
// with the server key that seals webhook secrets and proxy passwords
// (SERVICE_DATA_DIR/webhook-secrets.key, the same on every instance), and
// chains are signed as SERVICE_RECEIPT_CHECKPOINT_EVERY and _INTERVAL say.
func (a *App) wireCheckpoints(context.Context) error {
	key, err := LoadOrCreateWebhookKey(a.cfg.DataDir)
	if err != nil {
		return err
	}
	box, err := domain.NewSecretBox(key)
	if err != nil {
		return err
	}
	a.capabilities.Checkpoints = &checkpoints.Checkpoints{Store: a.store, Pool: a.db.Pool, Box: box, ReadModels: a.runner,
		Policy: domain.CheckpointPolicy{Every: int64(a.cfg.CheckpointEvery), Interval: a.cfg.CheckpointInterval}}
	return nil
}

// serveCheckpoints makes sure the service has a signing key (generating
// the first on first start; instances starting together agree on one)
// and starts the checkpoint worker, which looks for due chains every ten
// seconds, or every checkpoint interval when that is shorter.
func (a *App) serveCheckpoints(ctx context.Context) error {
	key, err := a.app.Checkpoints.EnsureSigningKey.Handle(ctx, checkpoints.EnsureSigningKey{})
	if err != nil {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	a.logger.Debug("receipt signing key", "keyId", key.KeyID, "validFrom", key.ValidFrom)
	every := min(10*time.Second, a.cfg.CheckpointInterval)
	a.workers = append(a.workers, workers.ReceiptCheckpoints{Sign: a.app.Checkpoints.SignCheckpoints, Interval: every,
		Logger: a.logger}.Run)
	return nil
}
