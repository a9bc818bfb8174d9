package checkpoints

import (
	"context"

	"phonefleet/domain"
	"phonefleet/receiptchain"
)

// RotateSigningKey replaces the active signing key with a new one. The old
// key stays published, valid until the new one's start, so checkpoints it
// signed keep verifying.
type RotateSigningKey struct{}

// RotateSigningKeyHandler handles RotateSigningKey.
type RotateSigningKeyHandler struct{ c *Checkpoints }

// Handle returns the new key. A checkpoint being signed with the old key
// while it commits is refused by the store (it expects the keys' stream
// where it read it) and signed again with the new key.
func (h RotateSigningKeyHandler) Handle(ctx context.Context, _ RotateSigningKey) (receiptchain.PublishedKey, error) {
	if h.c.Box == nil {
		return receiptchain.PublishedKey{}, domain.Errorf(domain.CodeInvalidArgument,
			"no server key to seal a signing key with: run with the service's SERVICE_DATA_DIR")
	}
	keys, _, err := h.c.keys().Update(ctx, "", func(s *domain.SigningKeys) ([]domain.Event, error) {
		// A server key that cannot open the active key is not the
		// service's (another SERVICE_DATA_DIR): the service could not
		// open the new key either, and would stop signing.
		if a, ok := s.Active(); ok {
			if _, err := a.PrivateKey(h.c.Box); err != nil {
				return nil, domain.Errorf(domain.CodeInvalidArgument,
					"this server key cannot open the active signing key %s: run with the service's SERVICE_DATA_DIR", a.KeyID)
			}
		}
		g, err := s.Generate(h.c.Box, h.c.now())
		if err != nil {
			return nil, err
		}
		return []domain.Event{g}, nil
	})
	if err != nil {
		return receiptchain.PublishedKey{}, err
	}
	key, _ := keys.Active()
	return key.Published(), nil
}
