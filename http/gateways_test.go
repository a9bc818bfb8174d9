package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/commands"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity"
	"phonefleet/internal/releases"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// gwPrincipals are the callers of the gateway route tests, chosen per
// request with the X-Test-Principal header.
var gwPrincipals = testPrincipals{
	"admin":     {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ada", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"member":    {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_bob", Role: domain.RoleMember, Scopes: domain.AllScopes},
	"key":       {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes},
	"app":       {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_ada", ClientID: "app-1", Scopes: domain.AllScopes},
	"other-org": {OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

// gwEnv is a server whose gateway routes run against a real database with
// the gateways read model running; manifest is the releases manifest's
// content ("" for none).
type gwEnv struct {
	t     *testing.T
	s     *Server
	v     *apitest.Validator
	logs  *logBuffer
	store *eventstore.Store
}

func newGWEnv(t *testing.T, manifest string) *gwEnv {
	t.Helper()
	_, store := testStore(t, 6)
	runner := runProjections(t, store, projections.Gateways{})
	var rel *releases.File
	if manifest != "" {
		path := filepath.Join(t.TempDir(), "releases.json")
		if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		var err error
		if rel, err = releases.Load(path, false); err != nil {
			t.Fatal(err)
		}
	}
	hasher, _ := identity.NewHasher(bytes.Repeat([]byte{5}, identity.PepperLen))
	gw := gateways.New(gateways.Config{Store: store, Hasher: hasher, Releases: rel,
		ReadModels: testutil.ReadModels{RM: runner}})
	app := commands.NewApplication(commands.Capabilities{Gateways: gw})
	s, logs := newTestServer(t, Deps{Auth: gwPrincipals, App: &app})
	return &gwEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), logs: logs, store: store}
}

// do sends one request (as principal, with bearer when not empty) and
// checks the answer against the served OpenAPI document.
func (e *gwEnv) do(principal, bearer, method, path, body string) (*http.Response, map[string]any) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, raw := call(e.t, e.s, e.v, principal, req)
	var out map[string]any
	if len(raw) > 0 {
		out = jsonObject(e.t, method+" "+path, raw)
	}
	return resp, out
}

func gwErrReason(body map[string]any) (code, reason string) {
	e, _ := body["error"].(map[string]any)
	code, _ = e["code"].(string)
	reason, _ = e["reason"].(string)
	return code, reason
}

const gwManifest = `{"releases":[{"version":"2.0.0","channel":"stable","url":"https://dl.example/2.0.0","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","publishedAt":"2026-03-04T05:06:07Z"}]}`

func TestGatewayRoutesEnrollReleasesAndRevoke(t *testing.T) {
	e := newGWEnv(t, gwManifest)
	resp, code := e.do("admin", "", "POST", "/v1/gateways/enrollment-codes", `{"name":"lab","ttlSeconds":600}`)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create code: %d %v", resp.StatusCode, code)
	}
	secretCode := code["code"].(string)
	resp, enrolled := e.do("", "", "POST", "/gateway/v1/enroll", `{"code":"`+secretCode+`","version":"1.0.0"}`)
	if resp.StatusCode != http.StatusCreated || enrolled["orgId"] != "org_a" || enrolled["name"] != "lab" {
		t.Fatalf("enroll: %d %v", resp.StatusCode, enrolled)
	}
	cred, id := enrolled["credential"].(string), enrolled["gatewayId"].(string)

	// The exchange retried (its answer lost), the gateway not connected
	// yet: the same gateway and credential.
	resp, again := e.do("", "", "POST", "/gateway/v1/enroll", `{"code":"`+secretCode+`"}`)
	if resp.StatusCode != http.StatusCreated || again["credential"] != cred || again["gatewayId"] != id {
		t.Errorf("enroll again with the code: %d %v; want the first answer", resp.StatusCode, again)
	}
	resp, bad := e.do("", "", "POST", "/gateway/v1/enroll", `{"code":"pfe_forged"}`)
	if c, r := gwErrReason(bad); resp.StatusCode != http.StatusUnauthorized || c != "unauthorized" || r != "invalid_token" {
		t.Errorf("enroll with a malformed code: %d %v", resp.StatusCode, bad)
	}

	resp, rel := e.do("", cred, "GET", "/gateway/v1/releases/current", "")
	if resp.StatusCode != http.StatusOK || rel["version"] != "2.0.0" || rel["url"] != "https://dl.example/2.0.0" {
		t.Fatalf("current release: %d %v", resp.StatusCode, rel)
	}
	if resp, body := e.do("", cred, "GET", "/gateway/v1/releases/current?channel=beta", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a channel without releases: %d %v", resp.StatusCode, body)
	}
	if resp, body := e.do("", cred, "GET", "/gateway/v1/releases/current?channel=NO", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a malformed channel: %d %v", resp.StatusCode, body)
	}
	for name, c := range map[string]struct{ bearer, reason string }{
		"none":      {"", "missing_credentials"},
		"malformed": {"pfg_x", "malformed_credentials"},
		"api key":   {"pbk_x", "malformed_credentials"},
	} {
		resp, body := e.do("", c.bearer, "GET", "/gateway/v1/releases/current", "")
		if code, reason := gwErrReason(body); resp.StatusCode != http.StatusUnauthorized || code != "unauthorized" || reason != c.reason {
			t.Errorf("releases with %s credential: %d %v", name, resp.StatusCode, body)
		}
	}
	if resp, _ := e.do("other-org", "", "DELETE", "/v1/gateways/"+id, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("revoke as another organisation: %d; want 404", resp.StatusCode)
	}
	if resp, _ := e.do("admin", "", "DELETE", "/v1/gateways/"+id, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	resp, body := e.do("", cred, "GET", "/gateway/v1/releases/current", "")
	if _, reason := gwErrReason(body); resp.StatusCode != http.StatusUnauthorized || reason != "revoked_key" {
		t.Errorf("releases after revocation: %d %v", resp.StatusCode, body)
	}
	// The code of a revoked gateway is refused as a malformed one is.
	resp, used := e.do("", "", "POST", "/gateway/v1/enroll", `{"code":"`+secretCode+`"}`)
	if resp.StatusCode != http.StatusUnauthorized || used["error"].(map[string]any)["message"] != bad["error"].(map[string]any)["message"] {
		t.Errorf("enroll with the revoked gateway's code: %d %v; want the malformed code's answer", resp.StatusCode, used)
	}
	resp, list := e.do("admin", "", "GET", "/v1/gateways", "")
	gws, _ := list["gateways"].([]any)
	if resp.StatusCode != http.StatusOK || len(gws) != 1 || gws[0].(map[string]any)["state"] != "revoked" || gws[0].(map[string]any)["version"] != "1.0.0" {
		t.Errorf("list: %d %v", resp.StatusCode, list)
	}
	if resp, list := e.do("other-org", "", "GET", "/v1/gateways", ""); resp.StatusCode != http.StatusOK || len(list["gateways"].([]any)) != 0 {
		t.Errorf("list as another organisation: %d %v", resp.StatusCode, list)
	}

	// Neither the code nor the credential is in the access log.
	logs := e.logs.String()
	if !strings.Contains(logs, "/gateway/v1/enroll") {
		t.Fatalf("no access log line for enrollment: %q", logs)
	}
	for _, secret := range []string{secretCode, cred, cred[len(cred)-33:], secretCode[len(secretCode)-33:]} {
		if strings.Contains(logs, secret) {
			t.Errorf("a secret %.8s… is in the logs", secret)
		}
	}
}

func TestGatewayRoutesAreForAdminsOnly(t *testing.T) {
	e := newGWEnv(t, "")
	for _, who := range []string{"member", "key", "app"} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/gateways/enrollment-codes", `{}`},
			{"GET", "/v1/gateways", ""},
			{"DELETE", "/v1/gateways/gw_0000000000000000000000000000000a", ""},
		} {
			resp, body := e.do(who, "", r.method, r.path, r.body)
			if code, _ := gwErrReason(body); resp.StatusCode != http.StatusForbidden || code != "permission_denied" {
				t.Errorf("%s %s as %s: %d %v; want 403 permission_denied", r.method, r.path, who, resp.StatusCode, body)
			}
		}
	}
	if resp, body := e.do("admin", "", "POST", "/v1/gateways/enrollment-codes", `{"ttlSeconds":30}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a ttl under a minute: %d %v", resp.StatusCode, body)
	}
}

func TestGatewayReleasesWithoutAManifest(t *testing.T) {
	e := newGWEnv(t, "")
	_, code := e.do("admin", "", "POST", "/v1/gateways/enrollment-codes", `{}`)
	_, enrolled := e.do("", "", "POST", "/gateway/v1/enroll", `{"code":"`+code["code"].(string)+`"}`)
	if enrolled["name"] != "gateway" {
		t.Errorf("an unnamed gateway is named %v; want gateway", enrolled["name"])
	}
	if resp, body := e.do("", enrolled["credential"].(string), "GET", "/gateway/v1/releases/current", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("releases without a manifest: %d %v", resp.StatusCode, body)
	}
}
