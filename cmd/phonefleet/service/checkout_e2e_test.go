package service

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// checkoutService runs the hosted service with stripe-mock as its payment
// provider and the fake identity provider as its authorization server;
// extra settings are added to the environment.
func checkoutService(t *testing.T, idp *identitytest.IdP, extra map[string]string) (*App, string) {
	t.Helper()
	env := map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               "http://checkout.test",
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
		"SERVICE_STRIPE_SECRET_KEY":        "sk_test_checkoute2e",
		"SERVICE_STRIPE_API_BASE":          testutil.StripeMock(t),
	}
	for k, v := range extra {
		env[k] = v
	}
	return startApp(t, env)
}

// checkoutCall is one exchange with a running service, checked against
// the document it serves.
type checkoutCall struct {
	t    *testing.T
	base string
	v    *apitest.Validator
}

type checkoutReply struct {
	status int
	header http.Header
	body   map[string]any
}

func (c checkoutCall) do(token, method, path, body string, header ...string) checkoutReply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	check := httptest.NewRequest(method, path, strings.NewReader(body))
	if c.v != nil {
		c.v.Check(c.t, check, resp, raw)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return checkoutReply{resp.StatusCode, resp.Header, out}
}

// want fails unless the reply is status (and, for an error, code).
func (r checkoutReply) want(t *testing.T, status int, code string) checkoutReply {
	t.Helper()
	if r.status != status {
		t.Fatalf("got %d %v; want %d %s", r.status, r.body, status, code)
	}
	if code != "" {
		if e, _ := r.body["error"].(map[string]any); e["code"] != code {
			t.Fatalf("got %v; want code %s", r.body, code)
		}
	}
	return r
}

// TestCheckoutThroughTheService runs checkout end to end in hosted mode:
// who may buy what (a console admin, a member, the admin's OAuth app, API
// keys with and without orders:place), the price list for an app, the
// Idempotency-Key replay, and admission, every answer checked against the
// served OpenAPI document.
func TestCheckoutThroughTheService(t *testing.T) {
	idp := identitytest.New(t)
	a, base := checkoutService(t, idp, nil)
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	aud := "http://checkout.test/mcp"
	admin := idp.Console(t, aud, "user_a", "org_a", "admin")
	member := idp.Console(t, aud, "user_m", "org_a", "member")
	idp.SetRole("user_a", "org_a", "admin")
	idp.SetRole("user_m", "org_a", "member")
	app := idp.App(t, aud, "user_a", "org_a", "third-party")
	memberApp := idp.App(t, aud, "user_m", "org_a", "third-party")

	// The price list, for an app too.
	skus := c.do(app, "GET", "/v1/skus", "").want(t, http.StatusOK, "")
	if rows, _ := skus.body["skus"].([]any); len(rows) == 0 || skus.body["currency"] != "usd" {
		t.Fatalf("got %v; want the embedded price list", skus.body)
	}
	c.do(app, "GET", "/v1/admission", "").want(t, http.StatusForbidden, "permission_denied")
	adm := c.do(admin, "GET", "/v1/admission", "").want(t, http.StatusOK, "")
	if adm.body["checkoutAvailable"] != true {
		t.Fatalf("admission %v; want checkout available", adm.body)
	}

	// Who may buy.
	c.do(member, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusForbidden, "permission_denied")
	c.do(memberApp, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusForbidden, "permission_denied")
	c.do(app, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"payg"}`).want(t, http.StatusForbidden, "permission_denied")

	first := c.do(admin, "POST", "/v1/checkout-sessions", "", "Idempotency-Key", "e2e-1").want(t, http.StatusOK, "")
	if first.header.Get("Idempotent-Replayed") != "" || !strings.HasPrefix(first.body["checkoutUrl"].(string), "https://") {
		t.Fatalf("got %v %v; want a page, not replayed", first.body, first.header)
	}
	again := c.do(admin, "POST", "/v1/checkout-sessions", "", "Idempotency-Key", "e2e-1").want(t, http.StatusOK, "")
	if again.header.Get("Idempotent-Replayed") != "true" || again.body["orderId"] != first.body["orderId"] || again.body["checkoutUrl"] != first.body["checkoutUrl"] {
		t.Fatalf("got %v; want %v replayed", again.body, first.body)
	}
	adm = c.do(admin, "GET", "/v1/admission", "").want(t, http.StatusOK, "")
	if open, _ := adm.body["openCheckout"].(map[string]any); open["orderId"] != first.body["orderId"] {
		t.Errorf("admission %v; want the open checkout %v", adm.body, first.body["orderId"])
	}
	// The admin's app buys a prepaid plan (restarting the open attempt).
	viaApp := c.do(app, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusOK, "")
	if viaApp.body["orderId"] == first.body["orderId"] {
		t.Error("the app's purchase replayed the admin's")
	}

	// API keys: orders:place buys prepaid only; without it, nothing.
	mint := func(scopes string) string {
		t.Helper()
		r := c.do(admin, "POST", "/v1/api-keys", `{"name":"checkout","scopes":`+scopes+`}`).want(t, http.StatusCreated, "")
		tok, _ := r.body["token"].(string)
		if tok == "" {
			t.Fatalf("mint: got %v", r.body)
		}
		return tok
	}
	orders, reader := mint(`["orders:place"]`), mint(`["devices:read"]`)
	c.do(reader, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusForbidden, "permission_denied")
	c.do(orders, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"payg"}`).want(t, http.StatusForbidden, "permission_denied")
	byKey := c.do(orders, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusOK, "")
	if ids, _ := byKey.body["fulfilmentIds"].([]any); len(ids) != 1 || ids[0] != byKey.body["orderId"] {
		t.Errorf("got %v; want one phone keeping the order id", byKey.body)
	}
	// The admin herself sets up pay-as-you-go.
	c.do(admin, "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"payg"}`).want(t, http.StatusOK, "")
	// Another organisation sees none of it.
	other := c.do(idp.Console(t, aud, "user_b", "org_b", "admin"), "GET", "/v1/admission", "").want(t, http.StatusOK, "")
	if other.body["openCheckout"] != nil {
		t.Errorf("organisation B's admission %v; want nothing open", other.body)
	}
}

// TestCheckoutReverificationThroughTheService requires a fresh identity
// check: the console admin's step-up token (x-service-step-up, signed by
// the same authorization server) passes when its auth_time is under 10
// minutes old and names the same person; an API key is never asked.
func TestCheckoutReverificationThroughTheService(t *testing.T) {
	idp := identitytest.New(t)
	a, base := checkoutService(t, idp, map[string]string{"SERVICE_REQUIRE_REVERIFICATION": "true"})
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	aud := "http://checkout.test/mcp"
	admin := idp.Console(t, aud, "user_a", "org_a", "admin")
	stepUp := func(sub string, authTime time.Time) string {
		claims := idp.Claims(aud, sub, "org_a", time.Now())
		claims["azp"], claims["auth_time"] = "console", authTime.Unix()
		return idp.Sign(t, claims)
	}
	day := `{"sku":"emulator","billing":"day"}`
	r := c.do(admin, "POST", "/v1/checkout-sessions", day).want(t, http.StatusForbidden, "reverification_required")
	if e := r.body["error"].(map[string]any); e["retryable"] != true || e["maxAgeMinutes"] != float64(10) {
		t.Errorf("got %v; want retryable with maxAgeMinutes 10", e)
	}
	c.do(admin, "POST", "/v1/checkout-sessions", day, "x-service-step-up", stepUp("user_a", time.Now().Add(-11*time.Minute))).
		want(t, http.StatusForbidden, "reverification_required")
	c.do(admin, "POST", "/v1/checkout-sessions", day, "x-service-step-up", stepUp("user_other", time.Now())).
		want(t, http.StatusForbidden, "reverification_required")
	foreign := identitytest.New(t) // another authorization server's token
	fc := foreign.Claims(aud, "user_a", "org_a", time.Now())
	fc["auth_time"] = time.Now().Unix()
	c.do(admin, "POST", "/v1/checkout-sessions", day, "x-service-step-up", foreign.Sign(t, fc)).
		want(t, http.StatusForbidden, "reverification_required")
	c.do(admin, "POST", "/v1/checkout-sessions", day, "x-service-step-up", stepUp("user_a", time.Now().Add(-2*time.Minute))).
		want(t, http.StatusOK, "")

	r = c.do(admin, "POST", "/v1/api-keys", `{"name":"orders","scopes":["orders:place"]}`).want(t, http.StatusCreated, "")
	c.do(r.body["token"].(string), "POST", "/v1/checkout-sessions", day).want(t, http.StatusOK, "")
}

// TestCheckoutLocalServiceAnswers404 runs a local deployment: checkout is
// not served (404 not_found), the price list is.
func TestCheckoutLocalServiceAnswers404(t *testing.T) {
	_, base := startApp(t, map[string]string{
		"SERVICE_ADDR":              "127.0.0.1:0",
		"DATABASE_URL":              testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":          t.TempDir(),
		"SERVICE_SIM_DEVICES":       "0",
		"SERVICE_STRIPE_SECRET_KEY": "sk_test_local",
		"SERVICE_STRIPE_API_BASE":   testutil.StripeMock(t),
	})
	c := checkoutCall{t: t, base: base}
	r := c.do("", "POST", "/v1/checkout-sessions", `{"sku":"emulator","billing":"day"}`).want(t, http.StatusNotFound, "not_found")
	if e := r.body["error"].(map[string]any); e["message"] != domain.Errorf(domain.CodeNotFound, "nothing is served at this path").Message {
		t.Errorf("got %v; want the answer of a path that is not served", e)
	}
	c.do("", "GET", "/v1/skus", "").want(t, http.StatusOK, "")
	adm := c.do("", "GET", "/v1/admission", "").want(t, http.StatusOK, "")
	if adm.body["checkoutBlocked"] != "checkout_not_served" {
		t.Errorf("local admission %v; want checkout_not_served", adm.body)
	}
}
