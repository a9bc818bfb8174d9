package service

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/proxies"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// TestProxyRefundsAndDisputesFollowTheFulfilmentRules: the provider's
// signed charge.refunded and charge.dispute.* events over the hosted
// webhook route, whose charges carry none of the order's metadata, are
// traced to proxy orders through the charge's invoice's subscription
// (read with stripe-go; stripe-mock stores nothing, so the charges'
// answers are recorded ones naming the orders' subscriptions). A full
// refund ends the order and revokes its proxy (the forward proxy answers
// 407), once however often it is delivered; a partial refund is recorded
// and the proxy still serves; a dispute's opening ends the order and
// revokes the proxy, its closing is recorded; a refund of another
// subscription's charge is provisioning's. The read model rebuilds equal.
func TestProxyRefundsAndDisputesFollowTheFulfilmentRules(t *testing.T) {
	charge := func(id, sub string) string {
		return `{"id":"` + id + `","object":"charge","amount":900,"currency":"eur",
			"invoice":{"id":"in_` + id + `","object":"invoice","subscription":"` + sub + `"}}`
	}
	api := testutil.StripeRecordedObjects(t, testutil.StripeMock(t), map[string]string{
		"/v1/charges/ch_px_full":    charge("ch_px_full", "sub_px_full"),
		"/v1/charges/ch_px_partial": charge("ch_px_partial", "sub_px_partial"),
		"/v1/charges/ch_px_dispute": charge("ch_px_dispute", "sub_px_dispute"),
		"/v1/charges/ch_other":      charge("ch_other", "sub_other"),
	})
	idp := identitytest.New(t)
	a, base := checkoutService(t, idp, map[string]string{"SERVICE_STRIPE_WEBHOOK_SECRET": proxyStripeSecret,
		"SERVICE_STRIPE_API_BASE": api})
	c := checkoutCall{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	aud := "http://checkout.test/mcp"
	admin := idp.Console(t, aud, "user_a", "org_a", "admin")
	idp.SetRole("user_a", "org_a", "admin")
	key := c.do(admin, "POST", "/v1/api-keys", `{"name":"proxies","scopes":["orders:place","devices:read"]}`).
		want(t, http.StatusCreated, "").body["token"].(string)

	deliver := func(id, typ string, object map[string]any) map[string]any {
		t.Helper()
		obj, err := json.Marshal(object)
		if err != nil {
			t.Fatal(err)
		}
		ev := signed(t, payments.Event{ID: id, Type: typ, Created: time.Now(), Object: obj}, proxyStripeSecret)
		req, _ := http.NewRequest("POST", base+"/webhooks/stripe", strings.NewReader(string(ev.Payload)))
		req.Header.Set("Stripe-Signature", ev.Signature)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&got)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %v", typ, id, resp.StatusCode, got)
		}
		return got
	}
	type bought struct{ order, proxy, user, pass string }
	buy := func(sub string) bought {
		t.Helper()
		placed := c.do(key, "POST", "/v1/proxy-orders", `{"productId":"de-fixed"}`).want(t, http.StatusOK, "").body
		b := bought{order: placed["orderId"].(string), proxy: placed["proxyId"].(string)}
		paid := deliver("evt_paid_"+sub, payments.EventCheckoutCompleted, map[string]any{"id": "cs_" + sub, "object": "checkout.session",
			"mode": "subscription", "status": "complete", "payment_status": "paid", "subscription": sub, "client_reference_id": b.order,
			"metadata": map[string]any{payments.MetaOrgID: "org_a", payments.MetaOrderID: b.order, proxies.MetaKind: proxies.MetaKindProxy,
				proxies.MetaProxyID: b.proxy}})
		if paid["outcome"] != "applied" {
			t.Fatalf("payment of %s: %v", sub, paid)
		}
		creds := c.do(admin, "POST", "/v1/proxies/"+b.proxy+"/credentials", "").want(t, http.StatusOK, "").body
		b.user, b.pass = creds["username"].(string), creds["password"].(string)
		return b
	}
	// Hosted, a live proxy admits its credentials and then refuses the
	// private destination (403); a revoked one refuses the credentials (407).
	status := func(b bought) int { return proxyStatus(t, a.forwardProxy.Addr(), b.user, b.pass, base+"/healthz") }
	order := func(b bought) map[string]any {
		return c.do(key, "GET", "/v1/proxy-orders/"+b.order, "").want(t, http.StatusOK, "").body
	}
	proxyState := func(b bought) any {
		return c.do(key, "GET", "/v1/proxies/"+b.proxy, "").want(t, http.StatusOK, "").body["state"]
	}
	count := func(eventType, orderID string) int {
		t.Helper()
		var n int
		if err := a.db.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM events WHERE event_type = $1 AND data->>'orderId' = $2`,
			eventType, orderID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	full, partial, disputed := buy("sub_px_full"), buy("sub_px_partial"), buy("sub_px_dispute")
	for _, b := range []bought{full, partial, disputed} {
		if got := status(b); got != http.StatusForbidden {
			t.Fatalf("paid proxy %s: got %d; want its credentials admitted (403 for a private address)", b.proxy, got)
		}
		if o := order(b); o["refund"] != nil || o["dispute"] != nil {
			t.Fatalf("a paid order shows a refund or a dispute: %v", o)
		}
	}

	// A full refund (no metadata of ours on the charge) ends the order and
	// revokes the proxy, once however often it is delivered.
	refunded := map[string]any{"id": "ch_px_full", "object": "charge", "amount": 900, "amount_refunded": 900, "currency": "eur",
		"refunded": true, "status": "succeeded", "invoice": "in_ch_px_full", "metadata": map[string]any{}}
	if got := deliver("evt_refund_full", payments.EventChargeRefunded, refunded); got["outcome"] != "applied" {
		t.Fatalf("full refund: %v; want applied", got)
	}
	o := order(full)
	r, _ := o["refund"].(map[string]any)
	if o["state"] != "ended" || o["endedReason"] != "refunded" || r == nil || r["full"] != true || r["amountRefunded"] != float64(900) {
		t.Fatalf("order after a full refund %v", o)
	}
	if s := proxyState(full); s != "revoked" {
		t.Fatalf("proxy after a full refund is %v; want revoked", s)
	}
	if got := status(full); got != http.StatusProxyAuthRequired {
		t.Fatalf("refunded proxy's credentials: got %d; want 407", got)
	}
	if got := deliver("evt_refund_full", payments.EventChargeRefunded, refunded); got["outcome"] != "duplicate" {
		t.Fatalf("the refund delivered again: %v; want duplicate", got)
	}
	if n, e := count("proxy.order_refunded", full.order), count("proxy.order_ended", full.order); n != 1 || e != 1 {
		t.Fatalf("after two deliveries: %d proxy.order_refunded, %d proxy.order_ended; want 1 and 1", n, e)
	}

	// A partial refund is recorded; the order stands and its proxy serves.
	part := map[string]any{"id": "ch_px_partial", "object": "charge", "amount": 900, "amount_refunded": 300, "currency": "eur",
		"refunded": false, "status": "succeeded", "invoice": "in_ch_px_partial"}
	if got := deliver("evt_refund_partial", payments.EventChargeRefunded, part); got["outcome"] != "applied" {
		t.Fatalf("partial refund: %v; want applied", got)
	}
	o = order(partial)
	r, _ = o["refund"].(map[string]any)
	if o["state"] != "paid" || o["endedReason"] != nil || r == nil || r["full"] != false || r["amountRefunded"] != float64(300) || r["amount"] != float64(900) {
		t.Fatalf("order after a partial refund %v", o)
	}
	if s, got := proxyState(partial), status(partial); s != "active" || got != http.StatusForbidden {
		t.Fatalf("proxy after a partial refund: %v, forward proxy %d; want active and its credentials admitted", s, got)
	}

	// A dispute's opening ends the order and revokes the proxy; its closing
	// (lost) is recorded and changes nothing else.
	dispute := func(status string) map[string]any {
		return map[string]any{"id": "dp_px", "object": "dispute", "amount": 900, "currency": "eur", "charge": "ch_px_dispute",
			"status": status, "reason": "fraudulent"}
	}
	if got := deliver("evt_dispute_open", payments.EventDisputeCreated, dispute("needs_response")); got["outcome"] != "applied" {
		t.Fatalf("dispute: %v; want applied", got)
	}
	o = order(disputed)
	d, _ := o["dispute"].(map[string]any)
	if o["state"] != "ended" || o["endedReason"] != "disputed" || d == nil || d["status"] != "needs_response" || d["reason"] != "fraudulent" {
		t.Fatalf("order after a dispute %v", o)
	}
	if s, got := proxyState(disputed), status(disputed); s != "revoked" || got != http.StatusProxyAuthRequired {
		t.Fatalf("proxy after a dispute: %v, forward proxy %d; want revoked and 407", s, got)
	}
	if got := deliver("evt_dispute_closed", payments.EventDisputeClosed, dispute("lost")); got["outcome"] != "applied" {
		t.Fatalf("dispute closed: %v; want applied", got)
	}
	if o = order(disputed); o["state"] != "ended" || o["dispute"].(map[string]any)["status"] != "lost" {
		t.Fatalf("order after the dispute was lost %v", o)
	}
	if n := count("proxy.order_ended", disputed.order); n != 1 {
		t.Fatalf("%d proxy.order_ended after the dispute's opening and closing; want 1", n)
	}

	// A refund of another subscription's charge, or of a charge of no
	// invoice, is no proxy order's: provisioning answers it (no order of
	// its either: ignored), and no proxy order changed.
	before := proxyRows(t, a)
	other := map[string]any{"id": "ch_other", "object": "charge", "amount": 900, "amount_refunded": 900, "currency": "eur",
		"refunded": true, "invoice": "in_ch_other"}
	if got := deliver("evt_refund_other", payments.EventChargeRefunded, other); got["outcome"] != "ignored" {
		t.Fatalf("another subscription's refund: %v; want ignored", got)
	}
	delete(other, "invoice")
	if got := deliver("evt_refund_no_invoice", payments.EventChargeRefunded, other); got["outcome"] != "ignored" {
		t.Fatalf("a refund of no invoice: %v; want ignored", got)
	}
	if after := proxyRows(t, a); after != before {
		t.Fatalf("another charge's refund changed proxy orders:\n%s\n%s", before, after)
	}

	// The read model rebuilds equal.
	if err := a.runner.Rebuild(testutil.Context(t), "proxies", nil); err != nil {
		t.Fatal(err)
	}
	if after := proxyRows(t, a); after != before {
		t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", before, after)
	}
}
