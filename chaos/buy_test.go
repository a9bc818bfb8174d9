//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

const (
	// shopSecret is the webhook secret the provider signs its events with.
	shopSecret = "whsec_chaos_shop"
	// shopOrg and shopBuyer are the organisation buying and its admin, as
	// the fake authorization server names them.
	shopOrg, shopBuyer = "org_chaos_shop", "user_chaos_buyer"
	shopPublicURL      = "http://shop.chaos.test"
	shopDatabase       = "chaos_shop"
	// shopChoice is what the buyer buys: a one-day emulator pass (a
	// payment, one phone).
	shopChoice = `{"sku":"emulator","billing":"day"}`
	// buyKeyMax is how long the buyer repeats one checkout key: an attempt
	// whose instance died answers 409 idempotency_conflict (retryable)
	// until it is taken over, CheckoutAbandonedAfter after it started.
	buyKeyMax = domain.CheckoutAbandonedAfter + 30*time.Second
)

// shop is the purchase side of the suite. Checkout (POST
// /v1/checkout-sessions) and the provider's webhook (POST /webhooks/stripe)
// are served by hosted deployments only, and a hosted deployment delivers
// no webhook to a loopback receiver nor trusts SERVICE_WEBHOOK_CA_FILE, so
// the two instances the rest of the suite drives (local mode) cannot sell.
// The shop is two more instances, hosted, on a database of their own in
// the suite's PostgreSQL cluster (so they go through its immediate
// restarts), killed with -9 in the same step as the local instance of the
// same number, with stripe-mock as the payment provider behind ledger (the
// provider's records of what was paid, for `phonefleet fulfilments
// reconcile`) and the fake authorization server of the service's tests.
type shop struct {
	w      *world
	idp    *identitytest.IdP
	inst   [2]*proc
	base   [2]string
	dsn    string
	api    string // the provider's API base: ledger in front of stripe-mock
	token  string
	amount int64 // the day pass's price

	ledgerMu sync.Mutex
	paid     map[string]json.RawMessage // order -> the provider's payment intent

	mu        sync.Mutex
	purchases []*purchase
	late      []*purchase // paid events the provider delivers again at the end

	seq       atomic.Int64
	retries   atomic.Int64
	payPosts  atomic.Int64
	outcomes  map[string]int // the webhook's outcomes as answered
	lateDone  int
	concurred atomic.Int64 // events delivered to both instances at once
}

// purchase is one key the buyer handed out and what it was told.
type purchase struct {
	key         string
	answer      string // started, failed:<code>, gave_up:<last>, abandoned:<why> (the load stopped)
	order       string
	fulfilments []string
	paid        string // acknowledged (the webhook answered 200), gave_up:<last>, or "" (not paid)
	event       []byte
}

// startShop creates the shop's database, starts the provider's ledger in
// front of stripe-mock, the authorization server and the two hosted
// instances.
func (w *world) startShop() *shop {
	t := w.t
	s := &shop{w: w, paid: map[string]json.RawMessage{}, outcomes: map[string]int{}}
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.pg.AdminDSN())
	if err != nil {
		t.Fatalf("the shop's database: %v", err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+shopDatabase)
	conn.Close(ctx)
	if err != nil {
		t.Fatalf("the shop's database: %v", err)
	}
	u, _ := url.Parse(w.pg.DSN())
	u.Path = "/" + shopDatabase
	s.dsn = u.String()

	s.api = s.startLedger(testutil.StripeMock(t))
	s.idp = identitytest.New(t)
	s.idp.SetRole(shopBuyer, shopOrg, "admin")
	s.token = s.idp.Console(t, shopPublicURL+"/mcp", shopBuyer, shopOrg, "admin")

	env := []string{"DATABASE_URL=" + s.dsn, "SERVICE_DATA_DIR=" + filepath.Join(w.dir, "shopdata"), "SERVICE_MODE=hosted",
		"SERVICE_PUBLIC_URL=" + shopPublicURL, "SERVICE_OAUTH_ISSUER=" + s.idp.Issuer, "SERVICE_OAUTH_JWKS_URL=" + s.idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL=" + s.idp.RoleURL, "SERVICE_RATE_LIMIT_AUTHENTICATED=100000", "SERVICE_RATE_LIMIT_ANONYMOUS=100000",
		"SERVICE_SIM_DEVICES=0", "SERVICE_STRIPE_SECRET_KEY=sk_test_chaos", "SERVICE_STRIPE_API_BASE=" + s.api,
		"SERVICE_STRIPE_WEBHOOK_SECRET=" + shopSecret, "SERVICE_LOG_LEVEL=info"}
	for i := range s.inst {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		s.base[i] = "http://" + addr
		s.inst[i] = &proc{name: fmt.Sprintf("shop-%d", i), argv: []string{w.bin, "serve", "-addr", addr}, env: env}
		t.Cleanup(s.inst[i].kill)
		s.start(i) // one at a time: the first migrates the database
	}

	var prices struct {
		Skus []struct {
			Sku        string `json:"sku"`
			Billing    string `json:"billing"`
			UnitAmount *int64 `json:"unitAmount"`
		} `json:"skus"`
	}
	status, b, err := s.do(0, "GET", "/v1/skus", "", "")
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &prices) != nil {
		t.Fatalf("the shop's price list: %d %.300s (%v)", status, b, err)
	}
	for _, r := range prices.Skus {
		if r.Sku == "emulator" && r.Billing == "day" && r.UnitAmount != nil {
			s.amount = *r.UnitAmount
		}
	}
	if s.amount == 0 {
		t.Fatalf("the shop's price list has no emulator day pass: %.500s", b)
	}
	return s
}

// start starts shop instance i and waits until it serves.
func (s *shop) start(i int) {
	from := s.inst[i].start(s.w.t)
	s.inst[i].waitLog(s.w.t, from, 2*time.Minute, "phonefleet serving")
}

// do sends a request to shop instance i as the buyer.
func (s *shop) do(i int, method, path, body, key string) (int, []byte, error) {
	h := []string{"Authorization", "Bearer " + s.token}
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return s.w.c.do(s.w.ctx, method, s.base[i]+path, body, h...)
}

// startLedger serves the provider's API: stripe-mock, which stores
// nothing and lists its fixed fixtures, for everything but the lists
// reconciliation reads, which answer what the buyer paid (one succeeded
// payment intent per paid order; no subscription, no refund).
func (s *shop) startLedger(upstream string) string {
	target, err := url.Parse(upstream)
	if err != nil {
		s.w.t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	list := func(w http.ResponseWriter, path string, data []json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_chaos_ledger")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": path, "has_more": false, "data": data})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			switch r.URL.Path {
			case "/v1/subscriptions", "/v1/refunds":
				list(w, r.URL.Path, []json.RawMessage{})
				return
			case "/v1/payment_intents":
				s.ledgerMu.Lock()
				data := make([]json.RawMessage, 0, len(s.paid))
				for _, pi := range s.paid {
					data = append(data, pi)
				}
				s.ledgerMu.Unlock()
				list(w, r.URL.Path, data)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	s.w.t.Cleanup(srv.Close)
	return srv.URL
}

// buyer buys one day pass at a time until the load stops: a checkout
// under a new Idempotency-Key, repeated under the same key (switching
// instance) until it has an answer, then its payment reported as the
// provider reports it — checkout.session.completed signed with the
// webhook secret, repeated until the service acknowledges it with a 200.
// Some events come late (a few seconds after the payment), some twice at
// once (one to each instance), and every third is delivered again after
// the load stopped.
func (s *shop) buyer(l *load) {
	for l.ctx.Err() == nil {
		n := s.seq.Add(1)
		p := &purchase{key: fmt.Sprintf("chaos-buy-%06d", n)}
		first := time.Now()
		for attempt := 0; p.answer == ""; attempt++ {
			if attempt > 0 {
				s.retries.Add(1)
				time.Sleep(retryWait)
			}
			status, b, err := s.do(attempt%2, "POST", "/v1/checkout-sessions", shopChoice, p.key)
			code, _ := errorCode(b)
			switch {
			case err == nil && status == http.StatusOK:
				var cs struct {
					OrderID       string   `json:"orderId"`
					FulfilmentIDs []string `json:"fulfilmentIds"`
				}
				if err := json.Unmarshal(b, &cs); err != nil || cs.OrderID == "" || len(cs.FulfilmentIDs) != 1 {
					p.answer = fmt.Sprintf("failed:bad answer %.200s", b)
					break
				}
				p.answer, p.order, p.fulfilments = "started", cs.OrderID, cs.FulfilmentIDs
			case !retryableAnswer(status, b, err):
				p.answer = fmt.Sprintf("failed:%d %s", status, code)
			case time.Since(first) > buyKeyMax:
				p.answer = fmt.Sprintf("gave_up:%d %s %v", status, code, err)
			case l.ctx.Err() != nil && code == "idempotency_conflict":
				// The attempt's instance was killed while it ran: the key
				// is taken over CheckoutAbandonedAfter after it started.
				// Once the load has stopped the buyer does not wait for
				// that (the short form stays short); nothing of the key
				// was acknowledged.
				p.answer = "abandoned:attempt running after the load stopped"
			}
		}
		s.mu.Lock()
		s.purchases = append(s.purchases, p)
		s.mu.Unlock()
		if p.answer != "started" {
			time.Sleep(time.Second)
			continue
		}
		s.pay(p, n)
	}
}

// pay records the payment at the provider and delivers its event.
func (s *shop) pay(p *purchase, n int64) {
	pi := "pi_chaos_" + p.order
	meta := map[string]string{payments.MetaOrgID: shopOrg, payments.MetaOrderID: p.order}
	record, _ := json.Marshal(map[string]any{"id": pi, "object": "payment_intent", "status": "succeeded", "amount": s.amount,
		"amount_received": s.amount, "currency": "usd", "metadata": meta, "created": time.Now().Unix()})
	s.ledgerMu.Lock()
	s.paid[p.order] = record
	s.ledgerMu.Unlock()
	obj, _ := json.Marshal(map[string]any{"id": "cs_chaos_" + p.order, "object": "checkout.session", "mode": "payment",
		"status": "complete", "payment_status": "paid", "payment_intent": pi, "client_reference_id": p.order, "metadata": meta})
	p.event, _ = json.Marshal(map[string]any{"id": "evt_chaos_paid_" + p.order, "object": "event", "type": payments.EventCheckoutCompleted,
		"created": time.Now().Unix(), "livemode": false, "api_version": "2024-06-20", "data": map[string]any{"object": json.RawMessage(obj)}})
	switch {
	case n%5 == 0: // late
		time.Sleep(3 * time.Second)
	case n%4 == 0: // twice at once
		s.concurred.Add(1)
		var wg sync.WaitGroup
		var other string
		wg.Go(func() { other = s.deliver(p.event, 1) })
		p.paid = s.deliver(p.event, 0)
		wg.Wait()
		if p.paid == "acknowledged" {
			p.paid = other
		}
		s.keepLate(p, n)
		return
	}
	p.paid = s.deliver(p.event, int(n%2))
	s.keepLate(p, n)
}

func (s *shop) keepLate(p *purchase, n int64) {
	if n%3 == 0 {
		s.mu.Lock()
		s.late = append(s.late, p)
		s.mu.Unlock()
	}
}

// deliver posts one provider event, signed now, to the provider-webhook
// route of instance i and then the instances in turn, as the provider
// retries, until it is answered 200: "acknowledged", or gave_up:<last>.
func (s *shop) deliver(event []byte, i int) string {
	first := time.Now()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.retries.Add(1)
			time.Sleep(retryWait)
		}
		s.payPosts.Add(1)
		sig := payments.SignWebhookForTest(event, shopSecret, time.Now())
		status, b, err := s.w.c.do(s.w.ctx, "POST", s.base[(i+attempt)%2]+"/webhooks/stripe", string(event), "Stripe-Signature", sig)
		if err == nil && status == http.StatusOK {
			var r struct {
				Outcome string `json:"outcome"`
			}
			_ = json.Unmarshal(b, &r)
			s.mu.Lock()
			s.outcomes[r.Outcome]++
			s.mu.Unlock()
			return "acknowledged"
		}
		code, _ := errorCode(b)
		if (err == nil && !retryableAnswer(status, b, err)) || time.Since(first) > keyMax {
			return fmt.Sprintf("gave_up:%d %s %v", status, code, err)
		}
	}
}

// fulfilment is one row of GET /v1/fulfilments.
type fulfilment struct {
	FulfilmentID string  `json:"fulfilmentId"`
	OrderID      string  `json:"orderId"`
	State        string  `json:"state"`
	DeviceID     *string `json:"deviceId"`
}

func (s *shop) fulfilments() ([]fulfilment, error) {
	var all []fulfilment
	q := url.Values{"limit": {"200"}}
	for {
		status, b, err := s.do(0, "GET", "/v1/fulfilments?"+q.Encode(), "", "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/fulfilments: %d %.300s (%v)", status, b, err)
		}
		var page struct {
			Fulfilments []fulfilment `json:"fulfilments"`
			NextCursor  string       `json:"nextCursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Fulfilments...)
		if page.NextCursor == "" {
			return all, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// check delivers the events kept for late redelivery again (each must be
// acknowledged and change nothing), then checks that every acknowledged
// payment was fulfilled exactly once — its order's one phone, live, no
// device held by two phones, nothing fulfilled that was not paid — as GET
// /v1/fulfilments lists it, and that `phonefleet fulfilments reconcile`
// against the provider's records finds no difference; and prints the
// counts.
func (s *shop) check() {
	t := s.w.t
	s.mu.Lock()
	purchases, late := append([]*purchase(nil), s.purchases...), append([]*purchase(nil), s.late...)
	s.mu.Unlock()
	for _, p := range late {
		if got := s.deliver(p.event, 1); got != "acknowledged" {
			t.Errorf("purchase %s: its paid event delivered again after the load: %s; want acknowledged", p.key, got)
		}
		s.lateDone++
	}

	var fs []fulfilment
	eventually(t, time.Minute, "the shop's fulfilments listed", func() error {
		var err error
		fs, err = s.fulfilments()
		return err
	})
	byOrder := map[string][]fulfilment{}
	holder := map[string]string{}
	states := map[string]int{}
	for _, f := range fs {
		byOrder[f.OrderID] = append(byOrder[f.OrderID], f)
		states[f.State]++
		if f.DeviceID != nil && *f.DeviceID != "" && f.State == "provisioned" {
			if other, ok := holder[*f.DeviceID]; ok {
				t.Errorf("device %s is held by two phones bought: %s and %s", *f.DeviceID, other, f.FulfilmentID)
			}
			holder[*f.DeviceID] = f.FulfilmentID
		}
	}
	answers := map[string]int{}
	acknowledged, payGaveUp := 0, 0
	ours := map[string]bool{}
	for _, p := range purchases {
		a := p.answer
		if len(a) > 60 {
			a = a[:60]
		}
		answers[a]++
		if strings.HasPrefix(p.answer, "gave_up:") {
			t.Errorf("purchase %s: no answer to its checkout for %s (%s); spec 4.1: repeating the same request shortly gets the answer", p.key, buyKeyMax, p.answer)
		}
		if p.order == "" {
			continue
		}
		ours[p.order] = true
		switch {
		case p.paid == "acknowledged":
			acknowledged++
			got := byOrder[p.order]
			switch {
			case len(got) == 0:
				t.Errorf("purchase %s (order %s): its payment was acknowledged but no phone was fulfilled (lost)", p.key, p.order)
			case len(got) > 1:
				t.Errorf("purchase %s (order %s): %d phones fulfilled for one paid phone: %+v", p.key, p.order, len(got), got)
			case got[0].FulfilmentID != p.fulfilments[0]:
				t.Errorf("purchase %s (order %s): fulfilled as %s; the checkout promised %s", p.key, p.order, got[0].FulfilmentID, p.fulfilments[0])
			case got[0].State != "provisioned" && got[0].State != "awaiting_provisioning":
				t.Errorf("purchase %s (order %s): its phone is %s; want provisioned or awaiting provisioning", p.key, p.order, got[0].State)
			}
		case strings.HasPrefix(p.paid, "gave_up:"):
			payGaveUp++
		}
	}
	for order, got := range byOrder {
		if !ours[order] {
			t.Errorf("order %s has %d phones fulfilled but the buyer never started it", order, len(got))
		}
	}
	for _, p := range purchases {
		if p.order != "" && p.paid == "" && len(byOrder[p.order]) > 0 {
			t.Errorf("purchase %s (order %s): fulfilled though never paid", p.key, p.order)
		}
	}

	cmd := exec.Command(s.w.bin, "fulfilments", "reconcile")
	cmd.Env = append(cmd.Environ(), "DATABASE_URL="+s.dsn, "SERVICE_DATA_DIR="+filepath.Join(s.w.dir, "shopdata"),
		"SERVICE_STRIPE_SECRET_KEY=sk_test_chaos", "SERVICE_STRIPE_API_BASE="+s.api)
	out, err := cmd.CombinedOutput()
	summary := strings.TrimSpace(string(out))
	if err != nil || !strings.Contains(summary, "OK: no differences") {
		t.Errorf("phonefleet fulfilments reconcile: %v\n%s", err, summary)
	}
	if i := strings.LastIndex(summary, "\n"); i >= 0 {
		summary = summary[i+1:]
	}

	s.mu.Lock()
	outcomes := fmt.Sprint(s.outcomes)
	s.mu.Unlock()
	stateList := make([]string, 0, len(states))
	for st, n := range states {
		stateList = append(stateList, fmt.Sprintf("%s %d", st, n))
	}
	sort.Strings(stateList)
	fmt.Printf(`  purchases               %d checkouts handed out (hosted shop instances; clients saw %v); %d payments acknowledged, %d gave up; %d webhook posts (%d retries in all; answered %v), %d delivered to both instances at once, %d delivered again after the load
  fulfilments             %d listed (%s) for %d paid orders; reconcile: %s
`, len(purchases), answers, acknowledged, payGaveUp, s.payPosts.Load(), s.retries.Load(), outcomes, s.concurred.Load(), s.lateDone,
		len(fs), strings.Join(stateList, ", "), acknowledged, summary)
}
