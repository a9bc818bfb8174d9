package keys

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListAPIKeys lists the keys a signed-in person may manage (GET /v1/api-keys).
type ListAPIKeys struct {
	Auth domain.Auth
}

// GetAPIKey reads one key record: a key a signed-in person may manage
// (GET /v1/api-keys/{id}), or with Current the calling key's own record
// (GET /v1/api-keys/current).
type GetAPIKey struct {
	Auth    domain.Auth
	KeyID   string
	Current bool
}

// NotAnAPIKey is the answer of the current-key routes to a caller that is
// not an API key.
func NotAnAPIKey() *domain.Error {
	return domain.NotFound("this request was not made with an API key, so there is no current key")
}

// ListAPIKeysHandler handles ListAPIKeys.
type ListAPIKeysHandler struct{ r projections.APIKeyReader }

// Handle needs a signed-in session (spec 5.3.4): never an API key.
func (h ListAPIKeysHandler) Handle(ctx context.Context, q ListAPIKeys) ([]domain.APIKeyRecord, error) {
	if err := q.Auth.RequireSession("API keys"); err != nil {
		return nil, err
	}
	return h.r.List(ctx, q.Auth)
}

// GetAPIKeyHandler handles GetAPIKey.
type GetAPIKeyHandler struct{ r projections.APIKeyReader }

// Handle reads a key for a signed-in session, or the calling key itself
// (as its organisation's admin would read it). Errors: permission_denied,
// not_found.
func (h GetAPIKeyHandler) Handle(ctx context.Context, q GetAPIKey) (domain.APIKeyRecord, error) {
	if q.Current {
		if q.Auth.Kind != domain.PrincipalAPIKey {
			return domain.APIKeyRecord{}, NotAnAPIKey()
		}
		return h.r.Get(ctx, domain.Auth{OrgID: q.Auth.OrgID, Role: domain.RoleAdmin}, q.Auth.APIKeyID)
	}
	if err := q.Auth.RequireSession("API keys"); err != nil {
		return domain.APIKeyRecord{}, err
	}
	return h.r.Get(ctx, q.Auth, q.KeyID)
}
