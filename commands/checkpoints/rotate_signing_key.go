package checkpoints

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
)

// RotateSigningKey replaces the active signing key with a new one. The old
// key stays published, valid until the new one's start, so checkpoints it
// signed keep verifying.
type RotateSigningKey struct{}

// rotationTries bounds how often a rotation is decided again because
// checkpoints of the old key kept committing past its chosen start.
const rotationTries = 5

// RotateSigningKeyHandler handles RotateSigningKey.
type RotateSigningKeyHandler struct{ c *Checkpoints }

// Handle returns the new key. A checkpoint being signed with the old key
// while it commits is refused by the store (it expects the keys' stream
// where it read it) and signed again with the new key; one the old key
// signed after the new key's start that committed first (its instance's
// clock ahead of this one) makes the rotation decide again, so the old
// key stays valid until after it.
func (h RotateSigningKeyHandler) Handle(ctx context.Context, _ RotateSigningKey) (receiptchain.PublishedKey, error) {
	if h.c.Box == nil {
		return receiptchain.PublishedKey{}, domain.Errorf(domain.CodeInvalidArgument,
			"no server key to seal a signing key with: run with the service's SERVICE_DATA_DIR")
	}
	rotate := func(s *domain.SigningKeys, u *eventstore.Unit) ([]domain.Event, error) {
		// A server key that cannot open the active key is not the
		// service's (another SERVICE_DATA_DIR): the service could not
		// open the new key either, and would stop signing.
		if a, ok := s.Active(); ok {
			if _, err := a.PrivateKey(h.c.Box); err != nil {
				return nil, domain.Errorf(domain.CodeInvalidArgument,
					"this server key cannot open the active signing key %s: run with the service's SERVICE_DATA_DIR", a.KeyID)
			}
		}
		return h.c.newKey(ctx, s, u)
	}
	keys, _, err := h.c.keys().UpdateWith(ctx, "", rotate)
	for tries := 1; signedMeanwhile(err) && tries < rotationTries; tries++ {
		keys, _, err = h.c.keys().UpdateWith(ctx, "", rotate)
	}
	if err != nil {
		return receiptchain.PublishedKey{}, err
	}
	key, _ := keys.Active()
	return key.Published(), nil
}
