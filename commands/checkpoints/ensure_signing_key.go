package checkpoints

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
)

// EnsureSigningKey makes sure the service has a signing key, generating
// the first on first start.
type EnsureSigningKey struct{}

// EnsureSigningKeyHandler handles EnsureSigningKey.
type EnsureSigningKeyHandler struct{ c *Checkpoints }

// Handle returns the active key. Instances starting together agree on one:
// each appends the first key at version 1, one wins, the others' append
// conflicts and they find the winner's key on the retry. An active key the
// server key cannot open (another SERVICE_DATA_DIR key) is an error: the
// service would sign nothing.
func (h EnsureSigningKeyHandler) Handle(ctx context.Context, _ EnsureSigningKey) (receiptchain.PublishedKey, error) {
	keys, _, err := h.c.keys().UpdateWith(ctx, "", func(s *domain.SigningKeys, u *eventstore.Unit) ([]domain.Event, error) {
		if _, ok := s.Active(); ok {
			return nil, nil
		}
		return h.c.newKey(ctx, s, u)
	})
	if err != nil {
		return receiptchain.PublishedKey{}, err
	}
	key, _ := keys.Active()
	if _, err := key.PrivateKey(h.c.Box); err != nil {
		return receiptchain.PublishedKey{}, err
	}
	// No read-your-writes: it runs while the service starts, before the
	// projections do; the key is published once they catch up.
	return key.Published(), nil
}
