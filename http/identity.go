package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/internal/clock"
	"phonefleet/internal/identity"
)

// IdentityDeps is what the routes of API keys (spec 5.3), the discovery
// documents (spec 5.2), CORS (spec 9.2) and the rate limits (spec 8) need.
// The zero value serves local mode without key management: key routes
// answer 503, discovery 404, no origin is allowed and nothing is limited.
type IdentityDeps struct {
	// PublicURL is {base_url}; the bearer challenge and the discovery
	// documents name addresses under it. Empty derives it from the request.
	PublicURL string
	// Issuer is the authorization server named by the discovery documents;
	// empty (and local mode) answers them 404.
	Issuer string
	// CORSOrigins are the browser origins allowed to call the service.
	CORSOrigins []string
	// RateLimiter counts requests (hosted only); nil disables rate limits.
	RateLimiter RateLimiter
	// RateLimitAuthenticated and RateLimitAnonymous are the per-minute
	// budgets of callers with and without Authorization.
	RateLimitAuthenticated, RateLimitAnonymous int
	// KeyClock is the clock for the state reported on key records; nil
	// means clock.Now.
	KeyClock func() time.Time
	// IdentityWebhookSecret is SERVICE_IDENTITY_WEBHOOK_SECRET, the
	// Standard Webhooks secret (whsec_…) the identity provider signs
	// POST /webhooks/identity with; empty answers that route 404.
	IdentityWebhookSecret string
	// IdentityWebhookClock is the clock a signature's timestamp is checked
	// against; nil means clock.Now.
	IdentityWebhookClock func() time.Time
}

// RateLimiter counts one request of a caller's bucket against its budget
// (identity.RateLimiter satisfies it).
type RateLimiter interface {
	Take(ctx context.Context, bucket string, limit int) (identity.RateDecision, error)
}

// registerIdentityRoutes mounts the API key routes on the /v1 router.
// Management needs a signed-in session (spec 5.3.4); /current is the
// calling key's own record. "current" is registered before {id} so it is
// never read as a key id.
func (s *Server) registerIdentityRoutes(r *mux.Router) {
	r.Handle("/api-keys", kernel.HandlerFunc(s.listAPIKeys)).Methods(http.MethodGet)
	r.Handle("/api-keys", kernel.HandlerFunc(s.mintAPIKey)).Methods(http.MethodPost)
	r.Handle("/api-keys/current", kernel.HandlerFunc(s.getCurrentAPIKey)).Methods(http.MethodGet)
	r.Handle("/api-keys/current", kernel.HandlerFunc(s.revokeCurrentAPIKey)).Methods(http.MethodDelete)
	r.Handle("/api-keys/{id}", kernel.HandlerFunc(s.getAPIKey)).Methods(http.MethodGet)
	r.Handle("/api-keys/{id}", kernel.HandlerFunc(s.updateAPIKey)).Methods(http.MethodPatch)
	r.Handle("/api-keys/{id}", kernel.HandlerFunc(s.revokeAPIKey)).Methods(http.MethodDelete)
	r.Handle("/api-keys/{id}/rotate", kernel.HandlerFunc(s.rotateAPIKey)).Methods(http.MethodPost)
}

// apiKeyJSON is the key record of the key routes.
type apiKeyJSON struct {
	ID     string         `json:"id"`
	Name   string         `json:"name"`
	Scopes []domain.Scope `json:"scopes"`
	// DeviceIDs is null when the key reaches every device.
	DeviceIDs []string `json:"deviceIds"`
	State     string   `json:"state"`
	// TokenPrefix is the part of the token before the secret, which is
	// not secret, so a person can tell their keys apart.
	TokenPrefix              string     `json:"tokenPrefix"`
	MintedBy                 mintedBy   `json:"mintedBy"`
	CreatedAt                time.Time  `json:"createdAt"`
	ExpiresAt                time.Time  `json:"expiresAt"`
	RotatedAt                *time.Time `json:"rotatedAt"`
	PreviousSecretValidUntil *time.Time `json:"previousSecretValidUntil"`
	RenewedAt                *time.Time `json:"renewedAt"`
	NarrowedAt               *time.Time `json:"narrowedAt"`
	RevokedAt                *time.Time `json:"revokedAt"`
}

type mintedBy struct {
	UserID string `json:"userId"`
	Role   string `json:"role"`
}

// apiKeyWithToken is the answer of mint and rotate: the only time the token
// is ever shown.
type apiKeyWithToken struct {
	Key   apiKeyJSON `json:"key"`
	Token string     `json:"token"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (s *Server) keyNow() time.Time {
	if s.deps.Identity.KeyClock != nil {
		return s.deps.Identity.KeyClock()
	}
	return clock.Now()
}

func (s *Server) keyJSON(k domain.APIKeyRecord) apiKeyJSON {
	now := s.keyNow()
	out := apiKeyJSON{
		ID: k.ID, Name: k.Name, Scopes: k.Scopes, DeviceIDs: k.DeviceIDs, State: k.State(now),
		TokenPrefix: identity.APIKeyPrefix + k.ID[len(domain.PrefixAPIKey)+1:] + "_",
		MintedBy:    mintedBy{UserID: k.MintedBy, Role: k.MintedByRole},
		CreatedAt:   k.MintedAt.UTC(), ExpiresAt: k.ExpiresAt.UTC(),
		RotatedAt: optTime(k.RotatedAt), RenewedAt: optTime(k.RenewedAt), NarrowedAt: optTime(k.NarrowedAt),
		RevokedAt: optTime(k.RevokedAt),
	}
	if !k.RotatedAt.IsZero() && now.Before(k.PreviousValidUntil) {
		out.PreviousSecretValidUntil = optTime(k.PreviousValidUntil)
	}
	if out.Scopes == nil {
		out.Scopes = []domain.Scope{}
	}
	return out
}

func (s *Server) listAPIKeys(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	rows, err := s.app.Keys.ListAPIKeys.Handle(r.Context(), keys.ListAPIKeys{Auth: a})
	if err != nil {
		return err
	}
	out := make([]apiKeyJSON, len(rows))
	for i, k := range rows {
		out[i] = s.keyJSON(k)
	}
	return kernel.WriteJSON(w, http.StatusOK, map[string]any{"keys": out})
}

type mintAPIKeyBody struct {
	Name          string         `json:"name"`
	Scopes        []domain.Scope `json:"scopes"`
	DeviceIDs     []string       `json:"deviceIds"`
	ExpiresInDays *int           `json:"expiresInDays"`
}

// lifetimeOf turns expiresInDays into a lifetime (zero: the default).
func lifetimeOf(days *int) (time.Duration, error) {
	if days == nil {
		return 0, nil
	}
	if *days < 1 || *days > int(domain.MaxAPIKeyLifetime/(24*time.Hour)) {
		return 0, domain.Errorf(domain.CodeInvalidArgument, "expiresInDays must be from 1 to %d", int(domain.MaxAPIKeyLifetime/(24*time.Hour))).
			With("field", "expiresInDays")
	}
	return time.Duration(*days) * 24 * time.Hour, nil
}

func (s *Server) mintAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body mintAPIKeyBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	lifetime, err := lifetimeOf(body.ExpiresInDays)
	if err != nil {
		return err
	}
	minted, err := s.app.Keys.MintAPIKey.Handle(r.Context(), keys.MintAPIKey{Auth: a,
		Name: body.Name, Scopes: body.Scopes, DeviceIDs: body.DeviceIDs, Lifetime: lifetime})
	if err != nil {
		return err
	}
	k, err := s.app.Keys.GetAPIKey.Handle(r.Context(), keys.GetAPIKey{Auth: a, KeyID: minted.KeyID})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusCreated, apiKeyWithToken{Key: s.keyJSON(k), Token: minted.Token})
}

func (s *Server) getAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	k, err := s.app.Keys.GetAPIKey.Handle(r.Context(), keys.GetAPIKey{Auth: a, KeyID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, s.keyJSON(k))
}

type updateAPIKeyBody struct {
	Scopes        []domain.Scope `json:"scopes"`
	DeviceIDs     []string       `json:"deviceIds"`
	ExpiresInDays *int           `json:"expiresInDays"`
}

// updateAPIKey narrows (scopes, deviceIds) or renews (expiresInDays) a key:
// one change per request, so each is one event and one answer.
func (s *Server) updateAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body updateAPIKeyBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	id := mux.Vars(r)["id"]
	narrow := body.Scopes != nil || body.DeviceIDs != nil
	var err error
	switch {
	case narrow && body.ExpiresInDays != nil:
		return domain.Errorf(domain.CodeInvalidArgument, "narrow (scopes, deviceIds) and renew (expiresInDays) in separate requests")
	case narrow:
		_, err = s.app.Keys.NarrowAPIKey.Handle(r.Context(), keys.NarrowAPIKey{Auth: a, KeyID: id,
			Scopes: body.Scopes, DeviceIDs: body.DeviceIDs})
	case body.ExpiresInDays != nil:
		lifetime, lerr := lifetimeOf(body.ExpiresInDays)
		if lerr != nil {
			return lerr
		}
		_, err = s.app.Keys.RenewAPIKey.Handle(r.Context(), keys.RenewAPIKey{Auth: a, KeyID: id, Lifetime: lifetime})
	default:
		return domain.Errorf(domain.CodeInvalidArgument, "send scopes and/or deviceIds to narrow the key, or expiresInDays to renew it")
	}
	if err != nil {
		return err
	}
	k, err := s.app.Keys.GetAPIKey.Handle(r.Context(), keys.GetAPIKey{Auth: a, KeyID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, s.keyJSON(k))
}

func (s *Server) rotateAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id := mux.Vars(r)["id"]
	rotated, err := s.app.Keys.RotateAPIKey.Handle(r.Context(), keys.RotateAPIKey{Auth: a, KeyID: id})
	if err != nil {
		return err
	}
	k, err := s.app.Keys.GetAPIKey.Handle(r.Context(), keys.GetAPIKey{Auth: a, KeyID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, apiKeyWithToken{Key: s.keyJSON(k), Token: rotated.Token})
}

func (s *Server) revokeAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	_, err := s.app.Keys.RevokeAPIKey.Handle(r.Context(), keys.RevokeAPIKey{Auth: a, KeyID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getCurrentAPIKey(w http.ResponseWriter, r *http.Request) error {
	k, err := s.app.Keys.GetAPIKey.Handle(r.Context(), keys.GetAPIKey{Auth: authOf(r), Current: true})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, s.keyJSON(k))
}

func (s *Server) revokeCurrentAPIKey(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	if a.Kind != domain.PrincipalAPIKey {
		return keys.NotAnAPIKey()
	}
	if _, err := s.app.Keys.RevokeAPIKey.Handle(r.Context(), keys.RevokeAPIKey{Auth: a, KeyID: a.APIKeyID, Self: true}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
