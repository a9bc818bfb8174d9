package keys

import (
	"context"
	"phonefleet/commands/cqrs"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// RenewAPIKey asks for a key's expiry to be set Lifetime from now (zero:
// the default lifetime).
type RenewAPIKey struct {
	Auth     domain.Auth
	KeyID    string
	Lifetime time.Duration
}

// RenewAPIKeyHandler handles RenewAPIKey.
type RenewAPIKeyHandler struct {
	APIKeyDeps
}

// Handle renews the key. It fails with not_found for a key that is not the
// caller's to manage, invalid_argument (with state) for a revoked or expired key (an expired
// key is never resurrected), invalid_argument for a lifetime out of range
// and permission_denied for a caller that is not a session.
func (h RenewAPIKeyHandler) Handle(ctx context.Context, cmd RenewAPIKey) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h RenewAPIKeyHandler) handle(ctx context.Context, cmd RenewAPIKey) error {
	if err := cmd.Auth.RequireSession("API keys"); err != nil {
		return err
	}
	return changeAPIKey(ctx, h.APIKeyDeps, cmd.KeyID, func(k domain.APIKey, now time.Time, _ *eventstore.Unit) (domain.Event, error) {
		return k.Renew(cmd.Auth, cmd.Lifetime, now)
	})
}
