package service

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// tenancyClient talks to a running hosted service as one organisation's
// admin.
type tenancyClient struct {
	t     *testing.T
	base  string
	token string
	// app is the running service, for fixtures that need an operator
	// command (devices arrive by `devices add`, not by a route).
	app *App
	// org is the organisation the token names.
	org string
}

// do sends a request and returns the status, headers and body.
func (c *tenancyClient) do(method, path, body string) (int, http.Header, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// tenancyFixture creates, as organisation A (c), what one route template's
// path parameters name, and returns the parameter values and, by method,
// a request body that would be accepted for A's own resource (so a refusal
// for B is tenancy, not validation).
type tenancyFixture func(c *tenancyClient) (params map[string]string, bodies map[string]string)

// tenancyFixtures are keyed by route template as mounted
// ("/v1/api-keys/{id}"). Every area adds its own from an init function in
// its own test file (internal/app/<area>_tenancy_test.go); a mounted route
// with path parameters and no fixture fails TestTenancyEveryRoute.
var tenancyFixtures = map[string]tenancyFixture{}

func init() {
	apiKey := func(c *tenancyClient) (map[string]string, map[string]string) {
		status, _, body := c.do("POST", "/v1/api-keys", `{"name":"tenancy","scopes":["devices:read"]}`)
		if status != http.StatusCreated {
			c.t.Fatalf("mint a key for organisation A: got %d %s", status, body)
		}
		var out struct {
			Key struct {
				ID string `json:"id"`
			} `json:"key"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			c.t.Fatal(err)
		}
		return map[string]string{"id": out.Key.ID}, map[string]string{"PATCH": `{"expiresInDays":5}`}
	}
	tenancyFixtures["/v1/api-keys/{id}"] = apiKey
	tenancyFixtures["/v1/api-keys/{id}/rotate"] = apiKey

	// Webhooks through their public API (spec 4.4): an IP-literal public
	// receiver needs no name resolution.
	webhook := func(c *tenancyClient) (map[string]string, map[string]string) {
		status, _, body := c.do("POST", "/v1/webhooks", `{"url":"https://93.184.216.34/in","events":["run.ended"]}`)
		if status != http.StatusCreated {
			c.t.Fatalf("create a webhook for organisation A: got %d %s", status, body)
		}
		var out struct {
			Webhook struct {
				ID string `json:"webhookId"`
			} `json:"webhook"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.Webhook.ID == "" {
			c.t.Fatalf("create a webhook for organisation A: no webhookId in %s", body)
		}
		return map[string]string{"webhookId": out.Webhook.ID}, map[string]string{"PATCH": `{"enabled":false}`}
	}
	for _, p := range []string{"/v1/webhooks/{webhookId}", "/v1/webhooks/{webhookId}/rotate", "/v1/webhooks/{webhookId}/test",
		"/v1/webhooks/{webhookId}/deliveries"} {
		tenancyFixtures[p] = webhook
	}
}

// startHosted runs the whole service in hosted mode against a fake identity
// provider and returns its base URL.
func startHosted(t *testing.T, idp *identitytest.IdP) (*App, string) {
	t.Helper()
	env := map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               "http://tenancy.test",
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
	}
	return startApp(t, env)
}

var (
	templateParam = regexp.MustCompile(`\{([^{}]+)\}`)
	domainID      = regexp.MustCompile(`^([a-z]+)_[0-9a-f]{32}$`)
)

// neverExisting returns an id shaped as v that names nothing: a fresh id of
// the same prefix, or a random string of the same length and classes.
func neverExisting(v string) string {
	if m := domainID.FindStringSubmatch(v); m != nil {
		return domain.NewID(m[1])
	}
	b := []byte(v)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = byte('a' + rand.IntN(26))
		case c >= 'A' && c <= 'Z':
			b[i] = byte('A' + rand.IntN(26))
		case c >= '0' && c <= '9':
			b[i] = byte('0' + rand.IntN(10))
		}
	}
	return string(b)
}

func fill(template string, params map[string]string) string {
	return templateParam.ReplaceAllStringFunc(template, func(p string) string {
		return params[p[1:len(p)-1]]
	})
}

// comparable returns the parts of an answer that must not depend on
// whether an id names another organisation's resource or nothing: the
// status, the headers but the request id, date and rate-limit counters,
// and the body with the ids written as <id>.
func comparable(status int, h http.Header, body []byte, ids []string) string {
	h = h.Clone()
	for _, k := range []string{"X-Request-Id", "Date", "Ratelimit-Remaining", "Ratelimit-Reset"} {
		h.Del(k)
	}
	for _, id := range ids {
		body = bytes.ReplaceAll(body, []byte(id), []byte("<id>"))
	}
	var keys []string
	for k := range h {
		keys = append(keys, k+": "+strings.Join(h[k], ", "))
	}
	slices.Sort(keys)
	return http.StatusText(status) + "\n" + strings.Join(keys, "\n") + "\n" + string(body)
}

// TestTenancyEveryRoute walks every route mounted on the real router. For
// each route with path parameters it fills them with ids of resources
// organisation A created, calls as organisation B, and requires the answer
// to equal B's answer for ids that never existed (same status, headers and
// body apart from the ids). Every answer to B, for every route, must be
// free of A's ids.
func TestTenancyEveryRoute(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startHosted(t, idp)
	aud := "http://tenancy.test/mcp"
	orgA := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_a", "org_a", "admin"), app: a, org: "org_a"}
	orgB := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_b", "org_b", "admin")}

	routes := apitest.RoutesOf(a.server.Router())
	if len(routes) == 0 {
		t.Fatal("got no mounted routes")
	}
	// Create every fixture first, so each answer to B is checked against
	// all of A's ids.
	type filled struct {
		params, bodies map[string]string
	}
	fixtures := map[string]filled{}
	var idsOfA []string
	for _, r := range routes {
		if !strings.Contains(r.Path, "{") {
			continue
		}
		if _, done := fixtures[r.Path]; done {
			continue
		}
		fx, ok := tenancyFixtures[r.Path]
		if !ok {
			continue
		}
		params, bodies := fx(orgA)
		fixtures[r.Path] = filled{params, bodies}
		for _, v := range params {
			idsOfA = append(idsOfA, v)
		}
	}

	for _, r := range routes {
		t.Run(r.String(), func(t *testing.T) {
			orgB.t = t
			if !strings.Contains(r.Path, "{") {
				_, _, body := orgB.do(r.Method, r.Path, "")
				for _, id := range idsOfA {
					if bytes.Contains(body, []byte(id)) {
						t.Fatalf("organisation B's answer names organisation A's %s:\n%s", id, body)
					}
				}
				return
			}
			fx, ok := fixtures[r.Path]
			if !ok {
				t.Skipf("no tenancy fixture for %s", r.Path)
			}
			missing := map[string]string{}
			var ids []string
			for k, v := range fx.params {
				missing[k] = neverExisting(v)
				ids = append(ids, v, missing[k])
			}
			body := fx.bodies[r.Method]
			st1, h1, b1 := orgB.do(r.Method, fill(r.Path, fx.params), body)
			st2, h2, b2 := orgB.do(r.Method, fill(r.Path, missing), body)
			if st1 < 400 {
				t.Fatalf("organisation B got %d for organisation A's %v:\n%s", st1, fx.params, b1)
			}
			got, want := comparable(st1, h1, b1, ids), comparable(st2, h2, b2, ids)
			if got != want {
				t.Fatalf("another organisation's id answers\n%s\nbut a never-existing id answers\n%s", got, want)
			}
			for _, id := range idsOfA {
				if bytes.Contains(b1, []byte(id)) && !slices.Contains(ids, id) {
					t.Fatalf("organisation B's answer names organisation A's %s:\n%s", id, b1)
				}
			}
		})
	}
	orgB.t = t
	var uncovered []string
	for _, r := range routes {
		if _, ok := fixtures[r.Path]; strings.Contains(r.Path, "{") && !ok && !slices.Contains(uncovered, r.Path) {
			uncovered = append(uncovered, r.Path)
		}
	}
	if len(uncovered) > 0 {
		t.Errorf("routes with path parameters but no tenancy fixture, so not proven tenant-safe: %s\n"+
			"add one per template to tenancyFixtures (from an init in internal/app/<area>_tenancy_test.go) that creates, "+
			"as organisation A, what its parameters name", strings.Join(uncovered, ", "))
	}

	// A itself still sees its resources: the fixtures were real.
	if st, _, body := orgA.do("GET", "/v1/api-keys", ""); st != http.StatusOK || !bytes.Contains(body, []byte(fixtures["/v1/api-keys/{id}"].params["id"])) {
		t.Fatalf("organisation A's own key list: got %d %s; want its key", st, body)
	}
}
