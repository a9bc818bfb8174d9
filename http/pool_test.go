package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// poolHTTPEnv is a hosted server whose application object is a running
// fleet with provisioning and a shared pool; callers are picked per
// request with the X-Test-Principal header.
type poolHTTPEnv struct {
	t     *testing.T
	fleet *fleettest.Env
	clock *fleettest.Clock
	app   commands.Application
	s     *Server
	v     *apitest.Validator
	orgA  string
	orgB  string
	who   map[string]domain.Auth
}

func newPoolHTTPEnv(t *testing.T, mode string, size, limit int) *poolHTTPEnv {
	t.Helper()
	clock := fleettest.NewClock(time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC))
	fl := fleettest.Start(t, fleettest.Options{Clock: clock})
	catalog := domain.DefaultCatalog()
	catalog.Pool = &domain.CatalogPool{Sku: domain.SkuEmulator, Size: size}
	p := provisioning.New(provisioning.Config{Store: fl.Store, ReadModels: fl.Runner, Catalog: catalog, Devices: fl.Fleet,
		PaygDeviceLimit: limit, Now: clock.Now})
	e := &poolHTTPEnv{t: t, fleet: fl, clock: clock, orgA: domain.NewID(domain.PrefixOrganisation), orgB: domain.NewID(domain.PrefixOrganisation)}
	e.app = commands.NewApplication(commands.Capabilities{Fleet: fl.Fleet, Provisioning: p})
	devices := []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct, domain.ScopeDevicesLease}
	e.who = map[string]domain.Auth{
		"admin-a":  {OrgID: e.orgA, Kind: domain.PrincipalConsole, UserID: "u_alice", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
		"member-a": {OrgID: e.orgA, Kind: domain.PrincipalConsole, UserID: "u_mo", Role: domain.RoleMember, Scopes: devices},
		"app-a":    {OrgID: e.orgA, Kind: domain.PrincipalApp, UserID: "u_alice", ClientID: "client_x", Scopes: devices},
		"key-a":    {OrgID: e.orgA, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes},
		"admin-b":  {OrgID: e.orgB, Kind: domain.PrincipalConsole, UserID: "u_bob", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	}
	e.s, _ = newTestServer(t, Deps{Mode: mode, Auth: testPrincipals(e.who), App: &e.app})
	e.v = apitest.FromHandler(t, e.s.Handler())
	return e
}

// grant gives org pay-as-you-go access as the payment webhook records it.
func (e *poolHTTPEnv) grant(org string) {
	e.t.Helper()
	order := domain.NewID(domain.PrefixOrder)
	news, err := eventstore.Encode[domain.Event](domain.Events, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg, Quantity: 1},
			Currency: "usd", UnitAmount: 3, RequestDigest: "test", At: e.clock.Now()},
		domain.OrderPaid{OrderID: order, ProviderEventID: "evt_" + order, PaidAt: e.clock.Now()})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.fleet.Store.Append(testutil.Context(e.t), domain.AccountStream(org), eventstore.AnyVersion, news...); err != nil {
		e.t.Fatal(err)
	}
}

// do sends one request as principal, checks the answer against the served
// document, and returns the status, headers and decoded body.
func (e *poolHTTPEnv) do(principal, method, path, body string) (int, http.Header, map[string]any) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, raw := call(e.t, e.s, e.v, principal, req)
	var out map[string]any
	if len(raw) > 0 {
		out = jsonObject(e.t, method+" "+path, raw)
	}
	return resp.StatusCode, resp.Header, out
}

func errorOf(body map[string]any) map[string]any {
	e, _ := body["error"].(map[string]any)
	return e
}

// TestPoolTakeRoute drives POST /v1/devices/take on a hosted server: who
// may take, the answer's shape, the limit with its fields and
// Retry-After, the return of a released device, and the route not
// shadowed by /v1/devices/{deviceId}.
func TestPoolTakeRoute(t *testing.T) {
	e := newPoolHTTPEnv(t, "hosted", 5, 2)
	e.grant(e.orgA)

	status, _, body := e.do("admin-b", "POST", "/v1/devices/take", "")
	if status != http.StatusForbidden || errorOf(body)["code"] != "forbidden" {
		t.Fatalf("without pay-as-you-go access: got %d %v; want 403 forbidden", status, body)
	}
	status, _, body = e.do("key-a", "POST", "/v1/devices/take", "")
	if status != http.StatusForbidden || errorOf(body)["code"] != "permission_denied" {
		t.Fatalf("API key: got %d %v; want 403 permission_denied", status, body)
	}
	for _, bad := range []string{`{"ttlSeconds":5}`, `{"ttlSeconds":"ten"}`, `{"ttlSeconds":`} {
		if status, _, body := e.do("admin-a", "POST", "/v1/devices/take", bad); status != http.StatusBadRequest || errorOf(body)["code"] != "invalid_argument" {
			t.Errorf("body %s: got %d %v; want 400 invalid_argument", bad, status, body)
		}
	}

	status, _, took := e.do("member-a", "POST", "/v1/devices/take", `{"ttlSeconds":120}`)
	if status != http.StatusCreated {
		t.Fatalf("take: got %d %v; want 201", status, took)
	}
	dev, _ := took["device"].(map[string]any)
	id, _ := took["deviceId"].(string)
	if dev["deviceId"] != id || took["leaseId"] == nil || took["fencingToken"] != float64(1) || took["expiresAt"] != "2026-05-01T08:02:00Z" ||
		dev["leased"] != true {
		t.Errorf("take: got %v; want the device, leased, and a 120 s lease with token 1", took)
	}
	status, _, page := e.do("member-a", "GET", "/v1/devices", "")
	if list, _ := page["devices"].([]any); status != http.StatusOK || len(list) != 1 || list[0].(map[string]any)["deviceId"] != id {
		t.Errorf("A's devices: got %d %v; want the pool device", status, page)
	}
	status, _, page = e.do("admin-b", "GET", "/v1/devices", "")
	if list, _ := page["devices"].([]any); status != http.StatusOK || len(list) != 0 {
		t.Errorf("B's devices: got %d %v; want none", status, page)
	}
	if status, _, body := e.do("admin-b", "GET", "/v1/devices/"+id, ""); status < 400 {
		t.Errorf("B reading A's pool device: got %d %v; want refused as missing", status, body)
	}

	// An OAuth app acting for A may take one (spec 5.2); then A is at its limit.
	if status, _, body := e.do("app-a", "POST", "/v1/devices/take", ""); status != http.StatusCreated {
		t.Fatalf("app take: got %d %v; want 201", status, body)
	}
	e.clock.Advance(20 * time.Second)
	status, h, body := e.do("admin-a", "POST", "/v1/devices/take", "")
	ee := errorOf(body)
	if status != http.StatusConflict || ee["code"] != "fleet_at_capacity" || ee["holding"] != float64(2) || ee["limit"] != float64(2) ||
		ee["retryAfterMs"] != float64(100000) || ee["retryable"] != true || h.Get("Retry-After") != "100" {
		t.Fatalf("at the limit: got %d %v Retry-After %q; want 409 fleet_at_capacity holding 2 limit 2 retryAfterMs 100000", status, body, h.Get("Retry-After"))
	}

	// Released, and given back by the return pass: A may take again.
	if status, _, body := e.do("member-a", "DELETE", "/v1/devices/"+id+"/lease?leaseId="+took["leaseId"].(string), ""); status != http.StatusNoContent {
		t.Fatalf("release: got %d %v", status, body)
	}
	if n, err := e.app.Provisioning.ReturnPoolDevices.Handle(testutil.Context(t), provisioning.ReturnPoolDevices{}); err != nil || n != 1 {
		t.Fatalf("return pass: %d %v; want 1", n, err)
	}
	e.fleet.Settle(t)
	if status, _, body := e.do("member-a", "GET", "/v1/devices/"+id, ""); status < 400 {
		t.Errorf("the returned device: got %d %v; want refused as missing", status, body)
	}
	if status, _, body := e.do("admin-a", "POST", "/v1/devices/take", ""); status != http.StatusCreated {
		t.Errorf("take after the return: got %d %v; want 201", status, body)
	}
}

// TestPoolTakeExhausted: with every unit out, 409 device_unavailable with
// reason pool_exhausted, as the document describes.
func TestPoolTakeExhausted(t *testing.T) {
	e := newPoolHTTPEnv(t, "hosted", 1, 2)
	e.grant(e.orgA)
	e.grant(e.orgB)
	if status, _, body := e.do("admin-a", "POST", "/v1/devices/take", `{"ttlSeconds":10}`); status != http.StatusCreated {
		t.Fatalf("take: got %d %v", status, body)
	}
	status, h, body := e.do("admin-b", "POST", "/v1/devices/take", "")
	ee := errorOf(body)
	if status != http.StatusConflict || ee["code"] != "device_unavailable" || ee["reason"] != "pool_exhausted" ||
		ee["retryAfterMs"] != float64(10000) || h.Get("Retry-After") != "10" {
		t.Fatalf("got %d %v; want 409 device_unavailable pool_exhausted retryAfterMs 10000", status, body)
	}
}

// TestPoolTakeLocalMode: a local deployment answers the hosted-only route
// 404 not_found and records nothing, even for an organisation with
// pay-as-you-go access.
func TestPoolTakeLocalMode(t *testing.T) {
	e := newPoolHTTPEnv(t, "local", 3, 2)
	e.grant(e.orgA)
	status, _, body := e.do("admin-a", "POST", "/v1/devices/take", "")
	if status != http.StatusNotFound || errorOf(body)["code"] != "not_found" {
		t.Fatalf("local take: got %d %v; want 404 not_found", status, body)
	}
	if names, err := e.fleet.Store.Load(testutil.Context(t), domain.PoolStreamID, 1); err != nil || len(names) != 0 {
		t.Errorf("local take recorded %v %v; want nothing", names, err)
	}
}

// TestPoolTakeNotShadowed: the route is matched before the fleet's
// /v1/devices/{deviceId}, and other methods on the path still reach the
// device routes.
func TestPoolTakeNotShadowed(t *testing.T) {
	s, _ := newTestServer(t, Deps{Mode: "hosted", Auth: testPrincipals{"x": {OrgID: "org_x", Kind: domain.PrincipalConsole,
		UserID: "u_x", Role: domain.RoleAdmin, Scopes: domain.AllScopes}}})
	req := httptest.NewRequest("POST", "/v1/devices/take", nil)
	req.Header.Set("X-Test-Principal", "x")
	var m mux.RouteMatch
	if !s.router.Match(req, &m) || m.Route == nil {
		t.Fatal("POST /v1/devices/take matched no route")
	}
	if tmpl, _ := m.Route.GetPathTemplate(); tmpl != "/v1/devices/take" {
		t.Fatalf("POST /v1/devices/take matched %q; want /v1/devices/take", tmpl)
	}
	get := httptest.NewRequest("GET", "/v1/devices/take", nil)
	m = mux.RouteMatch{}
	if !s.router.Match(get, &m) || m.Route == nil || m.MatchErr != nil {
		t.Fatal("GET /v1/devices/take matched no route")
	}
	if tmpl, _ := m.Route.GetPathTemplate(); tmpl != "/v1/devices/{deviceId}" {
		t.Errorf("GET /v1/devices/take matched %q; want the device route", tmpl)
	}
	// Without provisioning the route answers service_unavailable, not a
	// device route's not_found.
	resp, raw := apitest.Do(t, s.Handler(), req)
	apitest.FromHandler(t, s.Handler()).Check(t, req, resp, raw)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), "service_unavailable") {
		t.Errorf("got %d %s; want 503 service_unavailable", resp.StatusCode, raw)
	}
}

// doKeyed is do with an Idempotency-Key header; it returns the raw body
// too, to compare answers byte for byte.
func (e *poolHTTPEnv) doKeyed(principal, key, body string) (int, http.Header, []byte) {
	e.t.Helper()
	req := httptest.NewRequest("POST", "/v1/devices/take", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", key)
	resp, raw := call(e.t, e.s, e.v, principal, req)
	return resp.StatusCode, resp.Header, raw
}

// TestPoolTakeIdempotencyKey: a take retried with its Idempotency-Key
// (its answer lost) answers the first take again, byte for byte, with
// Idempotent-Replayed: true, and the organisation holds one device; the
// key reused for another ttl is 409 idempotency_conflict; a malformed key
// is 400.
func TestPoolTakeIdempotencyKey(t *testing.T) {
	e := newPoolHTTPEnv(t, "hosted", 5, 2)
	e.grant(e.orgA)

	status, h, first := e.doKeyed("admin-a", "lost-answer-1", `{"ttlSeconds":120}`)
	if status != http.StatusCreated || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first take: got %d %s (Idempotent-Replayed %q); want 201 without the header", status, first, h.Get("Idempotent-Replayed"))
	}
	e.clock.Advance(3 * time.Second)
	status, h, again := e.doKeyed("admin-a", "lost-answer-1", `{"ttlSeconds":120}`)
	if status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || string(again) != string(first) {
		t.Fatalf("repeat: got %d %s (Idempotent-Replayed %q); want 201, the first answer, replayed\n%s", status, again,
			h.Get("Idempotent-Replayed"), first)
	}
	status, _, page := e.do("admin-a", "GET", "/v1/devices", "")
	if list, _ := page["devices"].([]any); status != http.StatusOK || len(list) != 1 {
		t.Errorf("A's devices after a repeated take: got %d %v; want one", status, page)
	}
	status, h, conflict := e.doKeyed("admin-a", "lost-answer-1", "")
	body := jsonObject(t, "conflict", conflict)
	if status != http.StatusConflict || errorOf(body)["code"] != "idempotency_conflict" || errorOf(body)["retryable"] != false ||
		h.Get("Retry-After") != "" {
		t.Errorf("same key, another ttl: got %d %v; want 409 idempotency_conflict, not retryable", status, body)
	}
	status, _, bad := e.doKeyed("admin-a", "caf\u00e9", "")
	if body := jsonObject(t, "bad key", bad); status != http.StatusBadRequest || errorOf(body)["code"] != "invalid_argument" {
		t.Errorf("malformed key: got %d %v; want 400 invalid_argument", status, body)
	}
}
