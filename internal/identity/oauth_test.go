package identity_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"phonefleet/domain"
	"phonefleet/internal/identity"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

const audience = "https://pf.example/mcp"

// newClock is a clock tests move by hand, stopped at about now.
func newClock() *testutil.Clock { return testutil.NewClock(time.Now().UTC().Truncate(time.Second)) }

func newVerifier(t *testing.T, p *identitytest.IdP, mod func(*identity.OAuthConfig)) *identity.OAuthVerifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := identity.OAuthConfig{Issuer: p.Issuer, JWKSURL: p.JWKSURL, Audience: audience,
		Roles: &identity.RoleClient{URL: p.RoleURL}}
	if mod != nil {
		mod(&cfg)
	}
	v, err := identity.NewOAuthVerifier(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantRefusal fails unless err is the domain error code (and, for 401, reason).
func wantRefusal(t *testing.T, err error, code domain.Code, reason domain.UnauthorizedReason) *domain.Error {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) {
		t.Fatalf("got error %v; want %s", err, code)
	}
	if de.Code != code {
		t.Fatalf("got code %s (%s); want %s", de.Code, de.Message, code)
	}
	if reason != "" {
		if got, _ := de.Extra["reason"].(string); got != string(reason) {
			t.Fatalf("got reason %q (%s); want %q", got, de.Message, reason)
		}
	}
	return de
}

func TestOAuthConsoleToken(t *testing.T) {
	p := identitytest.New(t)
	v := newVerifier(t, p, nil)
	tests := []struct {
		name   string
		role   string
		scope  string
		want   []domain.Scope
		reason domain.UnauthorizedReason
	}{
		{name: "member", role: "member", want: []domain.Scope{"devices:read", "devices:act", "devices:lease", "runs:start", "apps:read", "apps:write"}},
		{name: "admin", role: "admin", want: domain.AllScopes},
		{name: "scope claim narrows", role: "admin", scope: "openid devices:read orders:place", want: []domain.Scope{"devices:read", "orders:place"}},
		{name: "foreign scopes are ignored", role: "member", scope: "openid profile", want: []domain.Scope{"devices:read", "devices:act", "devices:lease", "runs:start", "apps:read", "apps:write"}},
		{name: "no role", role: "", reason: domain.ReasonMissingOrgRole},
		{name: "unknown role", role: "owner", reason: domain.ReasonMissingOrgRole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.Claims(audience, "user_1", "org_a", time.Now())
			c["azp"] = "console"
			if tt.role != "" {
				c["org_role"] = tt.role
			}
			if tt.scope != "" {
				c["scope"] = tt.scope
			}
			a, err := v.Verify(context.Background(), p.Sign(t, c))
			if tt.reason != "" {
				de := wantRefusal(t, err, domain.CodeUnauthorized, tt.reason)
				if de.Extra["hint"] == nil {
					t.Fatalf("got no hint on %s; want one", tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Kind != domain.PrincipalConsole || a.OrgID != "org_a" || a.UserID != "user_1" || a.Role != tt.role || a.Instance != p.Issuer {
				t.Fatalf("got %+v; want a console session of user_1 in org_a as %s", a, tt.role)
			}
			if !slices.Equal(a.Scopes, tt.want) {
				t.Fatalf("got scopes %v; want %v", a.Scopes, tt.want)
			}
		})
	}
}

func TestOAuthRefusesBadTokens(t *testing.T) {
	p := identitytest.New(t)
	clock := newClock()
	v := newVerifier(t, p, func(c *identity.OAuthConfig) { c.Now = clock.Now })
	now := clock.Now()
	valid := func() jwt.MapClaims {
		c := p.Claims(audience, "user_1", "org_a", now)
		c["azp"], c["org_role"] = "console", "admin"
		return c
	}
	with := func(k string, v any) jwt.MapClaims {
		c := valid()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	// The RSA public key's DER bytes as an HMAC secret: the classic
	// algorithm-confusion forgery.
	pubDER, err := x509.MarshalPKIXPublicKey(&p.Key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		token  string
		reason domain.UnauthorizedReason
	}{
		{"alg none", identitytest.SignWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, p.KID, valid()), domain.ReasonInvalidToken},
		{"HS256 keyed with the RSA public key", identitytest.SignWith(t, jwt.SigningMethodHS256, pubDER, p.KID, valid()), domain.ReasonInvalidToken},
		{"signed by another key under the known kid", identitytest.SignWith(t, jwt.SigningMethodRS256, otherKey, p.KID, valid()), domain.ReasonInvalidToken},
		{"wrong audience", p.Sign(t, with("aud", "https://elsewhere.example/mcp")), domain.ReasonWrongAudience},
		{"no audience", p.Sign(t, with("aud", nil)), domain.ReasonWrongAudience},
		{"wrong issuer", p.Sign(t, with("iss", "https://evil.example")), domain.ReasonInvalidToken},
		{"expired", p.Sign(t, with("exp", now.Add(-time.Hour).Unix())), domain.ReasonTokenExpired},
		{"missing exp", p.Sign(t, with("exp", nil)), domain.ReasonInvalidToken},
		{"issued in the future", p.Sign(t, with("iat", now.Add(time.Hour).Unix())), domain.ReasonInvalidToken},
		{"no subject", p.Sign(t, with("sub", nil)), domain.ReasonInvalidToken},
		{"no organisation", p.Sign(t, with("org_id", nil)), domain.ReasonMissingOrg},
		{"no client", p.Sign(t, with("azp", nil)), domain.ReasonInvalidToken},
		{"two segments", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0", domain.ReasonMalformedCredentials},
		{"garbage segments", "a.b.c", domain.ReasonMalformedCredentials},
		{"signature stripped", strings.Join(strings.Split(p.Sign(t, valid()), ".")[:2], ".") + ".", domain.ReasonInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tt.token)
			wantRefusal(t, err, domain.CodeUnauthorized, tt.reason)
		})
	}
	t.Run("expiry follows the injected clock", func(t *testing.T) {
		tok := p.Sign(t, valid())
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatalf("fresh token: %v", err)
		}
		clock.Advance(2 * time.Hour)
		defer clock.Advance(-2 * time.Hour)
		_, err := v.Verify(context.Background(), tok)
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonTokenExpired)
	})
}

func TestOAuthUnknownKIDFloodRefreshesOnce(t *testing.T) {
	p := identitytest.New(t)
	v := newVerifier(t, p, func(c *identity.OAuthConfig) { c.UnknownKIDRefresh = time.Hour })
	before := p.JWKSHits.Load()
	c := p.Claims(audience, "user_1", "org_a", time.Now())
	c["azp"], c["org_role"] = "console", "admin"
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := identitytest.SignWith(t, jwt.SigningMethodRS256, p.Key, fmt.Sprintf("made-up-%d", i), c)
			_, err := v.Verify(context.Background(), tok)
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != domain.CodeUnauthorized || de.Extra["reason"] != "invalid_token" {
				t.Errorf("kid made-up-%d: got %v; want 401 invalid_token", i, err)
			}
		}()
	}
	wg.Wait()
	if got := p.JWKSHits.Load() - before; got > 1 {
		t.Fatalf("got %d key-set fetches for 200 unknown kids; want at most 1", got)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("unknown kids took %v; want them refused without waiting on the refresh limiter", el)
	}
	// A token under the known kid still verifies.
	if _, err := v.Verify(context.Background(), p.Sign(t, c)); err != nil {
		t.Fatalf("known kid after the flood: %v", err)
	}
}

func TestOAuthKeySetUnavailableIs503(t *testing.T) {
	p := identitytest.New(t)
	p.JWKSDown.Store(true)
	v := newVerifier(t, p, nil)
	_, err := v.Verify(context.Background(), p.Console(t, audience, "user_1", "org_a", "admin"))
	de := wantRefusal(t, err, domain.CodeServiceUnavailable, "")
	if de.Retryable == nil || !*de.Retryable {
		t.Fatalf("got retryable %v; want true", de.Retryable)
	}
}

func TestOAuthAppToken(t *testing.T) {
	p := identitytest.New(t)
	clock := newClock()
	roles := &identity.RoleClient{URL: p.RoleURL, TTL: 90 * time.Second, Now: clock.Now}
	v := newVerifier(t, p, func(c *identity.OAuthConfig) {
		c.Roles = roles
		c.FirstPartyClients = []string{"our-cli@" + p.Issuer}
	})
	ctx := context.Background()
	p.SetRole("user_1", "org_a", "admin")

	t.Run("admin app", func(t *testing.T) {
		a, err := v.Verify(ctx, p.App(t, audience, "user_1", "org_a", "third-party"))
		if err != nil {
			t.Fatal(err)
		}
		want := []domain.Scope{"devices:read", "devices:act", "devices:lease", "runs:start", "orders:place"}
		if a.Kind != domain.PrincipalApp || a.Role != "admin" || a.ClientID != "third-party" || !slices.Equal(a.Scopes, want) {
			t.Fatalf("got %+v; want an admin's app with %v", a, want)
		}
	})
	t.Run("role claim on an app token is not trusted", func(t *testing.T) {
		c := p.Claims(audience, "user_2", "org_a", time.Now())
		c["client_id"], c["org_role"] = "third-party", "admin"
		_, err := v.Verify(ctx, p.Sign(t, c))
		de := wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonInvalidToken)
		if !strings.Contains(fmt.Sprint(de.Extra["hint"]), "not a member") {
			t.Fatalf("got hint %v; want it to say the account is not a member", de.Extra["hint"])
		}
	})
	t.Run("first-party client gets the console surface", func(t *testing.T) {
		a, err := v.Verify(ctx, p.App(t, audience, "user_1", "org_a", "our-cli"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Kind != domain.PrincipalConsole || a.Role != "admin" || !slices.Equal(a.Scopes, domain.AllScopes) {
			t.Fatalf("got %+v; want the console's surface", a)
		}
	})
	t.Run("same client id from another issuer is an app", func(t *testing.T) {
		v2 := newVerifier(t, p, func(c *identity.OAuthConfig) {
			c.Roles = roles
			c.FirstPartyClients = []string{"our-cli@https://other-issuer.example"}
		})
		a, err := v2.Verify(ctx, p.App(t, audience, "user_1", "org_a", "our-cli"))
		if err != nil || a.Kind != domain.PrincipalApp {
			t.Fatalf("got (%+v, %v); want an app", a, err)
		}
	})
	t.Run("cache expiry", func(t *testing.T) {
		p.SetRole("user_3", "org_a", "member")
		tok := p.App(t, audience, "user_3", "org_a", "third-party")
		hits := p.RoleHits.Load()
		for i := 0; i < 5; i++ {
			if a, err := v.Verify(ctx, tok); err != nil || a.Role != "member" {
				t.Fatalf("got (%+v, %v); want member", a, err)
			}
		}
		if got := p.RoleHits.Load() - hits; got != 1 {
			t.Fatalf("got %d role lookups for 5 requests; want 1 (cached)", got)
		}
		p.SetRole("user_3", "org_a", "") // removed from the organisation
		clock.Advance(89 * time.Second)
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("at 89 s: %v; want the cached membership", err)
		}
		clock.Advance(2 * time.Second)
		_, err := v.Verify(ctx, tok)
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonInvalidToken)
		if got := p.RoleHits.Load() - hits; got != 2 {
			t.Fatalf("got %d role lookups; want 2 (the cache expired once)", got)
		}
	})
	t.Run("provider down is 503, never 401", func(t *testing.T) {
		p.RoleDown.Store(true)
		defer p.RoleDown.Store(false)
		_, err := v.Verify(ctx, p.App(t, audience, "user_4", "org_a", "third-party"))
		wantRefusal(t, err, domain.CodeServiceUnavailable, "")
	})
	t.Run("provider timeout is 503", func(t *testing.T) {
		slow := &identity.RoleClient{URL: "http://192.0.2.1:9/roles", Timeout: 50 * time.Millisecond}
		vs := newVerifier(t, p, func(c *identity.OAuthConfig) { c.Roles = slow })
		_, err := vs.Verify(ctx, p.App(t, audience, "user_1", "org_a", "third-party"))
		wantRefusal(t, err, domain.CodeServiceUnavailable, "")
	})
	t.Run("no role endpoint configured", func(t *testing.T) {
		vn := newVerifier(t, p, func(c *identity.OAuthConfig) { c.Roles = nil })
		_, err := vn.Verify(ctx, p.App(t, audience, "user_1", "org_a", "third-party"))
		de := wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonMissingOrgRole)
		if !strings.Contains(fmt.Sprint(de.Extra["hint"]), "OAuth app") {
			t.Fatalf("got hint %v; want it to name an OAuth app", de.Extra["hint"])
		}
	})
}

func TestRoleCacheTTLIsCapped(t *testing.T) {
	p := identitytest.New(t)
	clock := newClock()
	roles := &identity.RoleClient{URL: p.RoleURL, TTL: time.Hour, Now: clock.Now}
	p.SetRole("u", "o", "member")
	if _, err := roles.Role(context.Background(), "tok", p.Issuer, "u", "o"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(identity.MaxRoleCacheTTL)
	roles.Role(context.Background(), "tok", p.Issuer, "u", "o")
	if got := p.RoleHits.Load(); got != 2 {
		t.Fatalf("got %d lookups; want 2: a configured TTL of an hour is capped at %v", got, identity.MaxRoleCacheTTL)
	}
}
