// Package identitytest is a fake identity provider for tests: an httptest
// server publishing a JWKS and answering role questions, and helpers that
// sign real access tokens with its RSA key.
package identitytest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// IdP is a running fake identity provider.
type IdP struct {
	Server *httptest.Server
	// Issuer is the tokens' iss (the server's URL).
	Issuer string
	// JWKSURL and RoleURL are its two endpoints.
	JWKSURL, RoleURL string
	// Key signs tokens; KID names it in the published set.
	Key *rsa.PrivateKey
	KID string
	// JWKSHits and RoleHits count requests to each endpoint.
	JWKSHits, RoleHits atomic.Int64
	// JWKSDown and RoleDown make each endpoint answer 503.
	JWKSDown, RoleDown atomic.Bool
	// AuthorizeHits and TokenHits count requests to the authorization and
	// token endpoints (authorize.go).
	AuthorizeHits, TokenHits atomic.Int64
	// AutoApprove makes the authorization endpoint sign the person in
	// without showing its one-click page.
	AutoApprove atomic.Bool
	// ImpersonatedIssuer, when set, is the issuer the authorization
	// response names in iss instead of this provider's own: what a client
	// sees in an RFC 9207 mix-up, where another server's answer reaches it.
	ImpersonatedIssuer atomic.Pointer[string]

	mu    sync.Mutex
	roles map[[2]string]string // (sub, org) → role
	jwks  []byte
	authz authorizer
}

// New starts a provider that is closed at the end of the test.
func New(tb testing.TB) *IdP {
	tb.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	p := &IdP{Key: key, KID: "test-key-1", roles: map[[2]string]string{}}
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{KID: p.KID, USE: jwkset.UseSig},
	})
	if err != nil {
		tb.Fatal(err)
	}
	p.jwks, err = json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		p.JWKSHits.Add(1)
		if p.JWKSDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(p.jwks)
	})
	mux.HandleFunc("/roles", func(w http.ResponseWriter, r *http.Request) {
		p.RoleHits.Add(1)
		if p.RoleDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.mu.Lock()
		role, ok := p.roles[[2]string{r.URL.Query().Get("sub"), r.URL.Query().Get("org_id")}]
		p.mu.Unlock()
		if !ok {
			http.Error(w, "not a member", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"role": role})
	})
	p.routeAuthorize(mux)
	p.Server = httptest.NewServer(mux)
	tb.Cleanup(p.Server.Close)
	p.Issuer = p.Server.URL
	p.JWKSURL = p.Server.URL + "/jwks.json"
	p.RoleURL = p.Server.URL + "/roles"
	return p
}

// SetRole records sub's role in org for the role endpoint; "" removes it.
func (p *IdP) SetRole(sub, org, role string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if role == "" {
		delete(p.roles, [2]string{sub, org})
		return
	}
	p.roles[[2]string{sub, org}] = role
}

// Claims returns the claims of a token valid for an hour from now.
func (p *IdP) Claims(aud, sub, org string, now time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": p.Issuer, "aud": aud, "sub": sub, "org_id": org,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Console returns a console token (azp and org_role) for sub in org.
func (p *IdP) Console(tb testing.TB, aud, sub, org, role string) string {
	c := p.Claims(aud, sub, org, time.Now())
	c["azp"], c["org_role"] = "console", role
	return p.Sign(tb, c)
}

// App returns an OAuth-app token (client_id, no azp, no role).
func (p *IdP) App(tb testing.TB, aud, sub, org, clientID string) string {
	c := p.Claims(aud, sub, org, time.Now())
	c["client_id"] = clientID
	return p.Sign(tb, c)
}

// Sign signs claims with the provider's key under its published kid (RS256).
func (p *IdP) Sign(tb testing.TB, claims jwt.MapClaims) string {
	tb.Helper()
	return SignWith(tb, jwt.SigningMethodRS256, p.Key, p.KID, claims)
}

// SignWith signs claims with any method and key, naming kid ("" for none).
func SignWith(tb testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	tb.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
