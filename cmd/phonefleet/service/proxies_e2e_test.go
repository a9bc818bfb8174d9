package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/adb"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/internal/payments"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

const proxyStripeSecret = "whsec_e2e_proxies"

// proxyPage is a page a test serves on loopback, recording each request.
type proxyPage struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []string
}

func startProxyPage(t *testing.T) *proxyPage {
	t.Helper()
	p := &proxyPage{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.hits = append(p.hits, r.URL.Path)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><head><title>Served %s</title></head><body><p>Hello from the test page %s.</p></body></html>", r.URL.Path, r.URL.Path)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxyPage) hit(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.hits {
		if h == path {
			return true
		}
	}
	return false
}

// proxySeen reports whether the forward proxy forwarded target with
// username's credentials for proxyID.
func proxySeen(fp *forwardproxy.Server, proxyID, username, target string) bool {
	for _, s := range fp.Seen() {
		if s.ProxyID == proxyID && s.Username == username && s.Target == target {
			return true
		}
	}
	return false
}

// proxyStatus sends one GET for target through the forward proxy with
// the given credentials and answers the status.
func proxyStatus(t *testing.T, endpoint, user, pass, target string) int {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: endpoint, User: url.UserPassword(user, pass)}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// paidProxyEvent is checkout.session.completed, paid, for a proxy order,
// signed as Stripe signs it.
func paidProxyEvent(t *testing.T, org, order, proxyID, eventID string) proxies.ReceiveProviderEvent {
	t.Helper()
	obj, err := json.Marshal(map[string]any{"id": "cs_" + order, "object": "checkout.session", "mode": "subscription", "status": "complete",
		"payment_status": "paid", "subscription": "sub_" + order, "client_reference_id": order,
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order, proxies.MetaKind: proxies.MetaKindProxy,
			proxies.MetaProxyID: proxyID}})
	if err != nil {
		t.Fatal(err)
	}
	s := signed(t, payments.Event{ID: eventID, Type: payments.EventCheckoutCompleted, Created: time.Now(), Object: obj}, proxyStripeSecret)
	return proxies.ReceiveProviderEvent{Payload: s.Payload, Signature: s.Signature}
}

// simBrowser drives a sim phone's browser over REST under a lease.
type simBrowser struct {
	t      *testing.T
	c      auditClient
	device string
	lease  string
	n      int
}

func (b *simBrowser) act(action string, args map[string]any) map[string]any {
	b.t.Helper()
	b.n++
	r := b.c.must("POST", "/v1/devices/"+b.device+"/actions", map[string]any{"action": action, "arguments": args,
		"idempotencyKey": fmt.Sprintf("proxy-e2e-%s-%d", b.lease, b.n), "leaseId": b.lease}, http.StatusOK, nil)
	if r.body["state"] != "committed" {
		b.t.Fatalf("%s: got %v; want committed", action, r.body)
	}
	return r.body
}

func (b *simBrowser) screen() domain.UIElement {
	b.t.Helper()
	var root domain.UIElement
	remarshal(b.t, b.c.must("GET", "/v1/devices/"+b.device+"/snapshot", nil, http.StatusOK, nil).body["root"], &root)
	return root
}

func findResource(e domain.UIElement, id string) (domain.UIElement, bool) {
	if e.ResourceID == id {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findResource(c, id); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

// load types an address into the browser and answers the page's title.
func (b *simBrowser) load(address string) string {
	b.t.Helper()
	b.act("open_app", map[string]any{"package": "com.example.browser"})
	bar, ok := findResource(b.screen(), "com.example.browser:id/url_bar")
	if !ok {
		b.t.Fatal("the browser shows no address bar")
	}
	b.act("tap", map[string]any{"ref": bar.Ref})
	b.act("type_text", map[string]any{"text": address})
	b.act("key", map[string]any{"key": "ENTER"})
	title, ok := findResource(b.screen(), "com.example.browser:id/page_title")
	if !ok {
		b.t.Fatal("the browser shows no page title")
	}
	return title.Text
}

// TestProxyOrderedPaidAssignedRotatedUnassigned runs managed proxies end
// to end against stripe-mock, the real forward proxy and a sim phone: a
// quote, an order (Idempotency-Key replay and conflict, quote_changed), no
// proxy before the signed provider event, the proxy issued by it (a
// redelivery changes nothing), its credentials shown once; assigned to the
// sim phone, whose Settings show the proxy and whose browser fetches a
// page the test serves through it, the proxy seeing that request with the
// proxy's credentials; rotated, the old credentials refused and the phone
// on the new ones; unassigned, the phone direct again. Every answer is
// checked against the served OpenAPI document; the read model rebuilds
// equal.
func TestProxyOrderedPaidAssignedRotatedUnassigned(t *testing.T) {
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_STRIPE_SECRET_KEY"], env["SERVICE_STRIPE_API_BASE"] = "sk_test_proxies", testutil.StripeMock(t)
	env["SERVICE_STRIPE_WEBHOOK_SECRET"] = proxyStripeSecret
	a, base := startApp(t, env)
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	ac := auditClient{t: t, base: base}
	ctx := testutil.Context(t)
	page := startProxyPage(t)

	var device string
	waitUntil(t, 20*time.Second, "the sim phone", func() (bool, error) {
		list, _ := c.do("", "GET", "/v1/devices", "").body["devices"].([]any)
		if len(list) == 1 {
			device = list[0].(map[string]any)["deviceId"].(string)
		}
		return device != "", nil
	})

	// Products and a quote.
	products := c.do("", "GET", "/v1/proxy-products", "").want(t, http.StatusOK, "")
	var quoteID string
	for _, p := range products.body["products"].([]any) {
		if m := p.(map[string]any); m["productId"] == "us-fixed" {
			quoteID = m["quoteId"].(string)
		}
	}
	q := c.do("", "POST", "/v1/proxy-quotes", `{"productId":"us-fixed"}`).want(t, http.StatusOK, "")
	if q.body["quoteId"] != quoteID || quoteID == "" || q.body["amount"] != float64(1500) {
		t.Fatalf("quote %v; want the listed quoteId %s at 1500", q.body, quoteID)
	}
	c.do("", "POST", "/v1/proxy-quotes", `{"productId":"nowhere"}`).want(t, http.StatusBadRequest, "invalid_argument")

	// The order: replay, conflict, quote_changed.
	body := `{"productId":"us-fixed","quoteId":"` + quoteID + `"}`
	first := c.do("", "POST", "/v1/proxy-orders", body, "Idempotency-Key", "proxy-e2e-1").want(t, http.StatusOK, "")
	if first.body["state"] != "awaiting_payment" || !strings.HasPrefix(fmt.Sprint(first.body["checkoutUrl"]), "https://") ||
		first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("order %v %v; want a payment page", first.body, first.header)
	}
	order, proxyID := first.body["orderId"].(string), first.body["proxyId"].(string)
	again := c.do("", "POST", "/v1/proxy-orders", body, "Idempotency-Key", "proxy-e2e-1").want(t, http.StatusOK, "")
	if again.header.Get("Idempotent-Replayed") != "true" || again.body["orderId"] != order || again.body["checkoutUrl"] != first.body["checkoutUrl"] {
		t.Fatalf("replay %v %v; want the first order again", again.body, again.header)
	}
	c.do("", "POST", "/v1/proxy-orders", `{"productId":"de-fixed"}`, "Idempotency-Key", "proxy-e2e-1").want(t, http.StatusConflict, "idempotency_conflict")
	changed := c.do("", "POST", "/v1/proxy-orders", `{"productId":"us-fixed","quoteId":"qt_stale"}`).want(t, http.StatusConflict, "quote_changed")
	if e := changed.body["error"].(map[string]any); e["quoteId"] != quoteID {
		t.Errorf("quote_changed %v; want the current quoteId", e)
	}
	if orders := c.do("", "GET", "/v1/proxy-orders", "").want(t, http.StatusOK, "").body["orders"].([]any); len(orders) != 1 {
		t.Fatalf("orders %v; want the one order (refusals create none)", orders)
	}

	// No proxy before the payment is verified; a forged event changes nothing.
	if l := c.do("", "GET", "/v1/proxies", "").want(t, http.StatusOK, "").body["proxies"].([]any); len(l) != 0 {
		t.Fatalf("proxies before payment: %v", l)
	}
	c.do("", "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusNotFound, "not_found")
	forged := paidProxyEvent(t, a.orgID, order, proxyID, "evt_proxy_forged")
	forged.Signature = payments.SignWebhookForTest(forged.Payload, "whsec_wrong", time.Now())
	if _, err := a.app.Proxies.ReceiveProviderEvent.Handle(ctx, forged); err == nil {
		t.Fatal("a forged provider event was accepted")
	}
	paid := paidProxyEvent(t, a.orgID, order, proxyID, "evt_proxy_paid_"+order)
	r, err := a.app.Proxies.ReceiveProviderEvent.Handle(ctx, paid)
	if err != nil || r.Outcome != proxies.OutcomeApplied {
		t.Fatalf("payment: %+v, %v", r, err)
	}
	if r, err := a.app.Proxies.ReceiveProviderEvent.Handle(ctx, paid); err != nil || r.Outcome != proxies.OutcomeDuplicate {
		t.Fatalf("redelivery: %+v, %v; want duplicate", r, err)
	}
	if o := c.do("", "GET", "/v1/proxy-orders/"+order, "").want(t, http.StatusOK, "").body; o["state"] != "paid" || o["checkoutUrl"] != nil {
		t.Fatalf("order after payment %v", o)
	}
	px := c.do("", "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusOK, "").body
	endpoint := px["endpoint"].(map[string]any)
	addr := fmt.Sprintf("%s:%v", endpoint["host"], endpoint["port"])
	if px["state"] != "active" || px["country"] != "US" || addr != a.forwardProxy.Addr() || px["password"] != nil {
		t.Fatalf("proxy %v; want active, US, at the forward proxy %s, no password", px, a.forwardProxy.Addr())
	}
	creds := c.do("", "POST", "/v1/proxies/"+proxyID+"/credentials", "").want(t, http.StatusOK, "").body
	user, pass := creds["username"].(string), creds["password"].(string)
	if user != px["username"] || pass == "" {
		t.Fatalf("credentials %v", creds)
	}
	c.do("", "POST", "/v1/proxies/"+proxyID+"/credentials", "").want(t, http.StatusConflict, "wrong_state")
	target := page.srv.URL + "/check"
	if got := proxyStatus(t, addr, user, "wrong", target); got != http.StatusProxyAuthRequired {
		t.Fatalf("wrong password: got %d; want 407", got)
	}

	// Assign to the sim phone.
	op := c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"assign","deviceIds":["`+device+`"]}`,
		"Idempotency-Key", "assign-1").want(t, http.StatusAccepted, "")
	opID := op.body["operationId"].(string)
	if op.body["state"] != "pending" || op.body["requestedBy"].(map[string]any)["kind"] == "" {
		t.Fatalf("assign %v; want pending with its actor", op.body)
	}
	rep := c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"assign","deviceIds":["`+device+`"]}`,
		"Idempotency-Key", "assign-1").want(t, http.StatusAccepted, "")
	if rep.body["operationId"] != opID || rep.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed assign %v %v", rep.body, rep.header)
	}
	c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"rotate"}`, "Idempotency-Key", "assign-1").
		want(t, http.StatusConflict, "idempotency_conflict")
	c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"assign","deviceIds":["dev_nobody"]}`).
		want(t, http.StatusConflict, "device_unavailable")
	waitOp := func(id string) map[string]any {
		t.Helper()
		var v map[string]any
		waitUntil(t, 20*time.Second, "operation "+id+" finished", func() (bool, error) {
			v = c.do("", "GET", "/v1/proxy-operations/"+id, "").want(t, http.StatusOK, "").body
			return v["state"] != "pending", nil
		})
		if v["state"] != "succeeded" {
			t.Fatalf("operation %v; want succeeded", v)
		}
		return v
	}
	waitOp(opID)
	if px := c.do("", "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusOK, "").body; fmt.Sprint(px["devices"]) != "["+device+"]" {
		t.Fatalf("proxy devices %v; want [%s]", px["devices"], device)
	}
	if d := c.do("", "GET", "/v1/devices/"+device, "").want(t, http.StatusOK, "").body; d["proxyId"] != proxyID {
		t.Fatalf("device %v; want it behind %s", d, proxyID)
	}

	lease := str(t, ac.must("POST", "/v1/devices/"+device+"/lease", map[string]any{"ttlSeconds": 600}, http.StatusCreated, nil).body, "leaseId")
	b := &simBrowser{t: t, c: ac, device: device, lease: lease}
	// The phone's Settings show the proxy.
	b.act("open_app", map[string]any{"package": "com.android.settings"})
	network, ok := findUI(b.screen(), "Network & internet")
	for i := 0; !ok && i < 5; i++ {
		b.act("swipe", map[string]any{"x1": 540, "y1": 1800, "x2": 540, "y2": 600, "durationMs": 300})
		network, ok = findUI(b.screen(), "Network & internet")
	}
	if !ok {
		t.Fatalf("Settings shows no Network & internet: %s", uiTexts(b.screen()))
	}
	b.act("tap", map[string]any{"ref": network.Ref})
	if _, ok := findUI(b.screen(), addr); !ok {
		t.Errorf("Settings › Network & internet does not show the proxy %s", addr)
	}
	// The browser fetches the test's page through the proxy, with its credentials.
	if title := b.load(page.srv.URL + "/through-proxy"); title != "Served /through-proxy" {
		t.Fatalf("the browser shows %q; want the test's page", title)
	}
	if !page.hit("/through-proxy") || !proxySeen(a.forwardProxy, proxyID, user, page.srv.URL+"/through-proxy") {
		t.Fatalf("the proxy did not forward the phone's request with %s's credentials: %+v", proxyID, a.forwardProxy.Seen())
	}

	// Its receipts say the phone was behind the proxy when it acted.
	behind := c.do("", "GET", "/v1/receipts?deviceId="+device+"&limit=1", "").want(t, http.StatusOK, "").body["receipts"].([]any)[0].(map[string]any)
	if behind["proxyId"] != proxyID {
		t.Fatalf("the latest receipt %v; want it behind %s", behind, proxyID)
	}
	if one := c.do("", "GET", "/v1/receipts/"+behind["idempotencyKey"].(string), "").want(t, http.StatusOK, "").body; one["proxyId"] != proxyID {
		t.Fatalf("the receipt %v; want it behind %s", one, proxyID)
	}

	// Rotate: new credentials shown once; the old ones refused; the phone on the new ones.
	rot := c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"rotate"}`).want(t, http.StatusAccepted, "")
	newCreds := rot.body["credentials"].(map[string]any)
	newUser, newPass := newCreds["username"].(string), newCreds["password"].(string)
	if newUser == user || newPass == pass {
		t.Fatalf("rotation answered the old credentials: %v", newCreds)
	}
	if got := c.do("", "GET", "/v1/proxy-operations/"+rot.body["operationId"].(string), "").body; got["credentials"] != nil {
		t.Fatalf("reading the rotation shows its credentials again: %v", got)
	}
	waitOp(rot.body["operationId"].(string))
	if got := proxyStatus(t, addr, user, pass, page.srv.URL+"/old-creds"); got != http.StatusProxyAuthRequired {
		t.Fatalf("old credentials after rotation: got %d; want 407", got)
	}
	if got := proxyStatus(t, addr, newUser, newPass, page.srv.URL+"/new-creds"); got != http.StatusOK {
		t.Fatalf("new credentials: got %d; want 200", got)
	}
	if title := b.load(page.srv.URL + "/after-rotation"); title != "Served /after-rotation" ||
		!proxySeen(a.forwardProxy, proxyID, newUser, page.srv.URL+"/after-rotation") {
		t.Fatalf("after rotation the browser shows %q and the proxy saw %+v", title, a.forwardProxy.Seen())
	}

	// Unassign: direct again.
	un := c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"unassign","deviceIds":["`+device+`"]}`).
		want(t, http.StatusAccepted, "")
	waitOp(un.body["operationId"].(string))
	seen := len(a.forwardProxy.Seen())
	if title := b.load(page.srv.URL + "/direct"); title != "Served /direct" || !page.hit("/direct") || len(a.forwardProxy.Seen()) != seen {
		t.Fatalf("unassigned: the browser shows %q, the page was hit %v, the proxy saw %d more", title, page.hit("/direct"),
			len(a.forwardProxy.Seen())-seen)
	}
	if d := c.do("", "GET", "/v1/devices/"+device, "").want(t, http.StatusOK, "").body; d["proxyId"] != nil {
		t.Fatalf("device %v; want it direct", d)
	}
	direct := c.do("", "GET", "/v1/receipts?deviceId="+device+"&limit=1", "").want(t, http.StatusOK, "").body["receipts"].([]any)[0].(map[string]any)
	if direct["proxyId"] != nil {
		t.Fatalf("the latest receipt %v; want it direct", direct)
	}
	if old := c.do("", "GET", "/v1/receipts/"+behind["idempotencyKey"].(string), "").want(t, http.StatusOK, "").body; old["proxyId"] != proxyID {
		t.Fatalf("an earlier receipt %v; want it still naming %s", old, proxyID)
	}
	if px := c.do("", "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusOK, "").body; fmt.Sprint(px["devices"]) != "[]" {
		t.Fatalf("proxy devices after unassign %v", px["devices"])
	}
	c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"unassign","deviceIds":["`+device+`"]}`).
		want(t, http.StatusConflict, "wrong_state")
	ops := c.do("", "GET", "/v1/proxy-operations?proxyId="+proxyID, "").want(t, http.StatusOK, "").body["operations"].([]any)
	if len(ops) != 3 {
		t.Fatalf("operations %v; want assign, rotate, unassign", ops)
	}

	// The read model rebuilds equal.
	before := proxyRows(t, a)
	if err := a.runner.Rebuild(ctx, "proxies", nil); err != nil {
		t.Fatal(err)
	}
	if after := proxyRows(t, a); after != before {
		t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// proxyRows renders the managed proxies' read model as text, row by row.
func proxyRows(t *testing.T, a *App) string {
	t.Helper()
	var out strings.Builder
	for _, q := range []string{
		`SELECT order_id, state, proxy_id, cancel_at_period_end, coalesce(subscription_id, ''), created_at, paid_at, refund::text, dispute::text FROM proxy_orders ORDER BY order_id`,
		`SELECT proxy_id, username, state, encode(sealed_password, 'hex'), revealed, issued_at, rotated_at FROM proxies ORDER BY proxy_id`,
		`SELECT device_id, proxy_id, assigned_at FROM proxy_assignments ORDER BY device_id`,
		`SELECT device_id, proxy_id, from_at, to_at FROM proxy_assignment_history ORDER BY device_id, from_at`,
		`SELECT operation_id, kind, device_ids, state, coalesce(code, ''), requested_at, finished_at FROM proxy_operations ORDER BY operation_id`,
	} {
		rows, err := a.db.Pool.Query(testutil.Context(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&out, vals...)
		}
		rows.Close()
	}
	return out.String()
}

// uiTexts lists a screen's texts, for failure messages.
func uiTexts(e domain.UIElement) string {
	s := e.Text
	for _, c := range e.Children {
		if t := uiTexts(c); t != "" {
			s += " | " + t
		}
	}
	return s
}

// TestProxyPermissionsReverificationTenancyHosted runs proxy orders on a
// hosted deployment that requires reverification: reading is for any
// member, ordering for admins (a fresh identity check asked of a person,
// never of a key holding orders:place); a member, a key without
// orders:place and an OAuth app (told to use the console) are refused;
// the provider's signed event over POST /webhooks/stripe issues the
// proxy; cancelling stops renewal and the subscription's end revokes it;
// another organisation sees none of it, answered as missing.
func TestProxyPermissionsReverificationTenancyHosted(t *testing.T) {
	idp := identitytest.New(t)
	a, base := checkoutService(t, idp, map[string]string{"SERVICE_REQUIRE_REVERIFICATION": "true",
		"SERVICE_STRIPE_WEBHOOK_SECRET": proxyStripeSecret})
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	aud := "http://checkout.test/mcp"
	admin := idp.Console(t, aud, "user_a", "org_a", "admin")
	member := idp.Console(t, aud, "user_m", "org_a", "member")
	idp.SetRole("user_a", "org_a", "admin")
	idp.SetRole("user_m", "org_a", "member")
	app := idp.App(t, aud, "user_a", "org_a", "third-party")
	adminB := idp.Console(t, aud, "user_b", "org_b", "admin")
	idp.SetRole("user_b", "org_b", "admin")
	stepUp := func(authTime time.Time) string {
		claims := idp.Claims(aud, "user_a", "org_a", time.Now())
		claims["azp"], claims["auth_time"] = "console", authTime.Unix()
		return idp.Sign(t, claims)
	}
	mint := func(scopes string) string {
		t.Helper()
		return c.do(admin, "POST", "/v1/api-keys", `{"name":"proxies","scopes":`+scopes+`}`).want(t, http.StatusCreated, "").body["token"].(string)
	}
	order := `{"productId":"de-fixed"}`

	c.do(member, "GET", "/v1/proxy-products", "").want(t, http.StatusOK, "")
	c.do(member, "POST", "/v1/proxy-orders", order).want(t, http.StatusForbidden, "permission_denied")
	denied := c.do(app, "GET", "/v1/proxies", "").want(t, http.StatusForbidden, "permission_denied")
	if e := denied.body["error"].(map[string]any); e["where"] != "the console's Proxies page" {
		t.Errorf("an app's refusal %v; want it to name the console's Proxies page", e)
	}
	c.do(app, "POST", "/v1/proxy-orders", order).want(t, http.StatusForbidden, "permission_denied")
	c.do(mint(`["devices:read"]`), "POST", "/v1/proxy-orders", order).want(t, http.StatusForbidden, "permission_denied")

	// Reverification: refused without a fresh check, accepted with one; never asked of a key.
	r := c.do(admin, "POST", "/v1/proxy-orders", order).want(t, http.StatusForbidden, "reverification_required")
	if e := r.body["error"].(map[string]any); e["retryable"] != true || e["maxAgeMinutes"] != float64(10) {
		t.Errorf("got %v; want retryable with maxAgeMinutes 10", e)
	}
	c.do(admin, "POST", "/v1/proxy-orders", order, "x-service-step-up", stepUp(time.Now().Add(-11*time.Minute))).
		want(t, http.StatusForbidden, "reverification_required")
	placed := c.do(admin, "POST", "/v1/proxy-orders", order, "x-service-step-up", stepUp(time.Now().Add(-time.Minute))).
		want(t, http.StatusOK, "").body
	byKey := c.do(mint(`["orders:place"]`), "POST", "/v1/proxy-orders", order).want(t, http.StatusOK, "").body
	if byKey["createdBy"].(map[string]any)["kind"] == placed["createdBy"].(map[string]any)["kind"] {
		t.Errorf("the key's order %v names the same kind of actor as the admin's %v", byKey["createdBy"], placed["createdBy"])
	}

	// The provider's signed event, over the hosted webhook route.
	orderID, proxyID := placed["orderId"].(string), placed["proxyId"].(string)
	ev := paidProxyEvent(t, "org_a", orderID, proxyID, "evt_hosted_paid_"+orderID)
	req, _ := http.NewRequest("POST", base+"/webhooks/stripe", strings.NewReader(string(ev.Payload)))
	req.Header.Set("Stripe-Signature", ev.Signature)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || got["outcome"] != "applied" {
		t.Fatalf("webhook: %d %v; want applied", resp.StatusCode, got)
	}
	px := c.do(member, "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusOK, "").body
	if px["country"] != "DE" || px["state"] != "active" {
		t.Fatalf("proxy %v", px)
	}
	c.do(member, "POST", "/v1/proxies/"+proxyID+"/credentials", "").want(t, http.StatusForbidden, "permission_denied")
	creds := c.do(admin, "POST", "/v1/proxies/"+proxyID+"/credentials", "").want(t, http.StatusOK, "").body

	// Another organisation: every id answers as a missing one.
	for _, path := range []string{"/v1/proxy-orders/" + orderID, "/v1/proxies/" + proxyID} {
		theirs := c.do(adminB, "GET", path, "").want(t, http.StatusNotFound, "not_found")
		id := path[strings.LastIndex(path, "/")+1:]
		missing := c.do(adminB, "GET", strings.Replace(path, id, id+"x", 1), "").want(t, http.StatusNotFound, "not_found")
		if fmt.Sprint(theirs.body) != strings.Replace(fmt.Sprint(missing.body), id+"x", id, 1) {
			t.Errorf("%s: another organisation's answer %v differs from a missing one's %v", path, theirs.body, missing.body)
		}
	}
	c.do(adminB, "POST", "/v1/proxies/"+proxyID+"/credentials", "").want(t, http.StatusNotFound, "not_found")
	c.do(adminB, "POST", "/v1/proxy-orders/"+orderID+"/cancel", "").want(t, http.StatusNotFound, "not_found")
	c.do(adminB, "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"rotate"}`).want(t, http.StatusNotFound, "not_found")
	for _, path := range []string{"/v1/proxy-orders", "/v1/proxies", "/v1/proxy-operations"} {
		for k, v := range c.do(adminB, "GET", path, "").want(t, http.StatusOK, "").body {
			if l, _ := v.([]any); len(l) != 0 {
				t.Errorf("organisation B's %s lists %s %v", path, k, l)
			}
		}
	}

	// Cancel at the period's end; the subscription's end revokes the proxy.
	c.do(admin, "POST", "/v1/proxy-orders/"+byKey["orderId"].(string)+"/cancel", "").want(t, http.StatusConflict, "wrong_state")
	cancelled := c.do(admin, "POST", "/v1/proxy-orders/"+orderID+"/cancel", "").want(t, http.StatusOK, "").body
	if cancelled["cancelAtPeriodEnd"] != true || cancelled["state"] != "paid" {
		t.Fatalf("cancelled %v; want paid until the period ends", cancelled)
	}
	// Renew withdraws the cancellation: it costs money, so a member is
	// refused and a person needs a fresh identity check.
	renew := `{"proxyId":"` + proxyID + `","kind":"renew"}`
	c.do(member, "POST", "/v1/proxy-operations", renew).want(t, http.StatusForbidden, "permission_denied")
	c.do(admin, "POST", "/v1/proxy-operations", renew).want(t, http.StatusForbidden, "reverification_required")
	op := c.do(admin, "POST", "/v1/proxy-operations", renew, "x-service-step-up", stepUp(time.Now())).want(t, http.StatusAccepted, "").body
	waitUntil(t, 20*time.Second, "the renewal", func() (bool, error) {
		v := c.do(admin, "GET", "/v1/proxy-operations/"+op["operationId"].(string), "").want(t, http.StatusOK, "").body
		if v["state"] == "failed" {
			t.Fatalf("renewal failed: %v", v)
		}
		return v["state"] == "succeeded", nil
	})
	if o := c.do(admin, "GET", "/v1/proxy-orders/"+orderID, "").want(t, http.StatusOK, "").body; o["cancelAtPeriodEnd"] != false {
		t.Fatalf("order after renewal %v; want it renewing again", o)
	}
	c.do(admin, "POST", "/v1/proxy-operations", renew, "x-service-step-up", stepUp(time.Now())).want(t, http.StatusConflict, "wrong_state")
	c.do(admin, "POST", "/v1/proxy-orders/"+orderID+"/cancel", "").want(t, http.StatusOK, "")
	if got := proxyStatus(t, a.forwardProxy.Addr(), creds["username"].(string), creds["password"].(string), base+"/healthz"); got != http.StatusForbidden {
		// Hosted: a private destination is refused, but only after the credentials passed.
		t.Fatalf("live proxy to a private address: got %d; want 403", got)
	}
	obj, _ := json.Marshal(map[string]any{"id": "sub_" + orderID, "object": "subscription", "status": "canceled",
		"metadata": map[string]any{payments.MetaOrgID: "org_a", payments.MetaOrderID: orderID, proxies.MetaKind: proxies.MetaKindProxy}})
	end := signed(t, payments.Event{ID: "evt_hosted_end_" + orderID, Type: payments.EventSubscriptionDeleted, Created: time.Now(), Object: obj}, proxyStripeSecret)
	if r, err := a.app.Proxies.ReceiveProviderEvent.Handle(testutil.Context(t), proxies.ReceiveProviderEvent{Payload: end.Payload, Signature: end.Signature}); err != nil || r.Outcome != proxies.OutcomeApplied {
		t.Fatalf("subscription end: %+v, %v", r, err)
	}
	if o := c.do(admin, "GET", "/v1/proxy-orders/"+orderID, "").want(t, http.StatusOK, "").body; o["state"] != "ended" || o["endedReason"] != "subscription_ended" {
		t.Fatalf("order after the subscription ended %v", o)
	}
	if p := c.do(admin, "GET", "/v1/proxies/"+proxyID, "").want(t, http.StatusOK, "").body; p["state"] != "revoked" {
		t.Fatalf("proxy after the subscription ended %v", p)
	}
	if got := proxyStatus(t, a.forwardProxy.Addr(), creds["username"].(string), creds["password"].(string), base+"/healthz"); got != http.StatusProxyAuthRequired {
		t.Fatalf("revoked proxy's credentials: got %d; want 407", got)
	}
}

// TestProxyAssignedToAnADBPhoneSetsItsGlobalProxy assigns a paid proxy to
// a phone served over a real adb server (the adb sim): the operation sets
// Android's global HTTP proxy, which `settings get global http_proxy`
// answers through adb as the proxy's endpoint; unassigning clears it.
func TestProxyAssignedToAnADBPhoneSetsItsGlobalProxy(t *testing.T) {
	server := testutil.ADBServer(t)
	env := localEnv(t, testutil.DatabaseURL(t), 0)
	env["SERVICE_ADB_SIM_DEVICES"], env["SERVICE_ADB_ADDR"] = "1", server
	env["SERVICE_STRIPE_SECRET_KEY"], env["SERVICE_STRIPE_API_BASE"] = "sk_test_proxiesadb", testutil.StripeMock(t)
	env["SERVICE_STRIPE_WEBHOOK_SECRET"] = proxyStripeSecret
	a, base := startApp(t, env)
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	ctx := testutil.Context(t)
	var device string
	waitUntil(t, time.Minute, "the adb phone", func() (bool, error) {
		list, _ := c.do("", "GET", "/v1/devices", "").body["devices"].([]any)
		for _, d := range list {
			if m := d.(map[string]any); m["backend"] == "adb" && m["status"] == "online" {
				device = m["deviceId"].(string)
			}
		}
		return device != "", nil
	})
	client := adb.New(server)
	infos, err := client.Devices(ctx)
	if err != nil || len(infos) != 1 {
		t.Fatalf("adb devices: %v, %v", infos, err)
	}
	globalProxy := func() string {
		t.Helper()
		out, err := client.Shell(ctx, infos[0].Serial, "settings get global http_proxy")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := globalProxy(); got != "null" {
		t.Fatalf("global proxy before: %q; want null", got)
	}

	o := c.do("", "POST", "/v1/proxy-orders", `{"productId":"us-rotating"}`).want(t, http.StatusOK, "").body
	order, proxyID := o["orderId"].(string), o["proxyId"].(string)
	if r, err := a.app.Proxies.ReceiveProviderEvent.Handle(ctx, paidProxyEvent(t, a.orgID, order, proxyID, "evt_adb_"+order)); err != nil || r.Outcome != proxies.OutcomeApplied {
		t.Fatalf("payment: %+v, %v", r, err)
	}
	run := func(kind string) {
		t.Helper()
		id := c.do("", "POST", "/v1/proxy-operations", `{"proxyId":"`+proxyID+`","kind":"`+kind+`","deviceIds":["`+device+`"]}`).
			want(t, http.StatusAccepted, "").body["operationId"].(string)
		var v map[string]any
		waitUntil(t, 30*time.Second, kind+" finished", func() (bool, error) {
			v = c.do("", "GET", "/v1/proxy-operations/"+id, "").want(t, http.StatusOK, "").body
			return v["state"] != "pending", nil
		})
		if v["state"] != "succeeded" {
			t.Fatalf("%s: %v; want succeeded", kind, v)
		}
	}
	run("assign")
	if got := globalProxy(); got != a.forwardProxy.Addr() {
		t.Fatalf("global proxy after assigning: %q; want %s", got, a.forwardProxy.Addr())
	}
	if d := c.do("", "GET", "/v1/devices/"+device, "").want(t, http.StatusOK, "").body; d["proxyId"] != proxyID {
		t.Fatalf("device %v; want it behind %s", d, proxyID)
	}
	run("unassign")
	if got := globalProxy(); got != "null" {
		t.Fatalf("global proxy after unassigning: %q; want null (cleared)", got)
	}
}

// TestProxySettingReachesThePhoneThroughAnotherInstance runs two
// instances on one database and one NATS server: the instance that does
// not hold the sim phone applies its network proxy setting (as its
// proxy-operations worker would) and the call is carried to the holder,
// whose phone then has the setting; taking it off clears it there.
func TestProxySettingReachesThePhoneThroughAnotherInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	var logs testutil.SyncBuffer
	env := map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_NATS_URL": testutil.NATS(t),
		"SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"SERVICE_MODE": "local", "SERVICE_SIM_DEVICES": "1",
	}
	first := startInstance(t, "first", env, &logs)
	second := startInstance(t, "second", env, &logs)
	h, n := first, second
	if second.holdsSim() {
		h, n = second, first
	}
	if !h.holdsSim() || n.holdsSim() {
		t.Fatalf("want one instance holding the sim host")
	}
	defer func() {
		if t.Failed() {
			t.Logf("the instances' logs:\n%s", logs.String())
		}
	}()
	var deviceID string
	waitUntil(t, time.Minute, "the sim phone listed online", func() (bool, error) {
		list, _ := n.c.must("GET", "/v1/devices", nil, http.StatusOK, nil).body["devices"].([]any)
		if len(list) != 1 {
			return false, nil
		}
		d := list[0].(map[string]any)
		deviceID = d["deviceId"].(string)
		return d["status"] == "online", nil
	})
	phone := func() *sim.Phone {
		t.Helper()
		d, _, err := h.app.capabilities.Fleet.State(testutil.Context(t), deviceID)
		if err != nil {
			t.Fatal(err)
		}
		s, err := h.app.devices.Sim.Device(testutil.Context(t), &d)
		if err != nil {
			t.Fatal(err)
		}
		return s.Phone()
	}
	ctx := testutil.Context(t)
	np := &domain.NetworkProxy{ProxyID: "prx_x", Host: "127.0.0.1", Port: 3128, Username: "u", Password: "p"}
	if err := n.app.capabilities.Fleet.SetNetworkProxy(ctx, deviceID, np); err != nil {
		t.Fatalf("through %s: %v", n.name, err)
	}
	if got := phone().NetworkProxySetting(); got == nil || got.Addr() != "127.0.0.1:3128" || got.Username != "u" {
		t.Fatalf("the holder's phone has %+v; want the proxy", got)
	}
	if err := n.app.capabilities.Fleet.SetNetworkProxy(ctx, deviceID, nil); err != nil {
		t.Fatal(err)
	}
	if got := phone().NetworkProxySetting(); got != nil {
		t.Fatalf("the holder's phone has %+v; want none", got)
	}
}
