package service

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/config"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The payments walk (issue 26 item 4). Run the full form with
//
//	PAYWALK_PURCHASES=200 go test -race -count=1 -p 1 -run TestPaymentsWalk ./cmd/phonefleet/service/
//
// (default 40, the short form `make test` runs); PAYWALK_SEED=N replays
// one walk (the seed is logged). Every defect it finds fails it.

const walkWebhookSecret = "whsec_payments_walk"

// walkCatalog: an emulator by the month or the day (one per order), and a
// Pixel 8 by the month, up to three phones an order, each with enough
// units that no purchase waits (a unit held twice would still show), and
// a pay-as-you-go pool of emulators.
const walkCatalog = `{
  "currency": "usd",
  "default": {"sku": "emulator", "billing": "subscription"},
  "skus": [
    {"sku": "emulator", "name": "Emulator", "prices": {"subscription": 2900, "day": 400, "payg": 3}, "maxQuantity": 1,
     "backorderable": true, "inventory": 400},
    {"sku": "cloud_phone", "name": "Cloud phone", "prices": {"day": 1200}, "maxQuantity": 1, "backorderable": true,
     "inventory": 1,
     "models": [{"id": "pixel-8", "name": "Google Pixel 8", "listed": true, "prices": {"subscription": 9900},
       "maxQuantity": 3, "backorderable": true, "defaultRegion": "US", "regions": [{"code": "US", "inventory": 400}]}]}
  ],
  "pool": {"sku": "emulator", "size": 300}
}`

// walkCounts is what the walk did, printed at its end.
type walkCounts struct {
	purchases, daily, monthly, multi, payg                  int
	renewals, cancels, returns                              int
	refundsFull, refundsPartial, refundsOwner, disputes     int
	takes, takeReplays, checkoutReplays                     int
	early                                                   int
	deliveries, late, twice, outOfOrder, redelivered, kills int
}

// walkOrder is one purchase as the walk knows it.
type walkOrder struct {
	org, order, session, kind string
	unit                      int64
	fulfilments               []string
	charges                   []string // the provider's charges, first the purchase's
	sub                       string
	// ended: fulfilment → the reason the walk ended it for (or the
	// provider's end of the whole order).
	ended map[string]string
	// owed: charge → what the walk's actions owe back of it.
	owed map[string]int64
	// billed: charge → what it should bill (unit × phones live then).
	billed map[string]int64
	// endedBy is set when the provider ended the whole order (refunded,
	// disputed); providerCharge is the charge it acted on.
	endedBy, providerCharge string
	visible                 bool
	acted                   bool
}

type walk struct {
	t    *testing.T
	rng  *rand.Rand
	idp  *identitytest.IdP
	prov *walkProvider
	// one runs in the test's process; two is a process of its own
	// (TestPaymentsWalkInstance), so that it can be killed.
	one      *clusterInstance
	two      *walkProcess
	addrs    []string
	down     []bool
	v        *apitest.Validator
	tokens   map[string]string
	orders   []*walkOrder
	pending  []payments.Event // events held back to be delivered late
	counts   walkCounts
	quoteIDs map[string]string
	// refusedProvisioned are the organisations whose checkout was refused
	// as provisioned when the walk held none of their monthly phones live.
	refusedProvisioned []string
}

// TestPaymentsWalk drives purchases (checkout with Idempotency-Keys, by
// the day, by the month, several phones a month, pay-as-you-go and
// `POST /v1/devices/take`), renewals, cancels, returns, refunds (full and
// partial in the provider's dashboard, the owner's) and disputes across
// two instances on one database, the provider's webhook delivering late,
// twice and out of order, and instance two stopped mid-way (its callers
// retry their keys on instance one). Afterwards: reconcile finds no
// difference, no unit is held twice, every cent charged is a unit
// delivered for its period or refunded, GET /v1/fulfilments, /v1/usage
// and /v1/billing/upcoming agree with the provider's records, and the
// fulfilments, usage and follow-ups projections rebuild equal.
func TestPaymentsWalk(t *testing.T) {
	purchases := 40
	if v := os.Getenv("PAYWALK_PURCHASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 {
			t.Fatalf("PAYWALK_PURCHASES=%q; want a number of at least 8", v)
		}
		purchases = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("PAYWALK_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("payments walk: %d purchases, PAYWALK_SEED=%d", purchases, seed)

	dir := t.TempDir()
	catalogFile := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(catalogFile, []byte(walkCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	idp := identitytest.New(t)
	prov := newWalkProvider(t, testutil.StripeMock(t))
	env := map[string]string{
		"SERVICE_MODE": "hosted", "SERVICE_ADDR": "127.0.0.1:0", "DATABASE_URL": testutil.DatabaseURL(t),
		"SERVICE_NATS_URL": testutil.NATS(t), "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_PUBLIC_URL": "http://walk.test", "SERVICE_OAUTH_ISSUER": idp.Issuer, "SERVICE_OAUTH_JWKS_URL": idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL": idp.RoleURL, "SERVICE_RATE_LIMIT_AUTHENTICATED": "1000000", "SERVICE_RATE_LIMIT_ANONYMOUS": "1000000",
		"SERVICE_SIM_DEVICES": "0", "SERVICE_STRIPE_SECRET_KEY": "sk_test_paywalk", "SERVICE_STRIPE_API_BASE": prov.srv.URL,
		"SERVICE_STRIPE_WEBHOOK_SECRET": walkWebhookSecret, "SERVICE_CATALOG_FILE": catalogFile,
		"SERVICE_PAYG_DEVICE_LIMIT": "50",
	}
	var logs testutil.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the instances' warnings and errors:\n%s", errorLines(logs.String()))
		}
	})
	w := &walk{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), idp: idp, prov: prov,
		tokens: map[string]string{}, quoteIDs: map[string]string{}}
	w.one = startInstance(t, "one", env, &logs)
	w.two = startWalkProcess(t, env, &logs)
	w.addrs = []string{w.one.app.Addr(), w.two.addr}
	w.down = make([]bool, 2)
	w.v = apitest.FromHandler(t, w.one.app.server.Handler())
	ctx := testutil.Context(t)

	nOrgs := max(purchases/2, 12)
	for range nOrgs {
		w.newOrg()
	}
	w.readQuotes()

	// Purchases in batches; the provider's events of each batch are
	// delivered (some held back to the next batch, some twice, some out of
	// order) before the customers act on what they bought.
	const batch = 8
	killAt := purchases / 2
	for start := 0; start < purchases; start += batch {
		for i := start; i < min(start+batch, purchases); i++ {
			if i == killAt {
				w.killMidCheckout(i)
				continue
			}
			w.purchase(i, w.rng.IntN(2))
		}
		w.deliver(false)
		w.see()
		w.act()
		w.deliver(false)
	}
	// Once every customer has acted, one more period for every monthly
	// order the provider still renews: it bills the phones left. A
	// renewal comes a period after the customers' last acts, so the
	// provider has heard of them by then: everything is delivered and
	// every follow-up carried out first (settle), as it is within seconds
	// of an act, not a month.
	w.settle(ctx)
	for _, o := range w.orders {
		if o.sub != "" && o.visible {
			w.renewal(o)
		}
	}
	w.settle(ctx)

	// What the walk did.
	c := w.counts
	t.Logf("payments walk counts: purchases %d (day %d, month %d of which several phones %d, payg %d), renewals %d, cancels %d, returns %d, "+
		"refunds full %d partial %d owner %d, disputes %d (of these, before the payment's event was delivered %d), takes %d (replayed on the other instance %d), checkouts replayed %d; "+
		"webhook deliveries %d: late %d, twice %d, out of order %d, redelivered after a refusal %d; kills %d",
		c.purchases, c.daily, c.monthly, c.multi, c.payg, c.renewals, c.cancels, c.returns, c.refundsFull, c.refundsPartial,
		c.refundsOwner, c.disputes, c.early, c.takes, c.takeReplays, c.checkoutReplays, c.deliveries, c.late, c.twice, c.outOfOrder,
		c.redelivered, c.kills)

	w.checkReconcile(ctx, env)
	w.checkFulfilments()
	w.checkMoney()
	w.checkUpcoming()
	w.checkUsage()
	w.checkRebuilds(ctx)
	if len(w.refusedProvisioned) > 0 {
		t.Logf("checkouts refused as provisioned where the walk had ended every monthly phone: %v", w.refusedProvisioned)
	}
	t.Logf("provider calls: %v", prov.calls)
}

// errorLines keeps the lines of the instances' log at WARN or above.
func errorLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	if len(out) > 200 {
		out = out[len(out)-200:]
	}
	return strings.Join(out, "\n")
}

type walkReply struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

// call sends one request to instance i; a transport error (the instance
// stopped) is returned, not fatal.
func (w *walk) call(i int, token, method, path, body string, header ...string) (walkReply, error) {
	w.t.Helper()
	req, err := http.NewRequest(method, "http://"+w.addrs[i]+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k := 0; k+1 < len(header); k += 2 {
		req.Header.Set(header[k], header[k+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return walkReply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return walkReply{}, err
	}
	if !strings.HasPrefix(path, "/webhooks/") {
		w.v.Check(w.t, httptest.NewRequest(method, path, strings.NewReader(body)), resp, raw)
	}
	r := walkReply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r, nil
}

// live picks an instance still running, preferring i.
func (w *walk) live(i int) int {
	if w.down[i%2] {
		return (i + 1) % 2
	}
	return i % 2
}

// must is call on a live instance, retried on the other one when the
// first is unreachable, and checked for status.
func (w *walk) must(i int, token, method, path, body string, want int, header ...string) walkReply {
	w.t.Helper()
	r, err := w.call(w.live(i), token, method, path, body, header...)
	if err != nil {
		r, err = w.call(w.live(i+1), token, method, path, body, header...)
	}
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	if r.status != want {
		w.t.Fatalf("%s %s on instance %d: got %d %s; want %d", method, path, w.live(i), r.status, r.raw, want)
	}
	return r
}

// readQuotes reads the quote ids of the priced models.
func (w *walk) readQuotes() {
	r := w.must(0, w.tokens[sortedKeys(w.tokens)[0]], "GET", "/v1/skus", "", http.StatusOK)
	rows, _ := r.body["skus"].([]any)
	for _, row := range rows {
		m := row.(map[string]any)
		models, _ := m["models"].([]any)
		for _, mod := range models {
			mm := mod.(map[string]any)
			if q, _ := mm["quoteId"].(string); q != "" {
				w.quoteIDs[m["sku"].(string)+"/"+mm["id"].(string)] = q
			}
		}
	}
}

// newOrg signs in the admin of one more organisation.
func (w *walk) newOrg() string {
	i := len(w.tokens)
	org, user := fmt.Sprintf("org_walk%03d", i), fmt.Sprintf("user_walk%03d", i)
	w.idp.SetRole(user, org, "admin")
	w.tokens[org] = w.idp.Console(w.t, "http://walk.test/mcp", user, org, "admin")
	return org
}

// orgFor picks the organisation of a purchase of kind: one whose last
// purchase the service lists already (a checkout paid but not yet
// confirmed answers checkout_in_progress to the next, spec 4.1 rule 4);
// and one with no live monthly phone (a provisioned organisation buys
// nothing more: it changes its plan in the billing portal).
func (w *walk) orgFor(kind string) string {
	orgs := sortedKeys(w.tokens)
	start := w.rng.IntN(len(orgs))
	for k := range orgs {
		org := orgs[(start+k)%len(orgs)]
		if w.settling(org) || w.holdsMonthly(org) {
			continue
		}
		return org
	}
	return ""
}

// settling reports whether an organisation has a purchase the service
// does not list yet.
func (w *walk) settling(org string) bool {
	for _, o := range w.orders {
		if o.org == org && !o.visible {
			return true
		}
	}
	return false
}

func (w *walk) holdsMonthly(org string) bool {
	for _, o := range w.orders {
		if o.org == org && (o.kind == "month" || o.kind == "multi") {
			for _, f := range o.fulfilments {
				if _, ended := o.ended[f]; !ended && o.endedBy == "" {
					return true
				}
			}
			if !o.visible {
				return true
			}
		}
	}
	return false
}

// purchase n: a checkout with an Idempotency-Key on instance via, the
// same key sent again (a lost answer retried) on the other instance, and
// the customer paying on the provider's page.
func (w *walk) purchase(n, via int) {
	w.t.Helper()
	kinds := []string{"day", "day", "month", "multi", "payg"}
	kind := kinds[w.rng.IntN(len(kinds))]
	org := w.orgFor(kind)
	if org == "" {
		org = w.newOrg()
	}
	body, unit := `{"sku":"emulator","billing":"day"}`, int64(400)
	switch kind {
	case "month":
		body, unit = `{"sku":"emulator","billing":"subscription"}`, 2900
	case "multi":
		body = fmt.Sprintf(`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","region":"US","quantity":%d,"quoteId":%q}`,
			2+w.rng.IntN(2), w.quoteIDs["cloud_phone/pixel-8"])
		unit = 9900
	case "payg":
		body, unit = `{"sku":"emulator","billing":"payg"}`, 0
	}
	key := fmt.Sprintf("walk-%d-%s", n, org)
	if r, err := w.call(w.live(via), w.tokens[org], "POST", "/v1/checkout-sessions", body, "Idempotency-Key", key); err == nil &&
		r.status == http.StatusConflict && strings.Contains(string(r.raw), `"provisioned"`) {
		// The service holds a monthly phone of org live that the walk
		// ended: checkFulfilments names it; buy in a new organisation.
		w.refusedProvisioned = append(w.refusedProvisioned, org)
		org = w.newOrg()
		key = fmt.Sprintf("walk-%d-%s", n, org)
	}
	first := w.must(via, w.tokens[org], "POST", "/v1/checkout-sessions", body, http.StatusOK, "Idempotency-Key", key)
	if w.rng.IntN(3) == 0 {
		again := w.must(via+1, w.tokens[org], "POST", "/v1/checkout-sessions", body, http.StatusOK, "Idempotency-Key", key)
		w.wantReplay(first, again)
	}
	o := w.pay(org, kind, unit, first)
	if kind == "day" && w.rng.IntN(8) == 0 {
		// The bank or the provider's dashboard acts before the payment's
		// own event is delivered: its event may reach the service first.
		w.providerEnds(o)
		o.acted = true
		w.counts.early++
	}
}

// providerEnds refunds in full, or disputes, an order's latest charge at
// the provider.
func (w *walk) providerEnds(o *walkOrder) {
	w.t.Helper()
	c := o.charges[len(o.charges)-1]
	if w.rng.IntN(2) == 0 {
		if err := w.prov.refundCharge(c, 0); err != nil {
			w.t.Fatal(err)
		}
		w.endOrder(o, c, domain.EndRefunded)
		w.counts.refundsFull++
		return
	}
	if err := w.prov.dispute(c); err != nil {
		w.t.Fatal(err)
	}
	w.endOrder(o, c, domain.EndDisputed)
	w.counts.disputes++
}

func (w *walk) wantReplay(first, again walkReply) {
	w.t.Helper()
	if again.header.Get("Idempotent-Replayed") != "true" || again.body["orderId"] != first.body["orderId"] ||
		again.body["checkoutUrl"] != first.body["checkoutUrl"] {
		w.t.Errorf("checkout retried with its key: got %v %v; want %v replayed", again.header, again.body, first.body)
	}
	w.counts.checkoutReplays++
}

// pay completes the session a checkout answered.
func (w *walk) pay(org, kind string, unit int64, r walkReply) *walkOrder {
	w.t.Helper()
	url, _ := r.body["checkoutUrl"].(string)
	session := url[strings.LastIndex(url, "/")+1:]
	charge, err := w.prov.pay(session)
	if err != nil {
		w.t.Fatalf("paying %s: %v", url, err)
	}
	o := &walkOrder{org: org, order: r.body["orderId"].(string), session: session, kind: kind, unit: unit,
		ended: map[string]string{}, owed: map[string]int64{}, billed: map[string]int64{}}
	ids, _ := r.body["fulfilmentIds"].([]any)
	for _, id := range ids {
		o.fulfilments = append(o.fulfilments, id.(string))
	}
	if len(o.fulfilments) == 0 && kind != "payg" {
		o.fulfilments = []string{o.order}
	}
	if charge != "" {
		o.charges = append(o.charges, charge)
		o.billed[charge] = unit * int64(len(o.fulfilments))
	}
	w.prov.mu.Lock()
	o.sub = w.prov.sess[session].Sub
	w.prov.mu.Unlock()
	w.orders = append(w.orders, o)
	w.counts.purchases++
	switch kind {
	case "day":
		w.counts.daily++
	case "month":
		w.counts.monthly++
	case "multi":
		w.counts.monthly++
		w.counts.multi++
	case "payg":
		w.counts.payg++
	}
	return o
}

// killMidCheckout sends purchase n (and a take, when a pay-as-you-go
// customer is ready) to instance two, loses the answers, kills instance
// two with SIGKILL (nothing of it is drained or closed: its follow-ups
// claimed but not finished and its bus subscriptions are left to instance
// one) and retries the keys on instance one.
func (w *walk) killMidCheckout(n int) {
	w.t.Helper()
	// A new organisation: one the walk believes free may still be
	// provisioned (see refusedProvisioned), and this answer is lost.
	org := w.newOrg()
	key := fmt.Sprintf("walk-%d-%s", n, org)
	body := `{"sku":"emulator","billing":"day"}`
	lost := w.must(1, w.tokens[org], "POST", "/v1/checkout-sessions", body, http.StatusOK, "Idempotency-Key", key)
	// A take on instance two whose answer is lost too, if a pay-as-you-go
	// customer is ready.
	var taker *walkOrder
	var lostTake walkReply
	for _, o := range w.orders {
		if o.kind == "payg" && o.visible && !o.acted {
			taker, o.acted = o, true
			lostTake = w.must(1, w.tokens[o.org], "POST", "/v1/devices/take", `{"ttlSeconds":3600}`, http.StatusCreated,
				"Idempotency-Key", "take-"+o.order)
			w.counts.takes++
			break
		}
	}
	w.two.kill(w.t)
	w.down[1] = true
	w.counts.kills++
	if _, err := w.call(1, w.tokens[org], "GET", "/v1/admission", ""); err == nil {
		w.t.Fatalf("instance two still answers after it was stopped")
	}
	again := w.must(1, w.tokens[org], "POST", "/v1/checkout-sessions", body, http.StatusOK, "Idempotency-Key", key)
	w.wantReplay(lost, again)
	w.pay(org, "day", 400, again)
	if taker != nil {
		r := w.must(1, w.tokens[taker.org], "POST", "/v1/devices/take", `{"ttlSeconds":3600}`, http.StatusCreated,
			"Idempotency-Key", "take-"+taker.order)
		if r.header.Get("Idempotent-Replayed") != "true" || r.body["deviceId"] != lostTake.body["deviceId"] {
			w.t.Errorf("take retried with its key after instance two stopped: got %v %v; want %v replayed", r.header, r.body, lostTake.body)
		}
		w.counts.takeReplays++
	}
}

// deliver sends the provider's events to the webhook of a live instance,
// signed at delivery: some held back to the next delivery (late), some
// twice, some swapped with the next (out of order); an event refused
// (not settled yet, say) is sent again, as the provider retries. With
// all, everything held back goes too.
func (w *walk) deliver(all bool) {
	w.t.Helper()
	evs := append(w.pending, w.prov.takeEvents()...)
	w.pending = nil
	var now []payments.Event
	for _, ev := range evs {
		if !all && w.rng.IntN(6) == 0 {
			w.pending = append(w.pending, ev)
			w.counts.late++
			continue
		}
		now = append(now, ev)
	}
	for k := 0; k+1 < len(now); k++ {
		if w.rng.IntN(5) == 0 {
			now[k], now[k+1] = now[k+1], now[k]
			w.counts.outOfOrder++
			k++
		}
	}
	for attempt := 0; len(now) > 0; attempt++ {
		if !all && attempt > 0 {
			// The provider retries later: what was refused (an event about
			// a payment not recorded yet) goes with the next delivery.
			w.pending = append(w.pending, now...)
			return
		}
		if attempt > 50 {
			w.t.Fatalf("%d provider events still refused after 50 rounds: %v", len(now), now)
		}
		var again []payments.Event
		for _, ev := range now {
			times := 1
			if w.rng.IntN(7) == 0 {
				times = 2
				w.counts.twice++
			}
			for range times {
				if !w.post(ev) {
					again = append(again, ev)
					w.counts.redelivered++
					break
				}
			}
		}
		now = again
		if len(now) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// post delivers one event once; false when the service refused it.
func (w *walk) post(ev payments.Event) bool {
	w.t.Helper()
	s := signed(w.t, ev, walkWebhookSecret)
	w.counts.deliveries++
	r, err := w.call(w.live(w.rng.IntN(2)), "", "POST", "/webhooks/stripe", string(s.Payload), "Stripe-Signature", s.Signature)
	if err != nil {
		return false
	}
	if r.status != http.StatusOK {
		if e, _ := r.body["error"].(map[string]any); e["retryable"] != true {
			w.t.Errorf("event %s %s refused for good: %d %s", ev.ID, ev.Type, r.status, r.raw)
			return true
		}
		return false
	}
	return true
}

// fulfilments lists an organisation's fulfilments through GET
// /v1/fulfilments, every page.
func (w *walk) fulfilments(org string) map[string]map[string]any {
	w.t.Helper()
	out := map[string]map[string]any{}
	cursor := ""
	for {
		path := "/v1/fulfilments?limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := w.must(w.rng.IntN(2), w.tokens[org], "GET", path, "", http.StatusOK)
		rows, _ := r.body["fulfilments"].([]any)
		for _, row := range rows {
			m := row.(map[string]any)
			out[m["fulfilmentId"].(string)] = m
		}
		cursor, _ = r.body["nextCursor"].(string)
		if cursor == "" {
			return out
		}
	}
}

// see marks the orders whose phones the service lists.
func (w *walk) see() {
	w.t.Helper()
	byOrg := map[string]map[string]map[string]any{}
	for _, o := range w.orders {
		if o.visible {
			continue
		}
		if o.kind == "payg" {
			r := w.must(0, w.tokens[o.org], "GET", "/v1/admission", "", http.StatusOK)
			o.visible = r.status == http.StatusOK && w.paygPaid(o)
			continue
		}
		if byOrg[o.org] == nil {
			byOrg[o.org] = w.fulfilments(o.org)
		}
		o.visible = true
		for _, f := range o.fulfilments {
			if _, ok := byOrg[o.org][f]; !ok {
				o.visible = false
			}
		}
	}
}

// paygPaid reports whether the payg order's completion was delivered (its
// provider event is no longer held back).
func (w *walk) paygPaid(o *walkOrder) bool {
	for _, ev := range w.pending {
		var s struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(ev.Object, &s)
		if s.ID == o.session {
			return false
		}
	}
	return true
}

// act has each customer whose purchase is now listed do one thing with
// it, and the provider renew, refund or see a dispute.
func (w *walk) act() {
	w.t.Helper()
	for n, o := range w.orders {
		if !o.visible || o.acted {
			continue
		}
		o.acted = true
		switch o.kind {
		case "payg":
			w.take(n, o)
			continue
		case "month", "multi":
			for range w.rng.IntN(3) {
				w.renewal(o)
			}
		}
		phone := o.fulfilments[w.rng.IntN(len(o.fulfilments))]
		switch w.rng.IntN(8) {
		case 0:
			w.must(n, w.tokens[o.org], "POST", "/v1/fulfilments/"+phone+"/cancel", "", http.StatusOK)
			w.endPhone(o, phone, domain.EndCustomerCancel, 0)
			w.counts.cancels++
		case 1:
			w.must(n, w.tokens[o.org], "POST", "/v1/fulfilments/"+phone+"/return", "", http.StatusOK)
			w.endPhone(o, phone, domain.EndCustomerReturn, o.unit)
			w.counts.returns++
		case 2:
			w.ownerRefund(o, phone)
		case 3, 5:
			w.providerEnds(o)
		case 4:
			c := o.charges[len(o.charges)-1]
			if err := w.prov.refundCharge(c, 100); err != nil {
				w.t.Fatal(err)
			}
			o.owed[c] += 100
			w.counts.refundsPartial++
		}
	}
}

// endPhone records that the walk ended one phone, owing back share of the
// order's latest charge.
func (w *walk) endPhone(o *walkOrder, phone, reason string, share int64) {
	o.ended[phone] = reason
	if share > 0 && len(o.charges) > 0 {
		o.owed[o.charges[len(o.charges)-1]] += share
	}
}

// endOrder records that the provider ended the whole order: what is left
// of the charge went back to the customer.
func (w *walk) endOrder(o *walkOrder, charge, reason string) {
	o.endedBy, o.providerCharge = reason, charge
	w.prov.mu.Lock()
	c := w.prov.chs[charge]
	o.owed[charge] = c.Refunded + c.Disputed
	w.prov.mu.Unlock()
	for _, f := range o.fulfilments {
		if _, ok := o.ended[f]; !ok {
			o.ended[f] = reason
		}
	}
}

// ownerRefund is `phonefleet fulfilments refund` on one phone, through the
// operator's application object on the surviving instance's store.
func (w *walk) ownerRefund(o *walkOrder, phone string) {
	w.t.Helper()
	a := w.one.app.Application()
	if _, err := a.Provisioning.RefundFulfilment.Handle(testutil.Context(w.t), provisioning.RefundFulfilment{FulfilmentID: phone}); err != nil {
		w.t.Fatalf("owner refund of %s: %v", phone, err)
	}
	w.endPhone(o, phone, domain.EndOwnerRefund, o.unit)
	w.counts.refundsOwner++
}

// renewal bills the next period of a monthly order at the provider.
func (w *walk) renewal(o *walkOrder) {
	live := 0
	for _, f := range o.fulfilments {
		if _, ended := o.ended[f]; !ended {
			live++
		}
	}
	if c := w.prov.renew(o.sub); c != "" {
		o.charges = append(o.charges, c)
		o.billed[c] = o.unit * int64(live)
		w.counts.renewals++
	}
}

// take is POST /v1/devices/take with an Idempotency-Key, its answer lost
// and the key sent again on the other instance. The lease lasts an hour
// (the most a lease may), longer than any walk: a lease expiring while the
// walk compares a projection with its rebuild would add an event between
// the two readings.
func (w *walk) take(n int, o *walkOrder) {
	w.t.Helper()
	key := "take-" + o.order
	first := w.must(n, w.tokens[o.org], "POST", "/v1/devices/take", `{"ttlSeconds":3600}`, http.StatusCreated, "Idempotency-Key", key)
	w.counts.takes++
	if w.down[1] || w.rng.IntN(2) == 0 {
		return
	}
	again := w.must(n+1, w.tokens[o.org], "POST", "/v1/devices/take", `{"ttlSeconds":3600}`, http.StatusCreated, "Idempotency-Key", key)
	if again.header.Get("Idempotent-Replayed") != "true" || again.body["deviceId"] != first.body["deviceId"] {
		w.t.Errorf("take retried with its key on the other instance: got %v %v; want %v replayed", again.header, again.body, first.body)
	}
	w.counts.takeReplays++
}

// settle delivers everything, held back or new, until the provider has
// nothing more to say and no follow-up is pending.
func (w *walk) settle(ctx context.Context) {
	w.t.Helper()
	pool := w.one.app.db.Pool
	quiet := 0
	for round := 0; quiet < 3; round++ {
		if round > 600 {
			w.t.Fatalf("the walk did not settle within 600 rounds")
		}
		w.deliver(true)
		w.see()
		w.act()
		var pending int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM payment_followups WHERE status IN ('pending', 'retrying')`).Scan(&pending); err != nil {
			w.t.Fatal(err)
		}
		w.prov.mu.Lock()
		more := len(w.prov.events)
		w.prov.mu.Unlock()
		if pending == 0 && more == 0 && len(w.pending) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkReconcile runs reconciliation as `phonefleet fulfilments
// reconcile` does (the operator's application object over the same
// database and provider).
func (w *walk) checkReconcile(ctx context.Context, env map[string]string) {
	w.t.Helper()
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opEnv := map[string]string{"DATABASE_URL": env["DATABASE_URL"], "SERVICE_DATA_DIR": env["SERVICE_DATA_DIR"],
		"SERVICE_STRIPE_SECRET_KEY": env["SERVICE_STRIPE_SECRET_KEY"], "SERVICE_STRIPE_API_BASE": env["SERVICE_STRIPE_API_BASE"],
		"SERVICE_CATALOG_FILE": env["SERVICE_CATALOG_FILE"]}
	cfg, err := config.Load(fs, nil, func(k string) string { return opEnv[k] })
	if err != nil {
		w.t.Fatal(err)
	}
	op, err := OpenOperator(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		w.t.Fatal(err)
	}
	defer op.Close(context.WithoutCancel(ctx))
	rep, err := op.App.Provisioning.Reconcile.Handle(ctx, provisioning.Reconcile{})
	if err != nil {
		w.t.Fatalf("reconcile: %v", err)
	}
	w.t.Logf("reconcile compared %d accounts, %d orders, %d fulfilments with %d subscriptions, %d payments, %d refunds (%d invoice payments)",
		rep.Accounts, rep.Orders, rep.Fulfilments, rep.Subscriptions, rep.Payments, rep.Refunds, rep.InvoicePayments)
	for _, d := range rep.Differences {
		w.t.Errorf("reconcile: DIFFERENCE %s", d)
	}
}

func (w *walk) orderOf(id string) *walkOrder {
	for _, o := range w.orders {
		if o.order == id {
			return o
		}
	}
	return nil
}

// checkFulfilments: every phone the walk bought is listed by GET
// /v1/fulfilments in the state the walk and the provider left it in, and
// no device is held by two live phones.
func (w *walk) checkFulfilments() {
	w.t.Helper()
	held := map[string]string{}
	for _, org := range sortedKeys(w.tokens) {
		listed := w.fulfilments(org)
		for id, f := range listed {
			dev, _ := f["deviceId"].(string)
			if f["state"] == domain.FulfilmentProvisionedState && dev != "" {
				if other, twice := held[dev]; twice {
					w.t.Errorf("device %s is held by two live phones, %s and %s", dev, other, id)
				}
				held[dev] = id
			}
		}
		for _, o := range w.orders {
			if o.org != org {
				continue
			}
			subEnded := w.subscriptionEnded(o.sub)
			for _, id := range o.fulfilments {
				f := listed[id]
				if f == nil {
					w.t.Errorf("%s of order %s (%s) is not listed", id, o.order, o.kind)
					continue
				}
				reason, _ := f["cancelledReason"].(string)
				want, ended := o.ended[id]
				switch {
				case ended && (f["state"] != domain.FulfilmentCancelledState || (reason != want && o.endedBy == "")):
					w.t.Errorf("%s of order %s (%s): listed %s %s; want cancelled %s (the provider's end: %q of %s)", id, o.order, o.kind,
						f["state"], reason, want, o.endedBy, o.providerCharge)
				case !ended && subEnded && f["state"] == domain.FulfilmentCancelledState:
				case !ended && f["state"] == domain.FulfilmentCancelledState && o.kind == "day" && reason == domain.EndDayPassExpired:
				case !ended && f["state"] != domain.FulfilmentProvisionedState && f["state"] != domain.FulfilmentAwaitingState:
					w.t.Errorf("%s of order %s (%s): listed %s %s; want it live (the provider's subscription %s ended: %v)", id, o.order, o.kind,
						f["state"], reason, o.sub, subEnded)
				case !ended && subEnded:
					w.t.Errorf("%s of order %s is %s but the provider ended its subscription %s", id, o.order, f["state"], o.sub)
				}
			}
		}
	}
}

func (w *walk) subscriptionEnded(id string) bool {
	w.prov.mu.Lock()
	defer w.prov.mu.Unlock()
	s := w.prov.subs[id]
	return s != nil && s.Status == "canceled"
}

// checkMoney: every charge at the provider bills the phones live when it
// was made, and what went back (refunds, disputes) is exactly what the
// walk's ends owe of it: every cent kept is a unit delivered for its
// period.
func (w *walk) checkMoney() {
	w.t.Helper()
	w.prov.mu.Lock()
	defer w.prov.mu.Unlock()
	ours := map[string]bool{}
	for _, o := range w.orders {
		for _, id := range o.charges {
			ours[id] = true
			c := w.prov.chs[id]
			if c.Amount != o.billed[id] {
				w.t.Errorf("charge %s of order %s (%s) billed %d; the phones live then cost %d (ended %v, by the provider: %q)",
					id, o.order, o.kind, c.Amount, o.billed[id], o.ended, o.endedBy)
			}
			back := c.Refunded + c.Disputed
			if back == o.owed[id] {
				continue
			}
			w.t.Errorf("charge %s of order %s (%s): %d went back (refunded %d, disputed %d); the walk's ends owe %d (ended %v)",
				id, o.order, o.kind, back, c.Refunded, c.Disputed, o.owed[id], o.ended)
		}
	}
	for id := range w.prov.chs {
		if !ours[id] {
			w.t.Errorf("charge %s is no purchase or renewal of the walk's", id)
		}
	}
}

// checkUpcoming: GET /v1/billing/upcoming answers what the provider will
// bill each organisation, and that is the price of its phones that renew.
func (w *walk) checkUpcoming() {
	w.t.Helper()
	for _, org := range sortedKeys(w.tokens) {
		w.prov.mu.Lock()
		customer := w.prov.cus[org]
		w.prov.mu.Unlock()
		if customer == "" {
			continue
		}
		provider := w.prov.renewingAmount(customer)
		r, err := w.call(w.live(0), w.tokens[org], "GET", "/v1/billing/upcoming", "")
		if err != nil {
			w.t.Fatal(err)
		}
		var got int64
		if r.status == http.StatusOK {
			got = int64(r.body["amountDue"].(float64))
		} else if provider != 0 {
			w.t.Errorf("%s: GET /v1/billing/upcoming %d %s; the provider will bill %d", org, r.status, r.raw, provider)
			continue
		}
		if got != provider {
			w.t.Errorf("%s: GET /v1/billing/upcoming says %d; the provider will bill %d", org, got, provider)
		}
		var renewing int64
		listed := w.fulfilments(org)
		for _, o := range w.orders {
			if o.org != org || o.sub == "" || w.subscriptionEnded(o.sub) {
				continue
			}
			for _, f := range o.fulfilments {
				if v := listed[f]; v != nil && v["state"] != domain.FulfilmentCancelledState && v["renewalCancelled"] != true {
					renewing += o.unit
				}
			}
		}
		if renewing != provider {
			w.t.Errorf("%s: its renewing phones cost %d a month; the provider will bill %d", org, renewing, provider)
		}
	}
}

// checkUsage: GET /v1/usage reports time only on devices the organisation
// held (its phones and the pool devices it took).
func (w *walk) checkUsage() {
	w.t.Helper()
	for _, org := range sortedKeys(w.tokens) {
		r := w.must(0, w.tokens[org], "GET", "/v1/usage", "", http.StatusOK)
		devs, _ := r.body["devices"].([]any)
		var sum float64
		for _, d := range devs {
			sum += d.(map[string]any)["seconds"].(float64)
		}
		if total, _ := r.body["totalSeconds"].(float64); total < sum-0.001 || total > sum+0.001 {
			w.t.Errorf("%s: usage total %v; its devices add up to %v", org, total, sum)
		}
		takes := 0
		for _, o := range w.orders {
			if o.org == org && o.kind == "payg" && o.acted {
				takes++
			}
		}
		if takes == 0 && len(devs) > 0 {
			w.t.Errorf("%s took nothing from the pool and leased nothing; usage reports %v", org, devs)
		}
	}
}

// checkRebuilds rebuilds the fulfilments, usage and follow-ups
// projections and compares their rows with what they held before.
func (w *walk) checkRebuilds(ctx context.Context) {
	w.t.Helper()
	a := w.one.app
	for _, p := range []struct {
		name    string
		queries []string
	}{
		{projections.FulfilmentsName, []string{`SELECT f::text FROM fulfilments f ORDER BY fulfilment_id`,
			`SELECT e::text FROM fulfilment_estimates e ORDER BY e::text`}},
		{projections.UsageName, []string{`SELECT u::text FROM usage_intervals u ORDER BY u::text`}},
		{projections.PaymentFollowupsName, []string{`SELECT f::text FROM payment_followups f ORDER BY followup_id`,
			`SELECT f::text FROM payment_followup_fulfilments f ORDER BY f::text`}},
	} {
		rows := func() string {
			var b strings.Builder
			for _, q := range p.queries {
				r, err := a.db.Pool.Query(ctx, q)
				if err != nil {
					w.t.Fatal(err)
				}
				for r.Next() {
					var s string
					if err := r.Scan(&s); err != nil {
						w.t.Fatal(err)
					}
					b.WriteString(s + "\n")
				}
				r.Close()
			}
			return b.String()
		}
		before := rows()
		if err := a.runner.Rebuild(ctx, p.name, nil); err != nil {
			w.t.Fatalf("rebuild %s: %v", p.name, err)
		}
		if after := rows(); after != before {
			w.t.Errorf("rebuilding %s changed its rows:\nbefore\n%s\nafter\n%s", p.name, before, after)
		}
		w.t.Logf("rebuilt %s: %d rows equal", p.name, strings.Count(before, "\n"))
	}
}

// walkProcess is instance two of the walk: this test binary run again as
// TestPaymentsWalkInstance, a service of its own on the same database,
// bus and provider.
type walkProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startWalkProcess starts instance two with env and waits for its address;
// its log goes to logs. It is killed when the test ends.
func startWalkProcess(t *testing.T, env map[string]string, logs io.Writer) *walkProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPaymentsWalkInstance$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), "PAYWALK_INSTANCE=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &walkProcess{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "PAYWALK_ADDR="); ok {
				addr <- a
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	select {
	case p.addr = <-addr:
	case <-p.done:
		t.Fatal("instance two ended before it served")
	case <-time.After(2 * time.Minute):
		t.Fatal("instance two did not serve within two minutes")
	}
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *walkProcess) kill(t *testing.T) {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Errorf("instance two did not end within a minute of SIGKILL")
	}
}

// TestPaymentsWalkInstance is instance two of TestPaymentsWalk, which runs
// this test binary again for it (PAYWALK_INSTANCE=1): the service,
// configured by the environment, serving until it is killed. It prints
// its address as PAYWALK_ADDR=host:port.
func TestPaymentsWalkInstance(t *testing.T) {
	if os.Getenv("PAYWALK_INSTANCE") != "1" {
		t.Skip("instance two of TestPaymentsWalk, run by it")
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", "two")
	a, err := New(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PAYWALK_ADDR=%s\n", a.Addr())
	_ = a.Run(context.Background())
}
