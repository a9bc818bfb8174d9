package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/backends"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// fulPrincipals are the callers of the fulfilment route tests, chosen per
// request with the X-Test-Principal header.
var fulPrincipals = testPrincipals{
	"admin":  {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ada", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"member": {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_mel", Role: domain.RoleMember, Scopes: domain.AllScopes},
	"key":    {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes},
	"reader": {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_2", Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"app":    {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_ada", ClientID: "client_1", Scopes: domain.AllScopes},
	"other":  {OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

const fulWebhookSecret = "whsec_http_fulfilments"

// fulHTTPEnv is a hosted server whose fulfilment routes and payment
// webhook run against a real database, with the fleet and fulfilments
// read models running, on an injected clock.
type fulHTTPEnv struct {
	t     *testing.T
	s     *Server
	v     *apitest.Validator
	store *eventstore.Store
	now   time.Time
}

func newFulHTTPEnv(t *testing.T) *fulHTTPEnv {
	t.Helper()
	_, store := testStore(t, 8)
	runner := runProjections(t, store, append(projections.Fleet(), projections.Fulfilments{})...)
	e := &fulHTTPEnv{t: t, store: store, now: time.Now().UTC().Truncate(time.Second)}
	fleet := fleet.New(fleet.Config{Store: store, ReadModels: runner, NewSimState: backends.NewSimState})
	p := provisioning.New(provisioning.Config{Store: store, Devices: fleet, WebhookSecret: fulWebhookSecret,
		Now:        func() time.Time { return e.now },
		ReadModels: testutil.ReadModels{RM: runner}})
	app := commands.NewApplication(commands.Capabilities{Fleet: fleet, Provisioning: p})
	e.s, _ = newTestServer(t, Deps{Mode: "hosted", Auth: fulPrincipals, App: &app})
	e.v = apitest.FromHandler(t, e.s.Handler())
	return e
}

// do sends one request as principal and checks the answer against the
// served OpenAPI document.
func (e *fulHTTPEnv) do(principal, method, path string) (int, map[string]any) {
	e.t.Helper()
	resp, raw := call(e.t, e.s, e.v, principal, httptest.NewRequest(method, path, nil))
	return resp.StatusCode, jsonObject(e.t, method+" "+path, raw)
}

// post delivers a provider event to POST /webhooks/stripe with the given
// Stripe-Signature and checks the answer against the document.
func (e *fulHTTPEnv) post(payload []byte, signature string) (int, map[string]any) {
	e.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(string(payload)))
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set("Stripe-Signature", signature)
	}
	resp, raw := call(e.t, e.s, e.v, "", req)
	return resp.StatusCode, jsonObject(e.t, "webhook", raw)
}

func (e *fulHTTPEnv) sign(payload []byte) string {
	return payments.SignWebhookForTest(payload, fulWebhookSecret, e.now)
}

// order records an open checkout of org for n phones of choice and returns
// the order and fulfilment ids.
func (e *fulHTTPEnv) order(org string, choice domain.PurchaseChoice, n int) (string, []string) {
	e.t.Helper()
	order := domain.NewID(domain.PrefixOrder)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = domain.NewID(domain.PrefixFulfilment)
	}
	choice.Quantity = n
	news, err := eventstore.Encode[domain.Event](domain.Events, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, FulfilmentIDs: ids, Choice: choice, Currency: "usd", UnitAmount: 2900,
			RequestDigest: "test", By: domain.Actor{Kind: domain.ActorUser, ID: "u_ada"}, At: e.now},
		domain.CheckoutOpened{OrderID: order, SessionID: "cs_" + order, CheckoutURL: "https://pay.test/x", ExpiresAt: e.now.Add(time.Hour), At: e.now})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Append(testutil.Context(e.t), domain.AccountStream(org), eventstore.AnyVersion, news...); err != nil {
		e.t.Fatal(err)
	}
	return order, ids
}

// providerEvent renders a Stripe event whose object is obj.
func (e *fulHTTPEnv) providerEvent(id, typ string, obj map[string]any) []byte {
	e.t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": e.now.Unix(), "livemode": false,
		"api_version": "2024-06-20", "data": map[string]any{"object": obj}})
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func checkoutPaid(org, order, mode string) map[string]any {
	return map[string]any{"id": "cs_" + order, "object": "checkout.session", "mode": mode, "status": "complete",
		"payment_status": "paid", "customer": "cus_" + org, "subscription": "sub_" + order, "client_reference_id": order,
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}}
}

// pay delivers the payment of an order and returns its fulfilment ids.
func (e *fulHTTPEnv) pay(org string, choice domain.PurchaseChoice, n int) []string {
	e.t.Helper()
	order, ids := e.order(org, choice, n)
	status, body := e.post(e.providerEvent("evt_"+order, payments.EventCheckoutCompleted, checkoutPaid(org, order, "subscription")),
		e.sign(e.providerEvent("evt_"+order, payments.EventCheckoutCompleted, checkoutPaid(org, order, "subscription"))))
	if status != http.StatusOK || body["outcome"] != "applied" {
		e.t.Fatalf("payment: %d %v", status, body)
	}
	return ids
}

func fulErrorOf(body map[string]any) map[string]any {
	m, _ := body["error"].(map[string]any)
	return m
}

// TestFulfilmentRoutes: the list, estimate history and renewal status of a
// paid order; Cancel, Return and cancel-renewal with their refusals; who
// may call each; every answer checked against the document.
func TestFulfilmentRoutes(t *testing.T) {
	e := newFulHTTPEnv(t)
	monthly := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "galaxy-s24", Region: "GB"}
	ids := e.pay("org_a", monthly, 3) // GB has two units: the third awaits

	status, page := e.do("admin", "GET", "/v1/fulfilments?limit=2")
	list, _ := page["fulfilments"].([]any)
	if status != http.StatusOK || len(list) != 2 || page["nextCursor"] == nil {
		t.Fatalf("first page: %d %v", status, page)
	}
	status, page = e.do("member", "GET", "/v1/fulfilments?limit=2&cursor="+page["nextCursor"].(string))
	if list, _ := page["fulfilments"].([]any); status != http.StatusOK || len(list) != 1 || page["nextCursor"] != nil {
		t.Fatalf("second page: %d %v", status, page)
	}
	status, page = e.do("key", "GET", "/v1/fulfilments?state=awaiting_provisioning")
	list, _ = page["fulfilments"].([]any)
	if status != http.StatusOK || len(list) != 1 {
		t.Fatalf("awaiting: %d %v", status, page)
	}
	waiting := list[0].(map[string]any)
	if waiting["fulfilmentId"] != ids[2] || waiting["deviceId"] != nil || waiting["estimatedBy"] == nil || waiting["model"] != "galaxy-s24" {
		t.Errorf("the awaiting phone: %v", waiting)
	}
	for _, bad := range []string{"?state=lost", "?limit=0", "?cursor=nonsense"} {
		if status, body := e.do("admin", "GET", "/v1/fulfilments"+bad); status != http.StatusBadRequest || fulErrorOf(body)["code"] != "invalid_argument" {
			t.Errorf("%s: %d %v; want 400 invalid_argument", bad, status, body)
		}
	}
	if status, body := e.do("reader", "GET", "/v1/fulfilments"); status != http.StatusForbidden || fulErrorOf(body)["code"] != "permission_denied" {
		t.Errorf("a key without orders:place: %d %v", status, body)
	}
	if status, body := e.do("app", "GET", "/v1/fulfilments"); status != http.StatusForbidden || fulErrorOf(body)["code"] != "permission_denied" {
		t.Errorf("an OAuth app: %d %v", status, body)
	}

	status, hist := e.do("admin", "GET", "/v1/fulfilments/"+ids[2]+"/estimate-history")
	if est, _ := hist["estimates"].([]any); status != http.StatusOK || len(est) != 1 || hist["state"] != "awaiting_provisioning" {
		t.Errorf("estimate history: %d %v", status, hist)
	}
	status, rs := e.do("admin", "GET", "/v1/fulfilments/"+ids[0]+"/renewal-status")
	if status != http.StatusOK || rs["renews"] != true || rs["nextRenewalAt"] == nil || rs["endsAt"] != nil {
		t.Errorf("renewal status: %d %v", status, rs)
	}

	// Changes: a signed-in admin only.
	for _, who := range []string{"member", "key", "app"} {
		for _, action := range []string{"cancel", "return", "cancel-renewal"} {
			if status, body := e.do(who, "POST", "/v1/fulfilments/"+ids[0]+"/"+action); status != http.StatusForbidden ||
				fulErrorOf(body)["code"] != "permission_denied" {
				t.Errorf("%s %s: %d %v; want 403 permission_denied", who, action, status, body)
			}
		}
	}
	status, body := e.do("admin", "POST", "/v1/fulfilments/"+ids[2]+"/return")
	if status != http.StatusConflict || fulErrorOf(body)["code"] != "wrong_state" || fulErrorOf(body)["state"] != "awaiting_provisioning" {
		t.Errorf("returning a phone never delivered: %d %v", status, body)
	}
	status, rs = e.do("admin", "POST", "/v1/fulfilments/"+ids[1]+"/cancel-renewal")
	if status != http.StatusOK || rs["renews"] != false || rs["renewalCancelled"] != true || rs["endsAt"] == nil {
		t.Errorf("cancel-renewal: %d %v", status, rs)
	}
	status, ret := e.do("admin", "POST", "/v1/fulfilments/"+ids[0]+"/return")
	if status != http.StatusOK || ret["state"] != "cancelled" || ret["deviceId"] != nil || ret["cancelledReason"] != "customer_return" {
		t.Errorf("return: %d %v", status, ret)
	}
	status, body = e.do("admin", "POST", "/v1/fulfilments/"+ids[0]+"/cancel")
	if status != http.StatusConflict || fulErrorOf(body)["state"] != "cancelled" {
		t.Errorf("cancelling a returned phone: %d %v", status, body)
	}
	status, body = e.do("admin", "POST", "/v1/fulfilments/"+ids[0]+"/cancel-renewal")
	if status != http.StatusConflict || fulErrorOf(body)["state"] != "cancelled" {
		t.Errorf("cancel-renewal of a returned phone: %d %v", status, body)
	}
	status, can := e.do("admin", "POST", "/v1/fulfilments/"+ids[2]+"/cancel")
	if status != http.StatusOK || can["cancelledReason"] != "cloud_undelivered" {
		t.Errorf("cancelling a cloud phone never delivered: %d %v", status, can)
	}

	// Another organisation's id answers as a missing one.
	missing := domain.NewID(domain.PrefixFulfilment)
	for _, path := range []string{"/estimate-history", "/renewal-status"} {
		s1, b1 := e.do("other", "GET", "/v1/fulfilments/"+ids[1]+path)
		s2, b2 := e.do("other", "GET", "/v1/fulfilments/"+missing+path)
		if s1 != http.StatusNotFound || s1 != s2 || fulErrorOf(b1)["message"] != fulErrorOf(b2)["message"] {
			t.Errorf("%s: another organisation's %d %v; missing %d %v", path, s1, b1, s2, b2)
		}
	}
	if status, body := e.do("other", "POST", "/v1/fulfilments/"+ids[1]+"/cancel"); status != http.StatusNotFound {
		t.Errorf("another organisation cancels: %d %v", status, body)
	}
	if _, rs := e.do("admin", "GET", "/v1/fulfilments/"+ids[1]+"/renewal-status"); rs["state"] != "provisioned" {
		t.Errorf("after another organisation's cancel: %v", rs)
	}
}

// TestPaymentWebhookRoute: POST /webhooks/stripe takes no bearer token; a
// signed event applies once (a redelivery answers duplicate); a bad
// signature is 400 invalid_signature, a signed body that is not an event
// 400 invalid_event, an event that cannot apply yet 503 not_settled; a
// local deployment does not serve the route.
func TestPaymentWebhookRoute(t *testing.T) {
	e := newFulHTTPEnv(t)
	order, ids := e.order("org_a", domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}, 1)
	paid := e.providerEvent("evt_http_paid", payments.EventCheckoutCompleted, checkoutPaid("org_a", order, "subscription"))

	if status, body := e.post(paid, payments.SignWebhookForTest(paid, "whsec_wrong", e.now)); status != http.StatusBadRequest ||
		fulErrorOf(body)["code"] != "invalid_signature" {
		t.Errorf("wrong secret: %d %v", status, body)
	}
	if status, body := e.post(paid, ""); status != http.StatusBadRequest || fulErrorOf(body)["code"] != "invalid_signature" {
		t.Errorf("no signature: %d %v", status, body)
	}
	junk := []byte(`{"not":"an event"}`)
	if status, body := e.post(junk, e.sign(junk)); status != http.StatusBadRequest || fulErrorOf(body)["code"] != "invalid_event" {
		t.Errorf("signed junk: %d %v", status, body)
	}
	ended := e.providerEvent("evt_http_ended", payments.EventSubscriptionDeleted, map[string]any{"id": "sub_" + order,
		"object": "subscription", "status": "canceled", "metadata": map[string]any{payments.MetaOrgID: "org_a", payments.MetaOrderID: order}})
	if status, body := e.post(ended, e.sign(ended)); status != http.StatusServiceUnavailable || fulErrorOf(body)["code"] != "not_settled" ||
		fulErrorOf(body)["retryable"] != true {
		t.Errorf("ended before paid: %d %v", status, body)
	}

	status, body := e.post(paid, e.sign(paid))
	if status != http.StatusOK || body["outcome"] != "applied" || body["eventId"] != "evt_http_paid" {
		t.Fatalf("paid: %d %v", status, body)
	}
	if status, body := e.post(paid, e.sign(paid)); status != http.StatusOK || body["outcome"] != "duplicate" {
		t.Errorf("redelivered: %d %v", status, body)
	}
	if _, f := e.do("admin", "GET", "/v1/fulfilments"); len(f["fulfilments"].([]any)) != 1 {
		t.Errorf("fulfilments after the payment: %v", f)
	}
	if status, body := e.post(ended, e.sign(ended)); status != http.StatusOK || body["outcome"] != "applied" {
		t.Errorf("ended after paid: %d %v", status, body)
	}
	if _, rs := e.do("admin", "GET", "/v1/fulfilments/"+ids[0]+"/renewal-status"); rs["state"] != "cancelled" || rs["renews"] != false {
		t.Errorf("after the subscription ended: %v", rs)
	}

	// A local deployment: not mounted, the not_found envelope.
	local, _ := newTestServer(t, Deps{})
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(string(paid)))
	req.Header.Set("Stripe-Signature", e.sign(paid))
	resp, raw := apitest.Do(t, local.Handler(), req)
	e.v.Check(t, req, resp, raw)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(raw), `"not_found"`) {
		t.Errorf("local deployment: %d %s", resp.StatusCode, raw)
	}
}
