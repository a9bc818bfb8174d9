package identitytest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	testClient   = "console-test"
	testRedirect = "http://console.test/"
	testResource = "http://console.test/mcp"
	testVerifier = "a-verifier-of-forty-three-or-more-characters-0123456789"
)

func challengeOf(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// noRedirects is a client that reports redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// newSignInIdP is a provider with the test client registered and user_a,
// admin of org_a, signed in.
func newSignInIdP(t *testing.T) *IdP {
	p := New(t)
	p.RegisterClient(testClient, testRedirect)
	p.SignInAs("user_a", "org_a", "admin")
	return p
}

func authorizeQuery(mod func(url.Values)) url.Values {
	q := url.Values{"response_type": {"code"}, "client_id": {testClient}, "redirect_uri": {testRedirect},
		"code_challenge": {challengeOf(testVerifier)}, "code_challenge_method": {"S256"}, "state": {"st-1"},
		"resource": {testResource}, "scope": {"openid profile"}}
	if mod != nil {
		mod(q)
	}
	return q
}

// authorize sends GET /authorize and returns the status and, for a
// redirect, the query it sends the browser back with.
func authorize(t *testing.T, p *IdP, q url.Values) (int, url.Values, string) {
	t.Helper()
	resp, err := noRedirects.Get(p.AuthorizationEndpoint() + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusSeeOther {
		return resp.StatusCode, nil, string(body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != testRedirect {
		t.Fatalf("redirected to %s; want %s", got, testRedirect)
	}
	return resp.StatusCode, loc.Query(), string(body)
}

// exchange posts a token request and returns the status and decoded body.
func exchange(t *testing.T, p *IdP, form url.Values, origin string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest("POST", p.TokenEndpoint(), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("token answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out, resp.Header
}

func tokenForm(code string, mod func(url.Values)) url.Values {
	f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {testRedirect},
		"client_id": {testClient}, "code_verifier": {testVerifier}, "resource": {testResource}}
	if mod != nil {
		mod(f)
	}
	return f
}

// codeFor runs an auto-approved authorization request and returns its code.
func codeFor(t *testing.T, p *IdP) string {
	t.Helper()
	p.AutoApprove.Store(true)
	status, back, body := authorize(t, p, authorizeQuery(nil))
	if status != http.StatusSeeOther || back.Get("code") == "" {
		t.Fatalf("authorize: got %d %v %s; want a redirect with a code", status, back, body)
	}
	return back.Get("code")
}

func TestMetadata(t *testing.T) {
	p := New(t)
	req, _ := http.NewRequest("GET", p.MetadataURL(), nil)
	req.Header.Set("Origin", "http://console.test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Issuer     string   `json:"issuer"`
		Authorize  string   `json:"authorization_endpoint"`
		Token      string   `json:"token_endpoint"`
		Challenges []string `json:"code_challenge_methods_supported"`
		Scopes     []string `json:"scopes_supported"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Issuer != p.Issuer || m.Authorize != p.AuthorizationEndpoint() || m.Token != p.TokenEndpoint() {
		t.Errorf("got %+v; want issuer %s and its endpoints", m, p.Issuer)
	}
	if len(m.Challenges) != 1 || m.Challenges[0] != "S256" {
		t.Errorf("got code_challenge_methods_supported %v; want [S256]", m.Challenges)
	}
	for _, s := range m.Scopes {
		if strings.Contains(s, ":") {
			t.Errorf("scopes_supported advertises %q; spec 5.2.2 says the service's scopes are not among them", s)
		}
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Errorf("got Access-Control-Allow-Origin %q; want * (a page reads it)", got)
	}
}

func TestAuthorizationCodeWithPKCE(t *testing.T) {
	p := newSignInIdP(t)
	code := codeFor(t, p)
	status, out, h := exchange(t, p, tokenForm(code, nil), "http://console.test")
	if status != http.StatusOK {
		t.Fatalf("exchange: got %d %v; want 200", status, out)
	}
	if got := h.Get("Access-Control-Allow-Origin"); got != "http://console.test" {
		t.Errorf("got Access-Control-Allow-Origin %q; want the registered page's origin", got)
	}
	if got := h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("got Cache-Control %q; want no-store", got)
	}
	if out["token_type"] != "Bearer" || out["expires_in"] != float64(3600) {
		t.Errorf("got %v; want a Bearer token for 3600 s", out)
	}
	tok, _ := out["access_token"].(string)
	var c jwt.MapClaims
	_, err := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(testResource), jwt.WithIssuer(p.Issuer)).
		ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return &p.Key.PublicKey, nil })
	if err != nil {
		t.Fatalf("the issued token does not verify: %v", err)
	}
	want := map[string]string{"sub": "user_a", "org_id": "org_a", "org_role": "admin", "azp": testClient}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("claim %s: got %v; want %s", k, c[k], v)
		}
	}
	if _, ok := c["client_id"]; ok {
		t.Error("a console token carries client_id; want azp only (spec 5.2.5)")
	}
	if got := p.Issued(); len(got) != 1 || got[0] != tok {
		t.Errorf("Issued() = %d tokens; want the one answered", len(got))
	}

	status, out, _ = exchange(t, p, tokenForm(code, nil), "")
	if status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("second exchange of the code: got %d %v; want 400 invalid_grant", status, out)
	}
}

func TestTokenRefusals(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name   string
		mod    func(url.Values)
		before func(p *IdP)
		status int
		code   string
	}{
		{"wrong verifier", func(f url.Values) { f.Set("code_verifier", strings.Repeat("x", 43)) }, nil, 400, "invalid_grant"},
		{"no verifier", func(f url.Values) { f.Del("code_verifier") }, nil, 400, "invalid_request"},
		{"short verifier", func(f url.Values) { f.Set("code_verifier", "short") }, nil, 400, "invalid_request"},
		{"other redirect_uri", func(f url.Values) { f.Set("redirect_uri", "http://console.test/other") }, nil, 400, "invalid_grant"},
		{"other resource", func(f url.Values) { f.Set("resource", "http://elsewhere.test/mcp") }, nil, 400, "invalid_target"},
		{"unknown client", func(f url.Values) { f.Set("client_id", "nobody") }, nil, 401, "invalid_client"},
		{"other client", func(f url.Values) { f.Set("client_id", "other") }, func(p *IdP) { p.RegisterClient("other", testRedirect) }, 400, "invalid_grant"},
		{"unknown code", func(f url.Values) { f.Set("code", "made-up") }, nil, 400, "invalid_grant"},
		{"other grant type", func(f url.Values) { f.Set("grant_type", "client_credentials") }, nil, 400, "unsupported_grant_type"},
		{"expired code", nil, func(p *IdP) { p.SetClock(func() time.Time { return now.Add(2 * time.Minute) }) }, 400, "invalid_grant"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newSignInIdP(t)
			p.SetClock(func() time.Time { return now })
			code := codeFor(t, p)
			if tc.before != nil {
				tc.before(p)
			}
			status, out, _ := exchange(t, p, tokenForm(code, tc.mod), "")
			if status != tc.status || out["error"] != tc.code {
				t.Fatalf("got %d %v; want %d %s", status, out, tc.status, tc.code)
			}
			if len(p.Issued()) != 0 {
				t.Fatal("a token was issued for a refused exchange")
			}
		})
	}
	t.Run("a failed verifier spends the code", func(t *testing.T) {
		p := newSignInIdP(t)
		code := codeFor(t, p)
		exchange(t, p, tokenForm(code, func(f url.Values) { f.Set("code_verifier", strings.Repeat("y", 43)) }), "")
		status, out, _ := exchange(t, p, tokenForm(code, nil), "")
		if status != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Fatalf("got %d %v; want 400 invalid_grant", status, out)
		}
	})
	t.Run("another origin may not read the answer", func(t *testing.T) {
		p := newSignInIdP(t)
		_, _, h := exchange(t, p, tokenForm(codeFor(t, p), nil), "http://evil.test")
		if got := h.Get("Access-Control-Allow-Origin"); got != "" {
			t.Fatalf("got Access-Control-Allow-Origin %q for an unregistered origin; want none", got)
		}
	})
}

func TestAuthorizeRefusals(t *testing.T) {
	t.Run("unknown client or redirect URI: no redirect", func(t *testing.T) {
		p := newSignInIdP(t)
		for _, mod := range []func(url.Values){
			func(q url.Values) { q.Set("client_id", "nobody") },
			func(q url.Values) { q.Set("redirect_uri", "http://evil.test/") },
			func(q url.Values) { q.Set("redirect_uri", testRedirect+"extra") },
		} {
			if status, back, _ := authorize(t, p, authorizeQuery(mod)); status != http.StatusBadRequest {
				t.Errorf("got %d %v; want 400 without a redirect", status, back)
			}
		}
	})
	cases := []struct {
		name string
		mod  func(url.Values)
		code string
	}{
		{"no challenge", func(q url.Values) { q.Del("code_challenge") }, "invalid_request"},
		{"plain method", func(q url.Values) { q.Set("code_challenge_method", "plain") }, "invalid_request"},
		{"malformed challenge", func(q url.Values) { q.Set("code_challenge", "abc") }, "invalid_request"},
		{"implicit flow", func(q url.Values) { q.Set("response_type", "token") }, "unsupported_response_type"},
		{"no resource", func(q url.Values) { q.Del("resource") }, "invalid_target"},
		{"relative resource", func(q url.Values) { q.Set("resource", "/mcp") }, "invalid_target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newSignInIdP(t)
			status, back, body := authorize(t, p, authorizeQuery(tc.mod))
			if status != http.StatusSeeOther || back.Get("error") != tc.code || back.Get("state") != "st-1" || back.Has("code") {
				t.Fatalf("got %d %v %s; want a redirect with error=%s and the state, no code", status, back, body, tc.code)
			}
		})
	}
	t.Run("no one signed in", func(t *testing.T) {
		p := New(t)
		p.RegisterClient(testClient, testRedirect)
		status, back, _ := authorize(t, p, authorizeQuery(nil))
		if status != http.StatusSeeOther || back.Get("error") != "access_denied" {
			t.Fatalf("got %d %v; want error=access_denied", status, back)
		}
	})
}

func TestOneClickPage(t *testing.T) {
	p := newSignInIdP(t)
	status, _, page := authorize(t, p, authorizeQuery(nil))
	if status != http.StatusOK || !strings.Contains(page, "Continue as user_a") {
		t.Fatalf("got %d %s; want the one-click page", status, page)
	}
	post := func(decision string) url.Values {
		form := authorizeQuery(func(q url.Values) { q.Set("decision", decision) })
		resp, err := noRedirects.PostForm(p.AuthorizationEndpoint(), form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil {
			t.Fatalf("post %s: got %d; want a redirect", decision, resp.StatusCode)
		}
		return loc.Query()
	}
	if back := post("deny"); back.Get("error") != "access_denied" || back.Has("code") {
		t.Errorf("Cancel: got %v; want error=access_denied", back)
	}
	back := post("allow")
	if back.Get("code") == "" || back.Get("state") != "st-1" || back.Get("iss") != p.Issuer {
		t.Fatalf("Continue: got %v; want a code, the state and iss", back)
	}
	if status, out, _ := exchange(t, p, tokenForm(back.Get("code"), nil), ""); status != http.StatusOK {
		t.Fatalf("exchange: got %d %v", status, out)
	}
}
