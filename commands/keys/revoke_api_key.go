package keys

import (
	"context"
	"phonefleet/commands/cqrs"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// RevokeAPIKey asks for a key to be refused from its next request on.
// Self marks a key revoking itself (DELETE /v1/api-keys/current), which
// needs no session.
type RevokeAPIKey struct {
	Auth  domain.Auth
	KeyID string
	Self  bool
}

// RevokeAPIKeyHandler handles RevokeAPIKey.
type RevokeAPIKeyHandler struct {
	APIKeyDeps
}

// Handle revokes the key and returns once the key store refuses it.
// Revoking a revoked key succeeds without recording anything. It fails with
// not_found for a key that is not the caller's to manage and
// permission_denied for a caller that is neither a session nor the key
// itself.
func (h RevokeAPIKeyHandler) Handle(ctx context.Context, cmd RevokeAPIKey) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h RevokeAPIKeyHandler) handle(ctx context.Context, cmd RevokeAPIKey) error {
	owner := cmd.Auth
	if cmd.Self {
		if cmd.Auth.Kind != domain.PrincipalAPIKey || cmd.Auth.APIKeyID != cmd.KeyID {
			return domain.APIKeyNotFound()
		}
	} else if err := cmd.Auth.RequireSession("API keys"); err != nil {
		return err
	}
	return changeAPIKey(ctx, h.APIKeyDeps, cmd.KeyID, func(k domain.APIKey, now time.Time, _ *eventstore.Unit) (domain.Event, error) {
		if cmd.Self {
			// The key acts on itself: as its organisation's admin would.
			owner = domain.Auth{OrgID: k.OrgID, Role: domain.RoleAdmin}
			if k.OrgID != cmd.Auth.OrgID {
				return nil, domain.APIKeyNotFound()
			}
		}
		ev, ok, err := k.Revoke(owner, now)
		if err != nil || !ok {
			return nil, err
		}
		return ev, nil
	})
}
