package keys

import (
	"context"
	"phonefleet/commands/cqrs"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// NarrowAPIKey asks for a key's scopes and/or device subset to shrink. A
// nil field is left unchanged.
type NarrowAPIKey struct {
	Auth      domain.Auth
	KeyID     string
	Scopes    []domain.Scope
	DeviceIDs []string
}

// NarrowAPIKeyHandler handles NarrowAPIKey.
type NarrowAPIKeyHandler struct {
	APIKeyDeps
}

// Handle narrows the key. It fails with not_found for a key that is not the
// caller's to manage, invalid_argument (with state) for a revoked or expired key,
// invalid_argument for a change that would widen the key, and
// permission_denied for a caller that is not a session.
func (h NarrowAPIKeyHandler) Handle(ctx context.Context, cmd NarrowAPIKey) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h NarrowAPIKeyHandler) handle(ctx context.Context, cmd NarrowAPIKey) error {
	if err := cmd.Auth.RequireSession("API keys"); err != nil {
		return err
	}
	return changeAPIKey(ctx, h.APIKeyDeps, cmd.KeyID, func(k domain.APIKey, now time.Time, _ *eventstore.Unit) (domain.Event, error) {
		return k.Narrow(cmd.Auth, cmd.Scopes, cmd.DeviceIDs, now)
	})
}
