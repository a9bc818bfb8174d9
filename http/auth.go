package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
	"phonefleet/internal/identity"
)

// Authenticator resolves a request's credential to the one authorization
// context of spec 5. A refusal is a *domain.Error: unauthorized (with a
// reason), permission_denied and the other 403s of spec 5.3.7 and 5.6.5, or a
// 503 when the authentication infrastructure cannot answer.
// identity.Authenticator is the service's implementation.
type Authenticator interface {
	Authenticate(r *http.Request) (domain.Auth, error)
}

// authenticate puts the request's authorization context on its context, or
// answers the refusal. An OAuth app's token then passes the app gate (spec
// 5.2): only the routes an app may use are served to it.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), resourceMetadataKey{}, s.resourceMetadataURL(r)))
		if s.mode == "hosted" && s.deps.Auth == nil {
			// Fail closed: a hosted deployment wired without its
			// authenticator must not fall back to local mode's operator.
			kernel.Error(w, r, domain.Errorf(domain.CodeServiceUnavailable, "authentication is not configured; retry later").WithRetryable(true))
			return
		}
		a, err := s.auth.Authenticate(r)
		if err != nil {
			kernel.Error(w, r, err)
			return
		}
		if a.IsApp() {
			if err := s.appGate(r); err != nil {
				kernel.Error(w, r, err)
				return
			}
		}
		kind, id := a.Actor()
		next.ServeHTTP(w, r.WithContext(eventstore.WithActor(domain.WithAuth(r.Context(), a), kind, id)))
	})
}

// localOperator is the authenticator of a server built without one (Deps.Auth
// nil; tests and tools): local mode's development branch for orgID with no
// SERVICE_DEV_TOKEN and no key store (spec 5.7).
type localOperator struct{ orgID string }

// Authenticate implements Authenticator.
func (l localOperator) Authenticate(r *http.Request) (domain.Auth, error) {
	return (&identity.Authenticator{Mode: "local", LocalOrgID: l.orgID}).Authenticate(r)
}

// authOf returns the request's authorization context; routes under /v1
// always have one (authenticate put it there).
func authOf(r *http.Request) domain.Auth {
	a, _ := domain.AuthFrom(r.Context())
	return a
}

type resourceMetadataKey struct{}

// resourceMetadataPath is where the metadata of the /mcp resource — the
// audience every access token is checked against — is served (RFC 9728
// 3.1: the well-known segment inserted before the resource's path).
const resourceMetadataPath = "/.well-known/oauth-protected-resource/mcp"

// baseURL is {base_url}: the configured public URL, else the request's own
// scheme and host.
func (s *Server) baseURL(r *http.Request) string {
	if u := s.deps.Identity.PublicURL; u != "" {
		return u
	}
	return requestBase(r)
}

func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// resourceMetadataURL is the address the bearer challenge names, or ""
// where the metadata is not served (local mode, or no authorization
// server: getResourceMetadata answers 404 there).
func (s *Server) resourceMetadataURL(r *http.Request) string {
	if !s.servesDiscovery() {
		return ""
	}
	return s.baseURL(r) + resourceMetadataPath
}

// servesDiscovery reports whether the protected-resource metadata is served.
func (s *Server) servesDiscovery() bool {
	return s.mode == "hosted" && s.deps.Identity.Issuer != ""
}

// bearerChallenge is the WWW-Authenticate value of a 401 (spec 5.6.1, RFC
// 6750 3, RFC 9728 5.1): the resource metadata's address where it is
// served, and error="invalid_token" only when a credential was presented
// and refused. A deployment that serves no metadata (local mode) names
// none rather than a document that answers 404: the challenge is then the
// bare scheme of RFC 6750 3.
func bearerChallenge(r *http.Request, e *domain.Error) string {
	u, _ := r.Context().Value(resourceMetadataKey{}).(string)
	var params []string
	if u != "" {
		params = append(params, "resource_metadata="+strconv.Quote(u))
	}
	if e.CredentialPresented() {
		params = append(params, `error="invalid_token"`)
	}
	if len(params) == 0 {
		return "Bearer"
	}
	return "Bearer " + strings.Join(params, ", ")
}
