package identity_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

func TestAuthenticatorLocalMode(t *testing.T) {
	e := newKeyEnv(t)
	key := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, 24*time.Hour)
	tests := []struct {
		name     string
		devToken string
		auth     string
		query    string
		origin   string
		want     domain.PrincipalKind
		code     domain.Code
		reason   domain.UnauthorizedReason
	}{
		{name: "no credential is the local operator", want: domain.PrincipalLocalOperator},
		{name: "an API key is verified and its own scopes apply", auth: "Bearer " + key.Token, want: domain.PrincipalAPIKey},
		{name: "a wrong key is refused", auth: "Bearer pbk_a_b_c", code: domain.CodeUnauthorized, reason: domain.ReasonMalformedCredentials},
		{name: "any other bearer is the local operator", auth: "Bearer something", want: domain.PrincipalLocalOperator},
		{name: "a JWT-shaped bearer is the local operator", auth: "Bearer eyJhbGciOiJub25lIn0.e30.", want: domain.PrincipalLocalOperator},
		{name: "dev token: no credential", devToken: "s3cret", code: domain.CodeUnauthorized, reason: domain.ReasonMissingCredentials},
		{name: "dev token: exact match", devToken: "s3cret", auth: "Bearer s3cret", want: domain.PrincipalLocalOperator},
		{name: "dev token: prefix", devToken: "s3cret", auth: "Bearer s3cre", code: domain.CodeUnauthorized, reason: domain.ReasonInvalidToken},
		{name: "dev token: longer", devToken: "s3cret", auth: "Bearer s3cretx", code: domain.CodeUnauthorized, reason: domain.ReasonInvalidToken},
		{name: "dev token: key still works", devToken: "s3cret", auth: "Bearer " + key.Token, want: domain.PrincipalAPIKey},
		{name: "token in the query string", query: "?access_token=abc", code: domain.CodeUnauthorized, reason: domain.ReasonMalformedCredentials},
		{name: "token in the query string beside a header", auth: "Bearer " + key.Token, query: "?access_token=x", code: domain.CodeUnauthorized, reason: domain.ReasonMalformedCredentials},
		{name: "key from a web page", auth: "Bearer " + key.Token, origin: "https://app.example", code: domain.CodeAPIKeyFromBrowserOrigin},
		{name: "basic scheme", auth: "Basic dXNlcjpwdw==", code: domain.CodeUnauthorized, reason: domain.ReasonMalformedCredentials},
		{name: "ten kilobyte header", auth: "Bearer " + strings.Repeat("a", 10<<10), code: domain.CodeUnauthorized, reason: domain.ReasonMalformedCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &identity.Authenticator{Mode: "local", LocalOrgID: "org_a", DevToken: tt.devToken, Keys: e.verifier}
			r := httptest.NewRequest("GET", "/v1/devices"+tt.query, nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
			}
			got, err := a.Authenticate(r)
			if tt.code != "" {
				wantRefusal(t, err, tt.code, tt.reason)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tt.want || got.OrgID != "org_a" {
				t.Fatalf("got %+v; want %s of org_a", got, tt.want)
			}
			if tt.want == domain.PrincipalAPIKey && len(got.Scopes) != 1 {
				t.Fatalf("got scopes %v; want the key's own", got.Scopes)
			}
			if tt.want == domain.PrincipalLocalOperator && len(got.Scopes) != len(domain.AllScopes) {
				t.Fatalf("got scopes %v; want every scope", got.Scopes)
			}
		})
	}
	t.Run("two Authorization headers", func(t *testing.T) {
		a := &identity.Authenticator{Mode: "local", LocalOrgID: "org_a", Keys: e.verifier}
		r := httptest.NewRequest("GET", "/v1/devices", nil)
		r.Header.Add("Authorization", "Bearer "+key.Token)
		r.Header.Add("Authorization", "Bearer "+key.Token)
		_, err := a.Authenticate(r)
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonMalformedCredentials)
	})
}

func TestAuthenticatorHosted(t *testing.T) {
	e := newKeyEnv(t)
	p := identitytest.New(t)
	v := newVerifier(t, p, nil)
	store := eventstore.New(e.pool, eventstore.WithUpcaster(domain.Events))
	a := &identity.Authenticator{Mode: "hosted", Keys: e.verifier, OAuth: v, Bindings: &identity.Bindings{Store: store}}
	do := func(auth string) (domain.Auth, error) {
		// As the edge does before authenticating: the request's metadata.
		r := httptest.NewRequestWithContext(testutil.Context(t), "GET", "/v1/devices", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return a.Authenticate(r)
	}
	t.Run("no credential", func(t *testing.T) {
		_, err := do("")
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonMissingCredentials)
	})
	t.Run("console token binds the organisation", func(t *testing.T) {
		got, err := do("Bearer " + p.Console(t, audience, "user_1", "org_a", "admin"))
		if err != nil || got.Kind != domain.PrincipalConsole {
			t.Fatalf("got (%+v, %v); want a console session", got, err)
		}
		if bound, _ := a.Bindings.Bound(context.Background(), "org_a"); bound != p.Issuer {
			t.Fatalf("got binding %q; want %q", bound, p.Issuer)
		}
	})
	t.Run("a key of another instance", func(t *testing.T) {
		// newKeyEnv's keys record https://issuer.example, not this IdP.
		key := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, time.Hour)
		_, err := do("Bearer " + key.Token)
		wantRefusal(t, err, domain.CodeOrgNotServedByInstance, "")
	})
	t.Run("a key minted before instance attribution", func(t *testing.T) {
		tok, _ := identity.NewAPIKeyToken()
		now := e.clock.Now()
		e.record(t, tok.KeyID, domain.APIKeyMinted{KeyID: tok.KeyID, OrgID: "org_a", Scopes: []domain.Scope{domain.ScopeDevicesRead},
			MintedBy: "user_1", MintedByRole: "admin", SecretHash: e.hasher.Hash(tok.Secret), MintedAt: now, ExpiresAt: now.Add(time.Hour)})
		_, err := do("Bearer " + tok.Token)
		wantRefusal(t, err, domain.CodeKeyPredatesInstanceAttrib, "")
	})
	t.Run("no dev branch in hosted mode", func(t *testing.T) {
		a2 := &identity.Authenticator{Mode: "hosted", DevToken: "s3cret", Keys: e.verifier, OAuth: v}
		r := httptest.NewRequest("GET", "/v1/devices", nil)
		r.Header.Set("Authorization", "Bearer s3cret")
		_, err := a2.Authenticate(r)
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonMalformedCredentials)
	})
}
