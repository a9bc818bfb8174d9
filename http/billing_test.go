package httpapi

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// billingOrg has a customer at the provider; billingNewOrg has none.
var (
	billingOrg    = domain.NewID(domain.PrefixOrganisation)
	billingNewOrg = domain.NewID(domain.PrefixOrganisation)
)

// billingPrincipals are the callers of the billing route tests, chosen per
// request with the X-Test-Principal header.
var billingPrincipals = testPrincipals{
	"admin":     {OrgID: billingOrg, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"member":    {OrgID: billingOrg, Kind: domain.PrincipalConsole, UserID: "user_member", Role: domain.RoleMember, Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"key":       {OrgID: billingOrg, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes},
	"app":       {OrgID: billingOrg, Kind: domain.PrincipalApp, UserID: "user_admin", ClientID: "client_1", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"new-admin": {OrgID: billingNewOrg, Kind: domain.PrincipalConsole, UserID: "user_new", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

// billingEnv is a server in mode whose provisioning capability talks to
// provider (nil: none configured), with billingOrg's billing account
// holding a customer.
type billingEnv struct {
	t *testing.T
	s *Server
	v *apitest.Validator
}

func newBillingEnv(t *testing.T, mode string, provider payments.Provider) *billingEnv {
	t.Helper()
	store := eventstore.New(testutil.Pool(t), eventstore.WithUpcaster(domain.Events))
	ctx := testutil.Context(t)
	// Recorded again by each test: the same customer, so the account is
	// the same whichever test runs first.
	nes, err := eventstore.Encode(domain.Events, billingOrg,
		domain.Event(domain.BillingCustomerRecorded{OrgID: billingOrg, CustomerID: "cus_http_billing"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.AccountStream(billingOrg), eventstore.AnyVersion, nes...); err != nil {
		t.Fatal(err)
	}
	p := provisioning.New(provisioning.Config{Store: store, Payments: provider, PublicURL: "https://fleet.example"})
	app := commands.NewApplication(commands.Capabilities{Provisioning: p})
	s, _ := newTestServer(t, Deps{Mode: mode, Auth: billingPrincipals, App: &app})
	return &billingEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler())}
}

// do sends one request as principal, checks the answer against the served
// document and returns the status and the decoded body.
func (e *billingEnv) do(principal, method, path string) (int, http.Header, map[string]any) {
	e.t.Helper()
	resp, raw := call(e.t, e.s, e.v, principal, httptest.NewRequest(method, path, nil))
	return resp.StatusCode, resp.Header, jsonObject(e.t, method+" "+path, raw)
}

func (e *billingEnv) wantError(principal, method, path string, status int, code domain.Code) map[string]any {
	e.t.Helper()
	got, _, body := e.do(principal, method, path)
	errBody, _ := body["error"].(map[string]any)
	if got != status || errBody["code"] != string(code) {
		e.t.Fatalf("%s %s as %s: got %d %v; want %d %s", method, path, principal, got, body, status, code)
	}
	return errBody
}

func TestBillingRoutesAgainstStripeMock(t *testing.T) {
	e := newBillingEnv(t, "hosted", payments.New(payments.Config{SecretKey: "sk_test_http", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1}))

	// Either role reads the next invoice (stripe-mock's preview).
	for _, who := range []string{"admin", "member"} {
		status, h, inv := e.do(who, "GET", "/v1/billing/upcoming")
		if status != http.StatusOK || inv["amountDue"] != float64(1000) || inv["currency"] != "usd" || inv["nextInvoiceAt"] == nil {
			t.Fatalf("upcoming as %s: got %d %v; want stripe-mock's 1000 usd preview", who, status, inv)
		}
		if lines, _ := inv["lines"].([]any); len(lines) != 1 {
			t.Errorf("upcoming as %s: got lines %v; want one", who, inv["lines"])
		}
		if h.Get("Cache-Control") != "no-store" {
			t.Errorf("upcoming: got Cache-Control %q; want no-store", h.Get("Cache-Control"))
		}
	}
	// An organisation with no customer yet: the empty answer.
	status, _, inv := e.do("new-admin", "GET", "/v1/billing/upcoming")
	if lines, _ := inv["lines"].([]any); status != http.StatusOK || inv["amountDue"] != float64(0) || inv["nextInvoiceAt"] != nil || lines == nil || len(lines) != 0 {
		t.Errorf("upcoming with no customer: got %d %v; want amountDue 0, nextInvoiceAt null, lines []", status, inv)
	}

	// The admin opens the portal.
	status, h, ps := e.do("admin", "POST", "/v1/billing/portal-sessions")
	if url, _ := ps["url"].(string); status != http.StatusOK || !strings.HasPrefix(url, "https://") || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("portal as admin: got %d %v; want 200 with the provider's url, no-store", status, ps)
	}
	// A member may not; an organisation with no customer has nothing to manage.
	e.wantError("member", "POST", "/v1/billing/portal-sessions", http.StatusForbidden, domain.CodePermissionDenied)
	errBody := e.wantError("new-admin", "POST", "/v1/billing/portal-sessions", http.StatusConflict, domain.CodeWrongState)
	if errBody["state"] != provisioning.NoBillingAccountState || errBody["retryable"] != false {
		t.Errorf("portal with no customer: got %v; want state %s, not retryable", errBody, provisioning.NoBillingAccountState)
	}
}

// TestBillingRoutesRefuseKeysAndApps: billing is never a key's (spec 4.1
// rule 5), and an app is sent to the console's billing page (spec 5.2).
func TestBillingRoutesRefuseKeysAndApps(t *testing.T) {
	e := newBillingEnv(t, "hosted", payments.New(payments.Config{SecretKey: "sk_test_http", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1}))
	for _, r := range [][2]string{{"GET", "/v1/billing/upcoming"}, {"POST", "/v1/billing/portal-sessions"}} {
		e.wantError("key", r[0], r[1], http.StatusForbidden, domain.CodePermissionDenied)
		errBody := e.wantError("app", r[0], r[1], http.StatusForbidden, domain.CodePermissionDenied)
		if errBody["where"] != "the console's billing page" {
			t.Errorf("%s %s as an app: got where %v; want the console's billing page", r[0], r[1], errBody["where"])
		}
	}
}

func TestBillingRoutesWithoutProvider(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name      string
		provider  payments.Provider
		retryable bool
	}{
		{"none configured", nil, false},
		{"provider does not answer", payments.New(payments.Config{SecretKey: "sk_test_down", APIBase: down, MaxNetworkRetries: -1}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBillingEnv(t, "hosted", tc.provider)
			for _, r := range [][2]string{{"GET", "/v1/billing/upcoming"}, {"POST", "/v1/billing/portal-sessions"}} {
				errBody := e.wantError("admin", r[0], r[1], http.StatusServiceUnavailable, domain.CodeCheckoutUnavailable)
				if errBody["retryable"] != tc.retryable {
					t.Errorf("%s %s: got retryable %v; want %v", r[0], r[1], errBody["retryable"], tc.retryable)
				}
			}
		})
	}
}

// TestBillingRoutesNotServedLocally: a local deployment does not mount
// billing; both paths answer 404 not_found as any path not served.
func TestBillingRoutesNotServedLocally(t *testing.T) {
	e := newBillingEnv(t, "local", payments.New(payments.Config{SecretKey: "sk_test_http", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1}))
	for _, r := range [][2]string{{"GET", "/v1/billing/upcoming"}, {"POST", "/v1/billing/portal-sessions"}} {
		errBody := e.wantError("admin", r[0], r[1], http.StatusNotFound, domain.CodeNotFound)
		if errBody["message"] != "nothing is served at this path" {
			t.Errorf("%s %s locally: got %v; want the answer of a path not served", r[0], r[1], errBody)
		}
	}
}
