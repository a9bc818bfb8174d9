package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/http/kernel"
	"phonefleet/internal/identity"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

const (
	idPublicURL     = "https://pf.example"
	idAudience      = idPublicURL + "/mcp"
	idConsoleOrigin = "https://console.example"
)

// idEnv is a server wired with the real identity stack: key store
// projection, commands, authenticator (and, hosted, OAuth against a fake
// identity provider, bindings and the shared rate limiter).
type idEnv struct {
	t      *testing.T
	mode   string
	pool   *pgxpool.Pool
	store  *eventstore.Store
	runner *projections.Runner
	clock  *testutil.Clock
	idp    *identitytest.IdP
	deps   Deps
	s      *Server
	v      *apitest.Validator
}

type idOptions struct {
	mode     string
	devToken string
	// anonymous and authenticated budgets (hosted); zero means 1000.
	anonymous, authenticated int
	// pool shares a database with another env (two instances).
	pool *pgxpool.Pool
	// rateClock is the rate limiter's clock; nil means time.Now.
	rateClock func() time.Time
}

func newIDEnv(t *testing.T, o idOptions) *idEnv {
	t.Helper()
	e := &idEnv{t: t, mode: o.mode, clock: testutil.NewClock(time.Now().UTC())}
	if e.mode == "" {
		e.mode = "local"
	}
	e.pool = o.pool
	if e.pool == nil {
		cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 6
		if e.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.pool.Close)
	}
	e.store = eventstore.New(e.pool, eventstore.WithUpcaster(domain.Events))
	var err error
	e.runner, err = projections.NewRunner(e.store, slog.New(slog.DiscardHandler), []projections.Projection{projections.APIKeys{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.runner.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	hasher, err := identity.NewHasher(bytes.Repeat([]byte{7}, identity.PepperLen))
	if err != nil {
		t.Fatal(err)
	}
	reader := projections.APIKeyReader{DB: e.pool}
	auth := &identity.Authenticator{Mode: e.mode, LocalOrgID: "org_local", DevToken: o.devToken,
		Keys: &identity.KeyVerifier{Lookup: reader, Hasher: hasher, Now: e.clock.Now}}
	app := commands.NewApplication(commands.Capabilities{APIKeys: &keys.Keys{
		Deps:   keys.APIKeyDeps{Store: e.store, ReadModels: e.runner, Now: e.clock.Now},
		Hasher: hasher, Grace: 24 * time.Hour, Reader: reader}})
	e.deps = Deps{Mode: e.mode, Auth: auth, LocalOrgID: "org_local", App: &app, Identity: IdentityDeps{
		PublicURL:   idPublicURL,
		CORSOrigins: []string{idConsoleOrigin},
		KeyClock:    e.clock.Now,
	}}
	if e.mode == "hosted" {
		e.idp = identitytest.New(t)
		octx, ocancel := context.WithCancel(context.Background())
		t.Cleanup(ocancel)
		auth.OAuth, err = identity.NewOAuthVerifier(octx, identity.OAuthConfig{Issuer: e.idp.Issuer, JWKSURL: e.idp.JWKSURL,
			Audience: idAudience, Roles: &identity.RoleClient{URL: e.idp.RoleURL}})
		if err != nil {
			t.Fatal(err)
		}
		auth.Bindings = &identity.Bindings{Store: e.store}
		e.deps.Identity.Issuer = e.idp.Issuer
		e.deps.Identity.RateLimiter = &identity.RateLimiter{DB: e.pool, Now: o.rateClock}
		e.deps.Identity.RateLimitAnonymous = cmp(o.anonymous, 1000)
		e.deps.Identity.RateLimitAuthenticated = cmp(o.authenticated, 1000)
	}
	e.s, _ = newTestServer(t, e.deps)
	e.v = apitest.FromHandler(t, e.s.Handler())
	return e
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// answer is one checked exchange.
type answer struct {
	resp *http.Response
	body []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, a.body)
	}
	return m
}

func (a answer) errField(t *testing.T, k string) any {
	t.Helper()
	e, _ := a.json(t)["error"].(map[string]any)
	return e[k]
}

// do sends a request with bearer (none when ""), checks the answer against
// the served document and returns it.
func (e *idEnv) do(method, path, bearer, body string, header ...string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, b := apitest.Do(e.t, e.s.Handler(), req)
	e.v.Check(e.t, req, resp, b)
	return answer{resp, b}
}

func wantStatus(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.resp.StatusCode != status {
		t.Fatalf("got status %d (%s); want %d", a.resp.StatusCode, a.body, status)
	}
	if code != "" {
		if got := a.errField(t, "code"); got != code {
			t.Fatalf("got code %v (%s); want %s", got, a.body, code)
		}
	}
}

func wantReason(t *testing.T, a answer, reason string) {
	t.Helper()
	wantStatus(t, a, http.StatusUnauthorized, "unauthorized")
	if got := a.errField(t, "reason"); got != reason {
		t.Fatalf("got reason %v (%s); want %s", got, a.body, reason)
	}
}

// mint mints a key as bearer ("" for local mode's operator) and returns the
// key record and token.
func (e *idEnv) mint(bearer, body string) (map[string]any, string) {
	e.t.Helper()
	a := e.do("POST", "/v1/api-keys", bearer, body)
	wantStatus(e.t, a, http.StatusCreated, "")
	m := a.json(e.t)
	return m["key"].(map[string]any), m["token"].(string)
}

func TestAPIKeyLifecycleLocal(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	dev := domain.NewID(domain.PrefixDevice)
	key, token := e.mint("", `{"name":"mcp client","scopes":["devices:read","devices:act","runs:start"],"deviceIds":["`+dev+`"],"expiresInDays":30}`)
	id := key["id"].(string)
	if key["state"] != "active" || key["tokenPrefix"] != token[:len(identity.APIKeyPrefix)+33] {
		t.Fatalf("got %v; want an active key whose prefix starts the token", key)
	}

	t.Run("the key reads itself", func(t *testing.T) {
		a := e.do("GET", "/v1/api-keys/current", token, "")
		wantStatus(t, a, http.StatusOK, "")
		if got := a.json(t); got["id"] != id || !slices.Equal(toStrings(got["scopes"]), []string{"devices:read", "devices:act", "runs:start"}) {
			t.Fatalf("got %v; want key %s with its own scopes", got, id)
		}
	})
	t.Run("the key cannot manage keys", func(t *testing.T) {
		wantStatus(t, e.do("GET", "/v1/api-keys", token, ""), http.StatusForbidden, "permission_denied")
		wantStatus(t, e.do("POST", "/v1/api-keys", token, `{"scopes":["devices:read"]}`), http.StatusForbidden, "permission_denied")
		wantStatus(t, e.do("POST", "/v1/api-keys/"+id+"/rotate", token, ""), http.StatusForbidden, "permission_denied")
	})
	t.Run("the operator lists and reads it", func(t *testing.T) {
		a := e.do("GET", "/v1/api-keys", "", "")
		wantStatus(t, a, http.StatusOK, "")
		if keys := a.json(t)["keys"].([]any); len(keys) != 1 {
			t.Fatalf("got %d keys; want 1", len(keys))
		}
		wantStatus(t, e.do("GET", "/v1/api-keys/"+id, "", ""), http.StatusOK, "")
	})
	t.Run("the operator's session is not a key", func(t *testing.T) {
		wantStatus(t, e.do("GET", "/v1/api-keys/current", "", ""), http.StatusNotFound, "not_found")
	})
	t.Run("narrow", func(t *testing.T) {
		a := e.do("PATCH", "/v1/api-keys/"+id, "", `{"scopes":["devices:read"]}`)
		wantStatus(t, a, http.StatusOK, "")
		if got := toStrings(a.json(t)["scopes"]); !slices.Equal(got, []string{"devices:read"}) {
			t.Fatalf("got scopes %v; want [devices:read]", got)
		}
		cur := e.do("GET", "/v1/api-keys/current", token, "").json(t)
		if !slices.Equal(toStrings(cur["scopes"]), []string{"devices:read"}) {
			t.Fatalf("the key's next request sees scopes %v; want the narrowed ones", cur["scopes"])
		}
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{"scopes":["devices:act"]}`), http.StatusBadRequest, "invalid_argument")
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{"deviceIds":["`+domain.NewID(domain.PrefixDevice)+`"]}`), http.StatusBadRequest, "invalid_argument")
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{"scopes":["devices:read"],"expiresInDays":3}`), http.StatusBadRequest, "invalid_argument")
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{}`), http.StatusBadRequest, "invalid_argument")
	})
	t.Run("renew", func(t *testing.T) {
		a := e.do("PATCH", "/v1/api-keys/"+id, "", `{"expiresInDays":200}`)
		wantStatus(t, a, http.StatusOK, "")
		exp, err := time.Parse(time.RFC3339Nano, a.json(t)["expiresAt"].(string))
		if err != nil || exp.Sub(e.clock.Now()) < 199*24*time.Hour {
			t.Fatalf("got expiresAt %v (%v); want about 200 days ahead", exp, err)
		}
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{"expiresInDays":0}`), http.StatusBadRequest, "invalid_argument")
	})
	t.Run("rotate", func(t *testing.T) {
		a := e.do("POST", "/v1/api-keys/"+id+"/rotate", "", "")
		wantStatus(t, a, http.StatusOK, "")
		m := a.json(t)
		fresh := m["token"].(string)
		if fresh == token || m["key"].(map[string]any)["previousSecretValidUntil"] == nil {
			t.Fatalf("got %v; want a new token and the old one's grace end", m)
		}
		wantStatus(t, e.do("GET", "/v1/api-keys/current", token, ""), http.StatusOK, "")
		wantStatus(t, e.do("GET", "/v1/api-keys/current", fresh, ""), http.StatusOK, "")
		e.clock.Set(e.clock.Now().Add(24 * time.Hour))
		wantReason(t, e.do("GET", "/v1/api-keys/current", token, ""), "unknown_key")
		wantStatus(t, e.do("GET", "/v1/api-keys/current", fresh, ""), http.StatusOK, "")
		token = fresh
	})
	t.Run("revoked key is refused on its next request", func(t *testing.T) {
		wantStatus(t, e.do("DELETE", "/v1/api-keys/"+id, "", ""), http.StatusNoContent, "")
		a := e.do("GET", "/v1/api-keys/current", token, "")
		wantReason(t, a, "revoked_key")
		if a.errField(t, "hint") == nil {
			t.Fatal("got no hint on revoked_key; want one")
		}
		wantStatus(t, e.do("DELETE", "/v1/api-keys/"+id, "", ""), http.StatusNoContent, "")
		// Managing a revoked key is invalid_argument naming the state:
		// wrong_state is the order code (spec 7.2).
		for _, a := range []answer{
			e.do("PATCH", "/v1/api-keys/"+id, "", `{"expiresInDays":3}`),
			e.do("POST", "/v1/api-keys/"+id+"/rotate", "", ""),
		} {
			wantStatus(t, a, http.StatusBadRequest, "invalid_argument")
			if got := a.errField(t, "state"); got != "revoked" {
				t.Fatalf("got state %v; want revoked", got)
			}
		}
	})
	t.Run("a key revokes itself", func(t *testing.T) {
		_, tok := e.mint("", `{"scopes":["devices:read"]}`)
		wantStatus(t, e.do("DELETE", "/v1/api-keys/current", tok, ""), http.StatusNoContent, "")
		wantReason(t, e.do("GET", "/v1/api-keys/current", tok, ""), "revoked_key")
	})
	t.Run("expired key", func(t *testing.T) {
		k, tok := e.mint("", `{"scopes":["devices:read"],"expiresInDays":1}`)
		e.clock.Set(e.clock.Now().Add(24 * time.Hour))
		a := e.do("GET", "/v1/api-keys/current", tok, "")
		wantReason(t, a, "expired_key")
		if a.errField(t, "hint") == nil {
			t.Fatal("got no hint on expired_key; want one")
		}
		a = e.do("PATCH", "/v1/api-keys/"+k["id"].(string), "", `{"expiresInDays":3}`)
		wantStatus(t, a, http.StatusBadRequest, "invalid_argument")
		if got := a.errField(t, "state"); got != "expired" {
			t.Fatalf("got state %v; want expired", got)
		}
	})
	t.Run("mint refusals", func(t *testing.T) {
		for _, body := range []string{`{}`, `{"scopes":[]}`, `{"scopes":["devices:fly"]}`, `{"scopes":["devices:read"],"expiresInDays":366}`,
			`{"scopes":["devices:read"],"deviceIds":["phone-1"]}`, `{"scopes":["devices:read"],"name":"` + strings.Repeat("n", 101) + `"}`} {
			wantStatus(t, e.do("POST", "/v1/api-keys", "", body), http.StatusBadRequest, "invalid_argument")
		}
	})
	t.Run("unknown ids", func(t *testing.T) {
		for _, id := range []string{domain.NewID(domain.PrefixAPIKey), "nonsense"} {
			wantStatus(t, e.do("GET", "/v1/api-keys/"+id, "", ""), http.StatusNotFound, "not_found")
			wantStatus(t, e.do("DELETE", "/v1/api-keys/"+id, "", ""), http.StatusNotFound, "not_found")
			wantStatus(t, e.do("PATCH", "/v1/api-keys/"+id, "", `{"expiresInDays":3}`), http.StatusNotFound, "not_found")
			wantStatus(t, e.do("POST", "/v1/api-keys/"+id+"/rotate", "", ""), http.StatusNotFound, "not_found")
		}
	})
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// scrub removes what legitimately differs between two answers: the request
// id and the date.
func scrub(h http.Header) http.Header {
	h = h.Clone()
	h.Del("X-Request-Id")
	h.Del("Date")
	return h
}

func TestUnknownKeyAndWrongSecretAreByteIdentical(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	key, _ := e.mint("", `{"scopes":["devices:read"]}`)
	wrong, err := identity.NewSecretFor(key["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := identity.NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	a := e.do("GET", "/v1/api-keys/current", wrong.Token, "")
	b := e.do("GET", "/v1/api-keys/current", unknown.Token, "")
	wantReason(t, a, "unknown_key")
	if !bytes.Equal(a.body, b.body) {
		t.Fatalf("bodies differ:\n%s\n%s", a.body, b.body)
	}
	if ha, hb := scrub(a.resp.Header), scrub(b.resp.Header); !equalHeaders(ha, hb) {
		t.Fatalf("headers differ:\n%v\n%v", ha, hb)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestMalformedCredentialsAnswer401(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	tests := []struct {
		name  string
		value string
	}{
		{"prefix only", "Bearer pbk_"},
		{"three parts", "Bearer pbk_a_b_c"},
		{"non-ASCII", "Bearer pbk_ключ_секрет"},
		{"ten kilobytes", "Bearer pbk_" + strings.Repeat("a", 10<<10)},
		{"not bearer", "Basic dXNlcjpwdw=="},
		{"empty bearer", "Bearer "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := e.do("GET", "/v1/api-keys", "", "", "Authorization", tt.value)
			wantReason(t, a, "malformed_credentials")
			// Local mode serves no resource metadata, so the challenge names none.
			if got, want := a.resp.Header.Get("WWW-Authenticate"), `Bearer error="invalid_token"`; got != want {
				t.Fatalf("got WWW-Authenticate %q; want %q", got, want)
			}
		})
	}
}

// TestBearerChallenge: a 401's WWW-Authenticate names the protected-resource
// metadata only where that document is served (hosted), never a document
// the deployment answers 404 (local mode).
func TestBearerChallenge(t *testing.T) {
	local := newIDEnv(t, idOptions{devToken: "s3cret"})
	hosted := newIDEnv(t, idOptions{mode: "hosted"})
	meta := `Bearer resource_metadata="` + idPublicURL + `/.well-known/oauth-protected-resource/mcp"`
	tests := []struct {
		name   string
		e      *idEnv
		bearer string
		query  string
		reason string
		want   string
	}{
		{"local: no credential", local, "", "", "missing_credentials", `Bearer`},
		{"local: wrong dev token", local, "nope", "", "invalid_token", `Bearer error="invalid_token"`},
		{"local: unknown key", local, mustToken(t), "", "unknown_key", `Bearer error="invalid_token"`},
		{"local: token in the query string", local, "", "?access_token=s3cret", "malformed_credentials", `Bearer error="invalid_token"`},
		{"hosted: no credential", hosted, "", "", "missing_credentials", meta},
		{"hosted: not a token", hosted, "nope", "", "malformed_credentials", meta + `, error="invalid_token"`},
		{"hosted: unknown key", hosted, mustToken(t), "", "unknown_key", meta + `, error="invalid_token"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.e.do("GET", "/v1/api-keys"+tt.query, tt.bearer, "")
			wantReason(t, a, tt.reason)
			got := a.resp.Header.Get("WWW-Authenticate")
			if got != tt.want {
				t.Fatalf("got WWW-Authenticate %q; want %q", got, tt.want)
			}
			// Whatever the challenge names is served.
			if _, after, ok := strings.Cut(got, `resource_metadata="`); ok {
				doc, _, _ := strings.Cut(after, `"`)
				wantStatus(t, tt.e.do("GET", strings.TrimPrefix(doc, idPublicURL), "", ""), http.StatusOK, "")
			}
		})
	}
	wantStatus(t, local.do("GET", "/v1/api-keys", "s3cret", ""), http.StatusOK, "")
	wantStatus(t, local.do("GET", resourceMetadataPath, "", ""), http.StatusNotFound, "not_found")
}

// TestLocalModeAnyBearerIsTheOperator: without SERVICE_DEV_TOKEN every
// bearer that is not an API key resolves to the local operator (spec 5.7);
// an API key is still verified.
func TestLocalModeAnyBearerIsTheOperator(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	for _, bearer := range []string{"", "anything", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"} {
		// Listing keys needs a signed-in session, which the local
		// operator counts as.
		wantStatus(t, e.do("GET", "/v1/api-keys", bearer, ""), http.StatusOK, "")
	}
	wantReason(t, e.do("GET", "/v1/api-keys/current", mustToken(t), ""), "unknown_key")
}

func mustToken(t *testing.T) string {
	tok, err := identity.NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func TestHostedManagementAndAppGate(t *testing.T) {
	e := newIDEnv(t, idOptions{mode: "hosted"})
	admin := e.idp.Console(t, idAudience, "user_admin", "org_a", "admin")
	member := e.idp.Console(t, idAudience, "user_member", "org_a", "member")
	e.idp.SetRole("user_admin", "org_a", "admin")
	app := e.idp.App(t, idAudience, "user_admin", "org_a", "third-party")

	adminKey, _ := e.mint(admin, `{"scopes":["devices:read","orders:place"]}`)
	memberKey, memberToken := e.mint(member, `{"scopes":["devices:read"]}`)

	t.Run("a member cannot mint beyond its scopes", func(t *testing.T) {
		a := e.do("POST", "/v1/api-keys", member, `{"scopes":["orders:place"]}`)
		wantStatus(t, a, http.StatusForbidden, "permission_denied")
	})
	t.Run("a member manages only its own keys", func(t *testing.T) {
		keys := e.do("GET", "/v1/api-keys", member, "").json(t)["keys"].([]any)
		if len(keys) != 1 || keys[0].(map[string]any)["id"] != memberKey["id"] {
			t.Fatalf("got %v; want only the member's key", keys)
		}
		wantStatus(t, e.do("GET", "/v1/api-keys/"+adminKey["id"].(string), member, ""), http.StatusNotFound, "not_found")
		wantStatus(t, e.do("DELETE", "/v1/api-keys/"+adminKey["id"].(string), member, ""), http.StatusNotFound, "not_found")
	})
	t.Run("an admin manages every key of the organisation", func(t *testing.T) {
		keys := e.do("GET", "/v1/api-keys", admin, "").json(t)["keys"].([]any)
		if len(keys) != 2 {
			t.Fatalf("got %d keys; want 2", len(keys))
		}
		wantStatus(t, e.do("PATCH", "/v1/api-keys/"+memberKey["id"].(string), admin, `{"expiresInDays":10}`), http.StatusOK, "")
	})
	t.Run("keys carry the instance and work", func(t *testing.T) {
		wantStatus(t, e.do("GET", "/v1/api-keys/current", memberToken, ""), http.StatusOK, "")
	})
	t.Run("an OAuth app is sent to the console", func(t *testing.T) {
		a := e.do("GET", "/v1/api-keys", app, "")
		wantStatus(t, a, http.StatusForbidden, "permission_denied")
		if where, _ := a.errField(t, "where").(string); !strings.Contains(where, "console") {
			t.Fatalf("got where %q; want the console named", where)
		}
		if msg, _ := a.errField(t, "message").(string); !strings.Contains(msg, "API keys") {
			t.Fatalf("got message %q; want it to name API keys", msg)
		}
	})
	t.Run("another organisation's key answers as a missing one", func(t *testing.T) {
		other := e.idp.Console(t, idAudience, "user_b", "org_b", "admin")
		foreign := e.do("GET", "/v1/api-keys/"+adminKey["id"].(string), other, "")
		missing := e.do("GET", "/v1/api-keys/"+domain.NewID(domain.PrefixAPIKey), other, "")
		wantStatus(t, foreign, http.StatusNotFound, "not_found")
		if !bytes.Equal(foreign.body, missing.body) {
			t.Fatalf("got %s for another organisation's key and %s for a missing one; want one answer", foreign.body, missing.body)
		}
	})
	t.Run("discovery", func(t *testing.T) {
		for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
			a := e.do("GET", path, "", "")
			wantStatus(t, a, http.StatusOK, "")
			m := a.json(t)
			if m["resource"] != idAudience || !slices.Equal(toStrings(m["authorization_servers"]), []string{e.idp.Issuer}) ||
				len(m["scopes_supported"].([]any)) != 8 {
				t.Fatalf("%s: got %v; want resource %s, the issuer and eight scopes", path, m, idAudience)
			}
		}
	})
}

func TestAppGate(t *testing.T) {
	e := newIDEnv(t, idOptions{mode: "hosted"})
	e.idp.SetRole("user_1", "org_a", "member")
	app := e.idp.App(t, idAudience, "user_1", "org_a", "third-party")
	ok := kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return kernel.WriteJSON(w, http.StatusOK, map[string]string{"kind": string(authOf(r).Kind)})
	})
	// Routes of the spec list pass; others are refused until annotated.
	e.s.v1.Handle("/gate-test/listed/{id}", ok).Methods(http.MethodGet)
	e.s.allowApps(e.s.v1.Handle("/gate-test/annotated", ok).Methods(http.MethodGet))
	appRoutes["GET /v1/gate-test/listed/{}"] = true
	defer delete(appRoutes, "GET /v1/gate-test/listed/{}")
	e.s.v1.Handle("/gate-test/unlisted", ok).Methods(http.MethodGet)

	tests := []struct {
		path   string
		status int
	}{
		{"/v1/gate-test/listed/x1", http.StatusOK},
		{"/v1/gate-test/annotated", http.StatusOK},
		{"/v1/gate-test/unlisted", http.StatusForbidden},
		{"/v1/api-keys", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			req := httptest.NewRequest("GET", tt.path, nil)
			req.Header.Set("Authorization", "Bearer "+app)
			resp, body := apitest.Do(t, e.s.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("got %d %s; want %d", resp.StatusCode, body, tt.status)
			}
		})
	}
}

func TestAppRouteKey(t *testing.T) {
	tests := []struct{ method, tmpl, want string }{
		{"GET", "/v1/devices/{deviceId}", "GET /v1/devices/{}"},
		{"POST", "/v1/runs/{runId:[a-z_0-9]+}/cancel", "POST /v1/runs/{}/cancel"},
		{"GET", "/v1/x/{a:[0-9]{2}}", "GET /v1/x/{}"},
	}
	for _, tt := range tests {
		if got := appRouteKey(tt.method, tt.tmpl); got != tt.want {
			t.Errorf("appRouteKey(%s, %s): got %q; want %q", tt.method, tt.tmpl, got, tt.want)
		}
	}
}

func TestDiscoveryIsHostedOnly(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		wantStatus(t, e.do("GET", path, "", ""), http.StatusNotFound, "not_found")
	}
}

func TestCORS(t *testing.T) {
	e := newIDEnv(t, idOptions{})
	preflight := func(origin string) (*http.Response, []byte) {
		req := httptest.NewRequest(http.MethodOptions, "/v1/api-keys", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-evil")
		return apitest.Do(t, e.s.Handler(), req)
	}
	t.Run("allowed preflight", func(t *testing.T) {
		resp, _ := preflight(idConsoleOrigin)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("got %d; want 204", resp.StatusCode)
		}
		for k, want := range map[string]string{
			"Access-Control-Allow-Origin":  idConsoleOrigin,
			"Access-Control-Allow-Headers": "Authorization, Content-Type, x-service-step-up, Idempotency-Key",
		} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("got %s %q; want %q", k, got, want)
			}
		}
	})
	t.Run("origin not on the list", func(t *testing.T) {
		resp, body := preflight("https://evil.example")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"origin_not_allowed"`) {
			t.Fatalf("got %d %s; want 403 origin_not_allowed", resp.StatusCode, body)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("got Access-Control-Allow-Origin on a refusal; want none")
		}
	})
	t.Run("simple request from a page of another origin", func(t *testing.T) {
		// The local operator needs no credential: a page elsewhere must not
		// drive it.
		a := e.do("POST", "/v1/api-keys", "", `{"scopes":["devices:read"]}`, "Origin", "https://evil.example", "Content-Type", "text/plain")
		wantStatus(t, a, http.StatusForbidden, "origin_not_allowed")
	})
	t.Run("request from the allowed origin", func(t *testing.T) {
		a := e.do("GET", "/v1/api-keys", "", "", "Origin", idConsoleOrigin)
		wantStatus(t, a, http.StatusOK, "")
		if got := a.resp.Header.Get("Access-Control-Allow-Origin"); got != idConsoleOrigin {
			t.Fatalf("got Access-Control-Allow-Origin %q; want %q", got, idConsoleOrigin)
		}
	})
	t.Run("an API key from a web page, whatever the origin", func(t *testing.T) {
		_, tok := e.mint("", `{"scopes":["devices:read"]}`)
		for _, tt := range []struct{ origin, path string }{
			{idConsoleOrigin, "/v1/api-keys/current"},
			{"https://evil.example", "/v1/api-keys/current"},
			{"https://evil.example", "/healthz"},
			{"null", "/mcp"},
		} {
			req := httptest.NewRequest("GET", tt.path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Origin", tt.origin)
			resp, b := apitest.Do(t, e.s.Handler(), req)
			a := answer{resp, b}
			wantStatus(t, a, http.StatusForbidden, "api_key_from_browser_origin")
			if got, want := a.resp.Header.Get("Access-Control-Allow-Origin"), map[bool]string{true: idConsoleOrigin}[tt.origin == idConsoleOrigin]; got != want {
				t.Fatalf("%s from %s: got Access-Control-Allow-Origin %q; want %q", tt.path, tt.origin, got, want)
			}
		}
	})
	t.Run("a preflight stays origin_not_allowed, even for a key", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodOptions, "/v1/api-keys/current", nil)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Access-Control-Request-Method", "GET")
		req.Header.Set("Authorization", "Bearer "+mustToken(t))
		resp, body := apitest.Do(t, e.s.Handler(), req)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"origin_not_allowed"`) {
			t.Fatalf("got %d %s; want 403 origin_not_allowed", resp.StatusCode, body)
		}
	})
}

// TestRateLimitComesFirstAndCountsEveryRoute: in hosted mode every request
// counts against its caller's budget, whatever the route and whatever CORS
// would answer, and a caller over budget is refused 429 before CORS,
// routing or authentication (spec 8: "refused before any work").
func TestRateLimitComesFirstAndCountsEveryRoute(t *testing.T) {
	minute := time.Now().UTC().Truncate(time.Minute).Add(20 * time.Second)
	clock := func() time.Time { return minute }
	type req struct {
		name, method, path string
		header             []string
		status             int
	}
	evil := []string{"Origin", "https://evil.example"}
	reqs := []req{
		{"health", "GET", "/healthz", nil, http.StatusOK},
		{"document", "GET", "/openapi.json", nil, http.StatusOK},
		{"discovery", "GET", resourceMetadataPath, nil, http.StatusOK},
		{"unknown path", "GET", "/nothing-here", nil, http.StatusNotFound},
		{"device surface", "GET", "/vrx/vrx_x/v1/run", nil, http.StatusNotFound},
		{"authenticated route without a credential", "GET", "/v1/devices", nil, http.StatusUnauthorized},
		{"preflight from a refused origin", "OPTIONS", "/v1/devices", append([]string{"Access-Control-Request-Method", "GET"}, evil...), http.StatusForbidden},
		{"simple request from a refused origin", "GET", "/v1/devices", evil, http.StatusForbidden},
		{"allowed preflight", "OPTIONS", "/v1/devices", []string{"Origin", idConsoleOrigin, "Access-Control-Request-Method", "GET"}, http.StatusNoContent},
	}
	// One more than the requests below: building the validator fetched the
	// document once, and that counted too.
	e := newIDEnv(t, idOptions{mode: "hosted", anonymous: len(reqs) + 1, authenticated: 1, rateClock: clock})
	send := func(t *testing.T, r req) *http.Response {
		t.Helper()
		hr := httptest.NewRequest(r.method, r.path, nil)
		for i := 0; i+1 < len(r.header); i += 2 {
			hr.Header.Set(r.header[i], r.header[i+1])
		}
		resp, _ := apitest.Do(t, e.s.Handler(), hr)
		return resp
	}
	for i, r := range reqs {
		resp := send(t, r)
		if resp.StatusCode != r.status {
			t.Fatalf("%s: got %d; want %d", r.name, resp.StatusCode, r.status)
		}
		if got, want := resp.Header.Get("RateLimit-Remaining"), itoa(int64(len(reqs)-1-i)); got != want {
			t.Fatalf("%s: got RateLimit-Remaining %q; want %s (every request counted)", r.name, got, want)
		}
	}
	for _, r := range reqs {
		if resp := send(t, r); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s over budget: got %d; want 429 with Retry-After before any other answer", r.name, resp.StatusCode)
		}
	}
	// A key from a web page counts against the authenticated budget (1)
	// and, over it, hears 429 before api_key_from_browser_origin.
	key := []string{"Authorization", "Bearer " + mustToken(t), "Origin", "https://evil.example"}
	if resp := send(t, req{method: "GET", path: "/v1/devices", header: key}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("key from a web page: got %d; want 403", resp.StatusCode)
	}
	if resp := send(t, req{method: "GET", path: "/v1/devices", header: key}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("key from a web page over budget: got %d; want 429", resp.StatusCode)
	}
}

// rateHeaders are the headers every hosted answer carries.
var rateHeaders = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"}

func TestRateLimitOnRealServers(t *testing.T) {
	// Both instances' clocks stand 20 s into one minute, so the budget is
	// not split by a window boundary mid-test.
	minute := time.Now().UTC().Truncate(time.Minute).Add(20 * time.Second)
	clock := func() time.Time { return minute }
	one := newIDEnv(t, idOptions{mode: "hosted", anonymous: 4, authenticated: 6, rateClock: clock})
	// A second instance on the same database.
	two := newIDEnv(t, idOptions{mode: "hosted", anonymous: 4, authenticated: 6, pool: one.pool, rateClock: clock})
	srv1 := httptest.NewServer(one.s.Handler())
	defer srv1.Close()
	srv2 := httptest.NewServer(two.s.Handler())
	defer srv2.Close()

	get := func(t *testing.T, base, path, bearer string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		one.v.Check(t, req, resp, body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}
	t.Run("anonymous budget shared by two instances", func(t *testing.T) {
		var statuses []int
		for i := 0; i < 6; i++ {
			base := srv1.URL
			if i%2 == 1 {
				base = srv2.URL
			}
			resp := get(t, base, "/.well-known/oauth-protected-resource", "")
			statuses = append(statuses, resp.StatusCode)
			for _, h := range rateHeaders {
				if resp.Header.Get(h) == "" {
					t.Fatalf("request %d: got no %s; want it on every answer", i, h)
				}
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != "4;w=60" {
				t.Fatalf("got RateLimit-Policy %q; want 4;w=60", got)
			}
			if want := max(0, 3-i); resp.Header.Get("RateLimit-Remaining") != itoa(int64(want)) {
				t.Fatalf("request %d: got RateLimit-Remaining %s; want %d", i, resp.Header.Get("RateLimit-Remaining"), want)
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				ra := resp.Header.Get("Retry-After")
				if ra != "40" || ra != resp.Header.Get("RateLimit-Reset") {
					t.Fatalf("got Retry-After %q, RateLimit-Reset %q; want both 40", ra, resp.Header.Get("RateLimit-Reset"))
				}
				body, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(body), `"rate_limited"`) {
					t.Fatalf("got %s; want rate_limited", body)
				}
			}
		}
		want := []int{200, 200, 200, 200, 429, 429}
		if !slices.Equal(statuses, want) {
			t.Fatalf("got statuses %v; want %v across two instances", statuses, want)
		}
	})
	t.Run("authorized requests use the other budget", func(t *testing.T) {
		tok := two.idp.Console(t, idAudience, "user_1", "org_a", "admin")
		resp := get(t, srv2.URL, "/v1/api-keys", tok)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Limit") != "6" {
			t.Fatalf("got %d with RateLimit-Limit %q; want 200 under the authenticated budget 6", resp.StatusCode, resp.Header.Get("RateLimit-Limit"))
		}
	})
	t.Run("refused before any work", func(t *testing.T) {
		// An anonymous caller over budget is refused 429 even where it would
		// otherwise get 401: authentication never ran.
		resp := get(t, srv1.URL, "/v1/api-keys", "")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("got %d; want 429", resp.StatusCode)
		}
	})
}

func TestHostedWithoutAuthenticatorFailsClosed(t *testing.T) {
	s, _ := newTestServer(t, Deps{Mode: "hosted"})
	resp, body := apitest.Do(t, s.Handler(), httptest.NewRequest("GET", "/v1/api-keys", nil))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s; want 503", resp.StatusCode, body)
	}
}
