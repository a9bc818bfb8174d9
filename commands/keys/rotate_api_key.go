package keys

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
)

// RotateAPIKey asks for a new secret for a key.
type RotateAPIKey struct {
	Auth  domain.Auth
	KeyID string
}

// RotateAPIKeyHandler handles RotateAPIKey.
type RotateAPIKeyHandler struct {
	APIKeyDeps
	Hasher SecretHasher
	// Grace is how long the replaced secret keeps working
	// (SERVICE_KEY_ROTATION_GRACE, 24 h by default).
	Grace time.Duration
}

// Handle gives the key a new secret and returns the new token; the old
// secret keeps working for the grace window. It fails with not_found for a
// key that is not the caller's to manage, invalid_argument (with state) for a revoked or
// expired key, and permission_denied for a caller that is not a session.
func (h RotateAPIKeyHandler) Handle(ctx context.Context, cmd RotateAPIKey) (MintedAPIKey, error) {
	if err := cmd.Auth.RequireSession("API keys"); err != nil {
		return MintedAPIKey{}, err
	}
	var tok identity.APIKeyToken
	err := changeAPIKey(ctx, h.APIKeyDeps, cmd.KeyID, func(k domain.APIKey, now time.Time, _ *eventstore.Unit) (domain.Event, error) {
		if !k.Exists() {
			return nil, domain.APIKeyNotFound()
		}
		var err error
		if tok, err = identity.NewSecretFor(k.ID); err != nil {
			return nil, err
		}
		return k.Rotate(cmd.Auth, h.Hasher.Hash(tok.Secret), h.Grace, now)
	})
	if err != nil {
		return MintedAPIKey{}, err
	}
	return MintedAPIKey{KeyID: tok.KeyID, Token: tok.Token}, nil
}
