package identitytest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// authTimeOf signs in with an auto-approved authorization request (mod
// changes its query) and returns the issued token's auth_time.
func authTimeOf(t *testing.T, p *IdP, mod func(url.Values)) time.Time {
	t.Helper()
	p.AutoApprove.Store(true)
	status, back, body := authorize(t, p, authorizeQuery(mod))
	if status != http.StatusSeeOther || back.Get("code") == "" {
		t.Fatalf("authorize: got %d %v %s; want a redirect with a code", status, back, body)
	}
	status, out, _ := exchange(t, p, tokenForm(back.Get("code"), nil), "")
	if status != http.StatusOK {
		t.Fatalf("exchange: got %d %v", status, out)
	}
	tok, _ := out["access_token"].(string)
	var c jwt.MapClaims
	if _, err := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithoutClaimsValidation()).
		ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return &p.Key.PublicKey, nil }); err != nil {
		t.Fatalf("the issued token does not verify: %v", err)
	}
	secs, ok := c["auth_time"].(float64)
	if !ok {
		t.Fatalf("the token carries auth_time %v; want seconds since the epoch", c["auth_time"])
	}
	return time.Unix(int64(secs), 0)
}

// TestAuthTime: issued tokens carry the person's auth_time; the first
// sign-in starts the provider's session, later ones reuse it, and
// prompt=login or a max_age the session exceeds (max_age=0 always) makes
// the person authenticate again, stamping a fresh auth_time. SetAuthTime
// backdates the session.
func TestAuthTime(t *testing.T) {
	p := newSignInIdP(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p.SetClock(func() time.Time { return now })

	if got := authTimeOf(t, p, nil); !got.Equal(now) {
		t.Errorf("first sign-in: auth_time %v; want now (%v)", got, now)
	}
	old := now.Add(-30 * time.Minute)
	p.SetAuthTime(old)
	if got := authTimeOf(t, p, nil); !got.Equal(old) {
		t.Errorf("sign-in asking nothing: auth_time %v; want the session's %v", got, old)
	}
	if got := authTimeOf(t, p, func(q url.Values) { q.Set("max_age", "3600") }); !got.Equal(old) {
		t.Errorf("max_age the session is within: auth_time %v; want the session's %v", got, old)
	}
	if got := authTimeOf(t, p, func(q url.Values) { q.Set("max_age", "600") }); !got.Equal(now) {
		t.Errorf("max_age the session exceeds: auth_time %v; want now (%v)", got, now)
	}
	p.SetAuthTime(old)
	if got := authTimeOf(t, p, func(q url.Values) { q.Set("prompt", "login") }); !got.Equal(now) {
		t.Errorf("prompt=login: auth_time %v; want now (%v)", got, now)
	}
	p.SetAuthTime(old)
	if got := authTimeOf(t, p, func(q url.Values) { q.Set("max_age", "0") }); !got.Equal(now) {
		t.Errorf("max_age=0: auth_time %v; want now (%v)", got, now)
	}
	if got := p.AuthTime(); !got.Equal(now) {
		t.Errorf("AuthTime() = %v after a fresh check; want %v", got, now)
	}

	t.Run("malformed max_age", func(t *testing.T) {
		p := newSignInIdP(t)
		for _, v := range []string{"-1", "ten", "1.5"} {
			status, back, body := authorize(t, p, authorizeQuery(func(q url.Values) { q.Set("max_age", v) }))
			if status != http.StatusSeeOther || back.Get("error") != "invalid_request" || back.Has("code") {
				t.Errorf("max_age=%s: got %d %v %s; want error=invalid_request", v, status, back, body)
			}
		}
	})

	t.Run("the one-click page asks for the fresh check and keeps it", func(t *testing.T) {
		p := newSignInIdP(t)
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		p.SetClock(func() time.Time { return now })
		p.SetAuthTime(now.Add(-time.Hour))
		fresh := func(q url.Values) { q.Set("max_age", "0"); q.Set("prompt", "login") }
		status, _, page := authorize(t, p, authorizeQuery(fresh))
		if status != http.StatusOK || !strings.Contains(page, `id="reauthenticate"`) ||
			!strings.Contains(page, `name="max_age" value="0"`) || !strings.Contains(page, `name="prompt" value="login"`) {
			t.Fatalf("got %d %s; want the one-click page asking to confirm, carrying max_age and prompt", status, page)
		}
		if _, _, plain := authorize(t, p, authorizeQuery(nil)); strings.Contains(plain, `id="reauthenticate"`) {
			t.Error("a sign-in asking no fresh check shows the confirmation sentence")
		}
		form := authorizeQuery(func(q url.Values) { fresh(q); q.Set("decision", "allow") })
		resp, err := noRedirects.PostForm(p.AuthorizationEndpoint(), form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("Continue: got %d; want a redirect", resp.StatusCode)
		}
		if got := p.AuthTime(); !got.Equal(now) {
			t.Errorf("after Continue the session started %v; want now (%v)", got, now)
		}
	})
}
