package identity

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"phonefleet/domain"
)

// Authenticator resolves every /v1 and /mcp request to one authorization
// context (spec 5), or refuses it exactly as spec 5.6 says. It implements
// httpapi.Authenticator.
//
// The channel is chosen by the bearer value's shape (spec 5.1): pbk_… is an
// API key, anything else an OAuth access token. In local mode without OAuth
// (spec 5.7) the development branch applies: when DevToken is empty, no
// Authorization and any bearer that is not an API key resolve to the local
// operator; with DevToken set, exactly that bearer is required; a presented
// API key (pbk_…) is still verified and its own scopes apply.
type Authenticator struct {
	// Mode is "local" or "hosted".
	Mode string
	// LocalOrgID is the local deployment's organisation.
	LocalOrgID string
	// DevToken is SERVICE_DEV_TOKEN (local mode only).
	DevToken string
	// Keys verifies API keys; nil answers 503 to every key.
	Keys *KeyVerifier
	// OAuth verifies access tokens; nil means no OAuth channel (and, in
	// local mode, the development branch).
	OAuth *OAuthVerifier
	// Bindings checks organisations' sign-in instances; hosted only, nil
	// disables the check.
	Bindings *Bindings
}

// devBranch reports whether local mode's development branch applies: it
// exists only when no hosted channel is configured (spec 5.7).
func (a *Authenticator) devBranch() bool { return a.Mode != "hosted" && a.OAuth == nil }

// Authenticate implements httpapi.Authenticator. It answers 401 unauthorized
// with a reason (missing_credentials, malformed_credentials, invalid_token,
// token_expired, wrong_audience, missing_org, missing_org_role,
// unknown_key, revoked_key, expired_key), 403 api_key_from_browser_origin,
// key_predates_instance_attribution or org_not_served_by_instance, and 503
// (service_unavailable, tenant_binding_unavailable, tenant_binding_unsettled)
// when the infrastructure behind authentication cannot answer.
func (a *Authenticator) Authenticate(r *http.Request) (domain.Auth, error) {
	ctx := r.Context()
	if tokenInQuery(r) {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMalformedCredentials,
			"access tokens are accepted only in the Authorization header, never in the query string")
	}
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		if a.devBranch() && a.DevToken == "" {
			return domain.LocalOperator(a.LocalOrgID), nil
		}
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMissingCredentials,
			"send Authorization: Bearer <token> with an API key or an OAuth access token")
	}
	if len(values) > 1 {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMalformedCredentials, "send exactly one Authorization header")
	}
	tok, err := ParseBearer(values[0])
	if err != nil {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMalformedCredentials,
			"the Authorization header must be Bearer followed by one token")
	}
	if strings.HasPrefix(tok, APIKeyPrefix) {
		if r.Header.Get("Origin") != "" {
			return domain.Auth{}, domain.Errorf(domain.CodeAPIKeyFromBrowserOrigin,
				"an API key must never be used from a web page; sign in with OAuth there instead")
		}
		if a.Keys == nil {
			return domain.Auth{}, unavailable("API keys cannot be verified now", nil)
		}
		auth, err := a.Keys.Verify(ctx, tok)
		if err != nil {
			return domain.Auth{}, err
		}
		if a.Mode == "hosted" && a.Bindings != nil {
			if auth.Instance == "" {
				return domain.Auth{}, domain.Errorf(domain.CodeKeyPredatesInstanceAttrib,
					"this key was minted before its organisation's sign-in instance was recorded; rotate it from a signed-in session")
			}
			if err := a.Bindings.Check(ctx, auth.OrgID, auth.Instance); err != nil {
				return domain.Auth{}, err
			}
		}
		return auth, nil
	}
	if a.devBranch() {
		// Spec 5.7: without SERVICE_DEV_TOKEN every request resolves to the
		// local operator, so a client that always sends some bearer (an
		// MCP client configured with a placeholder) works unchanged.
		if a.DevToken == "" || equalSecret(tok, a.DevToken) {
			return domain.LocalOperator(a.LocalOrgID), nil
		}
		return domain.Auth{}, domain.Unauthorized(domain.ReasonInvalidToken, "the bearer token is neither SERVICE_DEV_TOKEN nor an API key")
	}
	if a.OAuth == nil {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonInvalidToken, "this deployment accepts no OAuth access tokens")
	}
	auth, err := a.OAuth.Verify(ctx, tok)
	if err != nil {
		return domain.Auth{}, err
	}
	if a.Mode == "hosted" && a.Bindings != nil {
		if err := a.Bindings.Check(ctx, auth.OrgID, auth.Instance); err != nil {
			return domain.Auth{}, err
		}
	}
	return auth, nil
}

// tokenInQuery reports whether the request carries an access token in its
// query string (RFC 6750 2.3), which OAuth 2.1 forbids: it leaks into logs
// and browser history, so it is refused rather than ignored.
func tokenInQuery(r *http.Request) bool {
	if r.URL.RawQuery == "" {
		return false
	}
	return r.URL.Query().Has("access_token")
}

// equalSecret compares two secrets in constant time, lengths included.
func equalSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
