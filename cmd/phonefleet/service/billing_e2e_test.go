package service

import (
	"net/http"
	"strings"
	"testing"

	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// TestBillingThroughTheService runs the hosted service with stripe-mock as
// its payment provider. Organisation A's admin finds nothing to bill and no
// portal to open before buying; the first checkout makes A's customer at
// the provider; then either role of A reads the next invoice, the admin
// (only) opens the billing portal, and A's API key and an OAuth app of A's
// admin are refused. B, which never bought, still has nothing upcoming.
// Every answer matches the OpenAPI document.
func TestBillingThroughTheService(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startApp(t, map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               "http://billing.test",
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
		"SERVICE_STRIPE_SECRET_KEY":        "sk_test_billinge2e",
		"SERVICE_STRIPE_API_BASE":          testutil.StripeMock(t),
	})
	v := apitest.FromHandler(t, a.server.Handler())
	aud := "http://billing.test/mcp"
	adminA := idp.Console(t, aud, "user_a", "org_a", "admin")
	memberA := idp.Console(t, aud, "user_m", "org_a", "member")
	adminB := idp.Console(t, aud, "user_b", "org_b", "admin")
	idp.SetRole("user_a", "org_a", "admin")
	appA := idp.App(t, aud, "user_a", "org_a", "third-party")

	call := checkedCaller(t, v, base)
	errorOf := func(body map[string]any) map[string]any {
		e, _ := body["error"].(map[string]any)
		return e
	}
	empty := func(who string, inv map[string]any) {
		t.Helper()
		if lines, _ := inv["lines"].([]any); inv["amountDue"] != float64(0) || inv["nextInvoiceAt"] != nil || lines == nil || len(lines) != 0 {
			t.Errorf("%s: got %v; want the empty answer (amountDue 0, nextInvoiceAt null, lines [])", who, inv)
		}
	}

	// Before any checkout: nothing upcoming, no portal.
	empty("A before buying", call(adminA, "GET", "/v1/billing/upcoming", "", http.StatusOK))
	if e := errorOf(call(adminA, "POST", "/v1/billing/portal-sessions", "", http.StatusConflict)); e["code"] != "wrong_state" || e["state"] != "no_billing_account" {
		t.Fatalf("portal before buying: got %v; want wrong_state, state no_billing_account", e)
	}

	// The first checkout (the default price) makes A's customer.
	if s := call(adminA, "POST", "/v1/checkout-sessions", "", http.StatusOK); s["checkoutUrl"] == nil {
		t.Fatalf("checkout: got %v; want a payment page", s)
	}

	for _, who := range []struct{ name, token string }{{"admin", adminA}, {"member", memberA}} {
		inv := call(who.token, "GET", "/v1/billing/upcoming", "", http.StatusOK)
		if inv["amountDue"] != float64(1000) || inv["currency"] != "usd" || inv["nextInvoiceAt"] == nil {
			t.Errorf("upcoming as A's %s: got %v; want stripe-mock's preview of 1000 usd", who.name, inv)
		}
	}
	if ps := call(adminA, "POST", "/v1/billing/portal-sessions", "", http.StatusOK); !strings.HasPrefix(ps["url"].(string), "https://") {
		t.Errorf("portal as A's admin: got %v; want the provider's address", ps)
	}
	if e := errorOf(call(memberA, "POST", "/v1/billing/portal-sessions", "", http.StatusForbidden)); e["code"] != "permission_denied" {
		t.Errorf("portal as A's member: got %v; want permission_denied", e)
	}

	// A key of A's admin, holding every scope an admin may grant, and an
	// app of A's admin are refused both routes.
	minted := call(adminA, "POST", "/v1/api-keys", `{"name":"billing","scopes":["devices:read","orders:place"]}`, http.StatusCreated)
	key, _ := minted["token"].(string)
	if key == "" {
		t.Fatalf("mint a key: got %v", minted)
	}
	for _, r := range [][2]string{{"GET", "/v1/billing/upcoming"}, {"POST", "/v1/billing/portal-sessions"}} {
		if e := errorOf(call(key, r[0], r[1], "", http.StatusForbidden)); e["code"] != "permission_denied" {
			t.Errorf("%s %s with a key: got %v; want permission_denied", r[0], r[1], e)
		}
		if e := errorOf(call(appA, r[0], r[1], "", http.StatusForbidden)); e["code"] != "permission_denied" || e["where"] != "the console's billing page" {
			t.Errorf("%s %s as an app: got %v; want permission_denied naming the console's billing page", r[0], r[1], e)
		}
	}

	// B never bought: its answer is its own, empty.
	empty("B", call(adminB, "GET", "/v1/billing/upcoming", "", http.StatusOK))
}
