package checkpoints

import (
	"context"
	"errors"
	"fmt"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// SignCheckpoints signs the chain of every organisation that is due a
// checkpoint (domain.CheckpointPolicy): one pass of the checkpoint worker.
type SignCheckpoints struct{}

// SignCheckpointsHandler handles SignCheckpoints.
type SignCheckpointsHandler struct{ c *Checkpoints }

// signBatch bounds the organisations one read of a pass takes.
const signBatch = 500

// Handle reports how many checkpoints it signed. Each is appended to its
// organisation's checkpoint stream at the version it decided on, and only
// if the keys' stream is still where it was read: several instances may
// run the worker, and an organisation is signed once per head, always with
// the active key. An organisation whose checkpoint fails is left for the
// next pass; the first error is returned after the others were tried.
func (h SignCheckpointsHandler) Handle(ctx context.Context, _ SignCheckpoints) (int, error) {
	n := 0
	var first error
	for after := ""; ; {
		due, err := projections.ChainsAhead(ctx, h.c.Pool, after, signBatch)
		if err != nil {
			return n, err
		}
		for _, d := range due {
			signed, err := h.sign(ctx, d)
			if err != nil && first == nil {
				first = fmt.Errorf("checkpoint of %s: %w", d.OrgID, err)
			}
			if signed {
				n++
			}
			after = d.OrgID
		}
		if len(due) < signBatch {
			return n, first
		}
	}
}

func (h SignCheckpointsHandler) sign(ctx context.Context, d projections.ChainDue) (bool, error) {
	keysRepo := h.c.keys()
	_, committed, err := h.c.chains().UpdateWith(ctx, d.OrgID, func(s *domain.CheckpointChain, u *eventstore.Unit) ([]domain.Event, error) {
		keys, version, err := keysRepo.Load(ctx, "")
		if err != nil {
			return nil, err
		}
		evs, err := s.Sign(keys, h.c.Box, d.Head, h.c.Policy, h.c.now())
		if len(evs) > 0 {
			// Held until the checkpoint commits: a rotation waits for it,
			// and then sees it (newKey).
			u.Exec(signingLock).Expect(domain.ReceiptSigningKeysStream, version)
		}
		return evs, err
	})
	if errors.Is(err, domain.ErrNoSigningKey) {
		return false, nil // the service has not started its key yet
	}
	if err != nil {
		return false, err
	}
	return len(committed.Appends) > 0, h.c.wait(ctx, committed)
}
