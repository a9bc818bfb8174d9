package keys

import (
	"context"
	"errors"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
)

// MintAPIKey asks for a new organisation API key for the session Auth.
type MintAPIKey struct {
	Auth   domain.Auth
	Name   string
	Scopes []domain.Scope
	// DeviceIDs narrows the key to these devices; nil means every device.
	DeviceIDs []string
	// Lifetime is how long the key lives; zero means the default (90 days).
	Lifetime time.Duration
	// Also, when set, adds to the unit that records the key what must
	// commit with it or not at all (a CLI sign-in's approval, which
	// carries the key's token sealed): a key then exists only together
	// with it. An error from Also mints nothing.
	Also func(m MintedAPIKey, u *eventstore.Unit) error
}

// MintedAPIKey is the new key's id and its token, which exists only here:
// the store keeps an HMAC of the secret.
type MintedAPIKey struct {
	KeyID string
	Token string
}

// MintAPIKeyHandler handles MintAPIKey.
type MintAPIKeyHandler struct {
	APIKeyDeps
	Hasher SecretHasher
}

// Handle mints the key and answers once the key store holds it. It fails
// with permission_denied when the caller is not a signed-in session or asks
// for scopes it does not hold, and invalid_argument for a malformed request.
func (h MintAPIKeyHandler) Handle(ctx context.Context, cmd MintAPIKey) (MintedAPIKey, error) {
	if err := cmd.Auth.RequireSession("API keys"); err != nil {
		return MintedAPIKey{}, err
	}
	tok, err := identity.NewAPIKeyToken()
	if err != nil {
		return MintedAPIKey{}, err
	}
	ev, err := domain.MintAPIKey(cmd.Auth, domain.MintAPIKeyInput{
		KeyID: tok.KeyID, Name: cmd.Name, Scopes: cmd.Scopes, DeviceIDs: cmd.DeviceIDs,
		Lifetime: cmd.Lifetime, SecretHash: h.Hasher.Hash(tok.Secret), Instance: cmd.Auth.Instance,
	}, h.now())
	if err != nil {
		return MintedAPIKey{}, err
	}
	minted := MintedAPIKey{KeyID: tok.KeyID, Token: tok.Token}
	err = changeAPIKey(ctx, h.APIKeyDeps, ev.KeyID, func(k domain.APIKey, _ time.Time, u *eventstore.Unit) (domain.Event, error) {
		if k.Exists() {
			return nil, errors.New("api key id drawn twice")
		}
		if cmd.Also != nil {
			if err := cmd.Also(minted, u); err != nil {
				return nil, err
			}
		}
		return ev, nil
	})
	if err != nil {
		return MintedAPIKey{}, err
	}
	return minted, nil
}
