package httpapi

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/console"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/http/wire"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// cliPrincipals are the callers of the CLI sign-in and console telemetry
// route tests, chosen per request with the X-Test-Principal header.
var cliPrincipals = map[string]domain.Auth{
	"admin":     {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ann", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"member":    {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_max", Role: domain.RoleMember, Scopes: domain.AllScopes},
	"key":       {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"app":       {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_ann", ClientID: "third-party", Scopes: domain.AllScopes},
	"other-org": {OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

type cliAuthenticator struct{}

func (cliAuthenticator) Authenticate(r *http.Request) (domain.Auth, error) {
	a, ok := cliPrincipals[r.Header.Get("X-Test-Principal")]
	if !ok {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMissingCredentials, "no such test principal")
	}
	return a, nil
}

// cliHTTPEnv is a hosted server (so /v1 needs a credential) whose CLI
// sign-in and console telemetry routes run against a real database, with
// the key store and console events read models running.
type cliHTTPEnv struct {
	t     *testing.T
	s     *Server
	v     *apitest.Validator
	logs  *logBuffer
	keys  *identity.KeyVerifier
	clock *testutil.Clock
}

type cliEnvOptions struct {
	// anonymousBudget, when set, turns the request rate limit on with this
	// budget for callers without Authorization.
	anonymousBudget int
}

func newCLIHTTPEnv(t *testing.T, opts cliEnvOptions) *cliHTTPEnv {
	t.Helper()
	pool, store := testStore(t, 6)
	runner := runProjections(t, store, projections.APIKeys{}, projections.ConsoleEvents{})
	hasher, _ := identity.NewHasher(bytes.Repeat([]byte{3}, identity.PepperLen))
	reader := projections.APIKeyReader{DB: pool}
	clock := testutil.NewClock(time.Now().UTC())
	app := commands.NewApplication(commands.Capabilities{
		APIKeys: &keys.Keys{Deps: keys.APIKeyDeps{Store: store, ReadModels: runner}, Hasher: hasher, Grace: time.Hour, Reader: reader},
		Console: console.New(console.Config{Store: store, Now: clock.Now, ReadModels: testutil.ReadModels{RM: runner}}),
	})
	deps := Deps{Mode: "hosted", Auth: cliAuthenticator{}, App: &app, Identity: IdentityDeps{PublicURL: "https://console.test"}}
	if opts.anonymousBudget > 0 {
		deps.Identity.RateLimiter = &identity.RateLimiter{DB: pool}
		deps.Identity.RateLimitAnonymous, deps.Identity.RateLimitAuthenticated = opts.anonymousBudget, 1000
	}
	s, logs := newTestServer(t, deps)
	return &cliHTTPEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), logs: logs,
		keys: &identity.KeyVerifier{Lookup: reader, Hasher: hasher}, clock: clock}
}

// do sends one request as principal ("" sends no credential) with extra
// headers, checks the answer against the served document and returns it.
func (e *cliHTTPEnv) do(principal, method, path, body string, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return call(e.t, e.s, e.v, principal, req)
}

func (e *cliHTTPEnv) json(principal, method, path, body string, headers map[string]string, want int, out any) []byte {
	e.t.Helper()
	resp, raw := e.do(principal, method, path, body, headers)
	if resp.StatusCode != want {
		e.t.Fatalf("%s %s as %q: got %d %s; want %d", method, path, principal, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: %v\n%s", method, path, err, raw)
		}
	}
	return raw
}

func cliStartBody(t *testing.T) (*ecdh.PrivateKey, string) {
	t.Helper()
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv, `{"publicKey":"` + base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()) + `","clientName":"phonefleet test","host":"ci-box"}`
}

func cliError(t *testing.T, raw []byte) (code string, e map[string]any) {
	t.Helper()
	e = decodeErrorBody(t, raw)
	code, _ = e["code"].(string)
	return code, e
}

func TestCLISessionRoutesSignAKeyIn(t *testing.T) {
	e := newCLIHTTPEnv(t, cliEnvOptions{})
	priv, body := cliStartBody(t)

	// Started without any credential, though the deployment is hosted.
	var started wire.StartedCLISession
	resp, raw := e.do("", "POST", "/v1/cli-sessions", body, nil)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("start: got %d, Cache-Control %q; want 201 no-store", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	if err := json.Unmarshal(raw, &started); err != nil {
		t.Fatal(err)
	}
	if want := "https://console.test/#/cli?code=" + started.UserCode; started.VerificationURL != want || started.Interval != 5 {
		t.Fatalf("got %+v; want verificationUrl %s and interval 5", started, want)
	}
	poll := map[string]string{PollTokenHeader: started.PollToken}
	sid := "/v1/cli-sessions/" + started.SessionID

	var p wire.CLISessionPoll
	e.json("", "GET", sid, "", poll, http.StatusOK, &p)
	if p.State != "pending" || p.SealedToken != nil {
		t.Fatalf("poll: got %+v; want pending", p)
	}
	// No token, or another's, is the answer for an unknown session.
	_, none := e.do("", "GET", sid, "", nil)
	_, wrong := e.do("", "GET", sid, "", map[string]string{PollTokenHeader: domain.NewPollToken()})
	_, unknown := e.do("", "GET", "/v1/cli-sessions/"+domain.NewID(domain.PrefixCLISession), "", poll)
	if code, _ := cliError(t, none); code != "not_found" || !bytes.Equal(none, wrong) || !bytes.Equal(none, unknown) {
		t.Fatalf("polls without the token, with another, and of an unknown session: got\n%s\n%s\n%s\nwant one not_found", none, wrong, unknown)
	}

	// The person looks up the code as typed, then approves it.
	lower := strings.ToLower(strings.ReplaceAll(started.UserCode, "-", ""))
	var shown wire.CLISession
	e.json("admin", "GET", "/v1/cli-sessions/by-code/"+lower, "", nil, http.StatusOK, &shown)
	if shown.SessionID != started.SessionID || shown.State != "pending" || shown.KeyName != "CLI on ci-box" ||
		shown.ClientName != "phonefleet test" || len(shown.GrantableScopes) != 4 || shown.KeyID != nil || shown.DecidedBy != nil {
		t.Fatalf("by code: got %+v", shown)
	}
	var approved wire.CLISession
	e.json("admin", "POST", sid+"/approve", `{"userCode":"`+lower+`","scopes":["devices:read"]}`, nil, http.StatusOK, &approved)
	if approved.State != "approved" || approved.KeyID == nil || approved.DecidedBy == nil || approved.DecidedBy.UserID != "u_ann" ||
		len(approved.GrantedScopes) != 1 {
		t.Fatalf("approve: got %+v", approved)
	}

	// The CLI's next poll opens to a working key, once.
	p = wire.CLISessionPoll{}
	e.json("", "GET", sid, "", poll, http.StatusOK, &p)
	if p.State != "approved" || p.SealedToken == nil || p.KeyID != *approved.KeyID {
		t.Fatalf("poll after approval: got %+v", p)
	}
	token, err := domain.OpenCLIToken(priv, started.SessionID, *p.SealedToken)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.keys.Verify(testutil.Context(t), token)
	if err != nil || a.APIKeyID != p.KeyID || a.OrgID != "org_a" || len(a.Scopes) != 1 || a.Scopes[0] != domain.ScopeDevicesRead {
		t.Fatalf("the delivered key: got %+v %v; want org_a's key with devices:read", a, err)
	}
	var again wire.CLISessionPoll
	e.json("", "GET", sid, "", poll, http.StatusOK, &again)
	if again.State != "consumed" || again.SealedToken != nil || again.KeyID != "" {
		t.Fatalf("second poll: got %+v; want consumed, without the key", again)
	}
	raw = e.json("admin", "POST", sid+"/approve", `{"userCode":"`+started.UserCode+`"}`, nil, http.StatusBadRequest, nil)
	if code, body := cliError(t, raw); code != "invalid_argument" || body["state"] != "consumed" {
		t.Fatalf("approving again: got %s", raw)
	}

	// The access log never shows a secret nor the code.
	logs := e.logs.String()
	for _, secret := range []string{started.PollToken, token, started.UserCode, lower} {
		if strings.Contains(logs, secret) {
			t.Errorf("the access log shows %q", secret)
		}
	}
	if !strings.Contains(logs, "/v1/cli-sessions/by-code/{userCode}") {
		t.Error("the access log does not name the by-code route by its template")
	}
}

func TestCLISessionRoutesRefusals(t *testing.T) {
	e := newCLIHTTPEnv(t, cliEnvOptions{})
	_, body := cliStartBody(t)
	var started wire.StartedCLISession
	e.json("", "POST", "/v1/cli-sessions", body, nil, http.StatusCreated, &started)
	sid := "/v1/cli-sessions/" + started.SessionID
	decide := `{"userCode":"` + started.UserCode + `"}`

	tests := []struct {
		name, principal, method, path, body string
		status                              int
		code                                string
	}{
		{"start without a body", "", "POST", "/v1/cli-sessions", "", 400, "invalid_argument"},
		{"start with a bad key", "", "POST", "/v1/cli-sessions", `{"publicKey":"abc"}`, 400, "invalid_argument"},
		{"start asking an unknown scope", "", "POST", "/v1/cli-sessions", strings.Replace(body, `"host"`, `"scopes":["all"],"host"`, 1), 400, "invalid_argument"},
		{"look up without a credential", "", "GET", "/v1/cli-sessions/by-code/" + started.UserCode, "", 401, "unauthorized"},
		{"look up with a key", "key", "GET", "/v1/cli-sessions/by-code/" + started.UserCode, "", 403, "permission_denied"},
		{"look up with an app", "app", "GET", "/v1/cli-sessions/by-code/" + started.UserCode, "", 403, "permission_denied"},
		{"look up a malformed code", "admin", "GET", "/v1/cli-sessions/by-code/AEIOU", "", 404, "not_found"},
		{"approve with a key", "key", "POST", sid + "/approve", decide, 403, "permission_denied"},
		{"approve with an app", "app", "POST", sid + "/approve", decide, 403, "permission_denied"},
		{"approve without the code", "admin", "POST", sid + "/approve", `{}`, 400, "invalid_argument"},
		{"approve with another code", "admin", "POST", sid + "/approve", `{"userCode":"BBBB-BBBB"}`, 404, "not_found"},
		{"approve a scope not asked", "admin", "POST", sid + "/approve", `{"userCode":"` + started.UserCode + `","scopes":["apps:delete"]}`, 400, "invalid_argument"},
		{"deny without a credential", "", "POST", sid + "/deny", decide, 401, "unauthorized"},
		{"poll a path that is no session", "", "GET", "/v1/cli-sessions/by-code", "", 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := e.json(tt.principal, tt.method, tt.path, tt.body, nil, tt.status, nil)
			if code, _ := cliError(t, raw); code != tt.code {
				t.Fatalf("got %s; want %s", raw, tt.code)
			}
		})
	}

	// 413 before anything is read, on the routes without a credential too.
	big := `{"publicKey":"` + strings.Repeat("a", 2<<20) + `"}`
	if resp, raw := e.do("", "POST", "/v1/cli-sessions", big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 MiB start: got %d %s; want 413", resp.StatusCode, raw)
	}

	// Another organisation: once A denied it, A's session is unknown to B.
	e.json("admin", "POST", sid+"/deny", decide, nil, http.StatusOK, nil)
	other := domain.NewUserCode()
	_, theirs := e.do("other-org", "GET", "/v1/cli-sessions/by-code/"+started.UserCode, "", nil)
	_, unknown := e.do("other-org", "GET", "/v1/cli-sessions/by-code/"+other, "", nil)
	if code, _ := cliError(t, theirs); code != "not_found" || !bytes.Equal(theirs, unknown) {
		t.Fatalf("B's lookup of A's code: got %s; of an unknown code %s; want one not_found", theirs, unknown)
	}
	_, theirs = e.do("other-org", "POST", sid+"/approve", decide, nil)
	_, unknown = e.do("other-org", "POST", "/v1/cli-sessions/"+domain.NewID(domain.PrefixCLISession)+"/approve", decide, nil)
	if code, _ := cliError(t, theirs); code != "not_found" || !bytes.Equal(theirs, unknown) {
		t.Fatalf("B approving A's session: got %s; an unknown one %s; want one not_found", theirs, unknown)
	}
	var p wire.CLISessionPoll
	e.json("", "GET", sid, "", map[string]string{PollTokenHeader: started.PollToken}, http.StatusOK, &p)
	if p.State != "denied" {
		t.Fatalf("poll after the denial: got %+v", p)
	}
}

// TestCLISessionRoutesAreRateLimited: the routes without a credential
// count against the anonymous budget of spec 8, like any request.
func TestCLISessionRoutesAreRateLimited(t *testing.T) {
	e := newCLIHTTPEnv(t, cliEnvOptions{anonymousBudget: 2})
	_, body := cliStartBody(t)
	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusTooManyRequests} {
		req := httptest.NewRequest("POST", "/v1/cli-sessions", strings.NewReader(body))
		req.RemoteAddr = "198.51.100.7:4000"
		resp, raw := call(t, e.s, e.v, "", req)
		if resp.StatusCode != want {
			t.Fatalf("start %d: got %d %s; want %d", i+1, resp.StatusCode, raw, want)
		}
		if resp.Header.Get("RateLimit-Limit") != "2" {
			t.Errorf("start %d: got RateLimit-Limit %q; want the anonymous budget 2", i+1, resp.Header.Get("RateLimit-Limit"))
		}
	}
}
