package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/payments"
)

// walkProvider is the payment provider of the payments walk: stripe-mock
// validates every request the service makes (each is sent to it first and
// its refusal passed back), and this ledger keeps what stripe-mock cannot,
// because it stores nothing: the customers, sessions, subscriptions (and
// their one item each), payments, invoices, charges, refunds and disputes
// the walk made. Every call the service makes about them is answered from
// the ledger, as Stripe answers it (internal/payments/stripe.go is the
// client): the sessions read, a subscription read and updated, its item's
// quantity set, its paid invoices listed (newest first, with their charge
// expanded), refunds of a payment intent or of a charge, a charge read
// with its invoice expanded, the reconciliation lists (subscriptions,
// payment intents, refunds, disputes) and the upcoming invoice. Anything
// else falls through to stripe-mock's fixed fixtures and is counted in
// calls as "mock …", so a call the ledger should answer shows. What a
// real provider would announce (a session paid, a renewal, a subscription
// changed or ended, a refund, a dispute) is queued as a webhook event for
// the walk to deliver.
//
// Not modelled: prorations. A quantity change with proration_behavior
// create_prorations is applied, but the credit Stripe would put on the
// next invoice is not billed (the walk's renewals bill the quantity at
// its unit price); the walk does not compare prorated amounts.
type walkProvider struct {
	t     *testing.T
	mock  *httputil.ReverseProxy
	srv   *httptest.Server
	mu    sync.Mutex
	n     int
	now   func() time.Time
	idem  map[string][]byte // Idempotency-Key → the first answer
	cus   map[string]string // org → customer
	sess  map[string]*wpSession
	subs  map[string]*wpSub
	pis   map[string]*wpPayment
	chs   map[string]*wpCharge
	refs  []*wpRefund
	disps []*wpDispute
	// events are the provider's webhook events not yet taken by the walk.
	events []payments.Event
	// calls counts the requests by method and path pattern.
	calls map[string]int
}

type wpSession struct {
	ID, Mode, Status, Customer, Order, Org string
	Unit                                   int64
	Qty                                    int64
	Currency                               string
	Sub, PI                                string
}

type wpSub struct {
	ID, Customer, Status, Order, Org string
	Unit, Qty                        int64
	Currency                         string
	Start, End                       time.Time
	CancelAtPeriodEnd                bool
	CanceledAt                       time.Time
	Invoices                         []string // charge ids, in order
}

type wpPayment struct {
	ID, Customer, Charge, Order, Org string // Order and Org are set for a payment-mode session's
	Amount                           int64
	Currency                         string
	Created                          time.Time
}

type wpCharge struct {
	ID, PI, Invoice, Sub, Customer string
	Amount, Refunded, Disputed     int64
	Currency                       string
	Created                        time.Time
	// An invoice's charge: the invoice's billing reason, and the period
	// and quantity it billed.
	Reason     string
	Start, End time.Time
	Qty        int64
}

type wpRefund struct {
	ID, PI, Charge string
	Amount         int64
	Currency       string
	Created        time.Time
}

type wpDispute struct {
	ID, Charge, PI string
	Amount         int64
	Currency       string
	Created        time.Time
}

// newWalkProvider starts the ledger in front of stripe-mock (upstream).
func newWalkProvider(t *testing.T, upstream string) *walkProvider {
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &walkProvider{t: t, mock: httputil.NewSingleHostReverseProxy(target), now: time.Now,
		idem: map[string][]byte{}, cus: map[string]string{}, sess: map[string]*wpSession{}, subs: map[string]*wpSub{},
		pis: map[string]*wpPayment{}, chs: map[string]*wpCharge{}, calls: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *walkProvider) id(prefix string) string {
	p.n++
	return fmt.Sprintf("%s_walk%06d", prefix, p.n)
}

// validated sends the request to stripe-mock and reports whether it
// accepted it; a refusal is written to w.
func (p *walkProvider) validated(w http.ResponseWriter, r *http.Request, body []byte) bool {
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header.Del("Idempotency-Key") // stripe-mock is asked to validate, not to remember
	rec := httptest.NewRecorder()
	p.mock.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK {
		return true
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
	return false
}

func (p *walkProvider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	for k, v := range r.URL.Query() {
		form[k] = v
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// The route names the call without its object's id (a segment with a
	// digit, past /v1).
	shape := slices.Clone(parts)
	for i := 1; i < len(shape); i++ {
		if strings.ContainsAny(shape[i], "0123456789") {
			shape[i] = "{id}"
		}
	}
	route := r.Method + " /" + strings.Join(shape, "/")
	p.mu.Lock()
	p.calls[route]++
	key := r.Header.Get("Idempotency-Key")
	if key != "" && r.Method != http.MethodGet {
		if ans, ok := p.idem[r.Method+" "+r.URL.Path+" "+key]; ok {
			p.mu.Unlock()
			writeStripe(w, http.StatusOK, json.RawMessage(ans))
			return
		}
	}
	p.mu.Unlock()
	if r.Method != http.MethodGet && !p.validated(w, r, body) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ans := p.answer(r.Method, parts, form)
	if ans == nil {
		p.calls["mock "+route]++
		p.mock.ServeHTTP(w, r.Clone(r.Context()))
		return
	}
	raw, err := json.Marshal(ans)
	if err != nil {
		p.t.Errorf("walk provider: %v", err)
	}
	if key != "" && r.Method != http.MethodGet && status == http.StatusOK {
		p.idem[r.Method+" "+r.URL.Path+" "+key] = raw
	}
	writeStripe(w, status, json.RawMessage(raw))
}

func writeStripe(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_walk")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func stripeError(status int, code, msg string) (int, any) {
	return status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "code": code, "message": msg}}
}

// answer is the ledger's answer to a call (nil: stripe-mock answers).
func (p *walkProvider) answer(method string, parts []string, f url.Values) (int, any) {
	at := func(i int) string {
		if i < len(parts) {
			return parts[i]
		}
		return ""
	}
	switch {
	case method == "POST" && at(1) == "customers" && at(2) == "":
		org := f.Get("metadata[org_id]")
		if p.cus[org] == "" {
			p.cus[org] = p.id("cus")
		}
		return 200, map[string]any{"id": p.cus[org], "object": "customer", "balance": 0, "metadata": map[string]string{"org_id": org}}
	case method == "GET" && at(1) == "customers" && at(2) != "":
		return 200, map[string]any{"id": at(2), "object": "customer", "balance": 0}
	case method == "POST" && at(1) == "checkout" && at(2) == "sessions" && at(3) == "":
		unit, _ := strconv.ParseInt(f.Get("line_items[0][price_data][unit_amount]"), 10, 64)
		qty, _ := strconv.ParseInt(f.Get("line_items[0][quantity]"), 10, 64)
		s := &wpSession{ID: p.id("cs"), Mode: f.Get("mode"), Status: "open", Customer: f.Get("customer"),
			Order: f.Get("metadata[order_id]"), Org: f.Get("metadata[org_id]"), Unit: unit, Qty: qty, Currency: f.Get("currency")}
		p.sess[s.ID] = s
		return 200, p.sessionJSON(s)
	case method == "POST" && at(1) == "checkout" && at(2) == "sessions" && at(4) == "expire":
		s := p.sess[at(3)]
		if s == nil || s.Status != "open" {
			return stripeError(400, "", "this session is not open")
		}
		s.Status = "expired"
		p.emit(payments.EventCheckoutExpired, p.sessionJSON(s))
		return 200, p.sessionJSON(s)
	case method == "GET" && at(1) == "checkout" && at(2) == "sessions" && at(3) != "" && at(4) == "":
		s := p.sess[at(3)]
		if s == nil {
			return stripeError(404, "resource_missing", "no such checkout session")
		}
		return 200, p.sessionJSON(s)
	case method == "GET" && at(1) == "subscriptions" && at(2) != "":
		s := p.subs[at(2)]
		if s == nil {
			return stripeError(404, "resource_missing", "no such subscription")
		}
		return 200, p.subJSON(s)
	case method == "POST" && at(1) == "subscription_items" && at(2) != "":
		// The quantity is applied; a proration is not billed (see
		// walkProvider).
		s := p.subs[strings.TrimPrefix(at(2), "si_")]
		if s == nil || !strings.HasPrefix(at(2), "si_") {
			return stripeError(404, "resource_missing", "no such subscription item")
		}
		if s.Status == "canceled" {
			return stripeError(400, "", "the subscription is canceled")
		}
		if v := f.Get("quantity"); v != "" {
			s.Qty, _ = strconv.ParseInt(v, 10, 64)
		}
		p.emit(payments.EventSubscriptionUpdated, p.subJSON(s))
		return 200, p.itemJSON(s)
	case method == "GET" && at(1) == "invoices" && at(2) == "":
		return 200, stripeList("/v1/invoices", p.invoices(f))
	case method == "GET" && at(1) == "disputes" && at(2) == "":
		var data []any
		for _, d := range p.disps {
			data = append(data, p.disputeJSON(d))
		}
		return 200, stripeList("/v1/disputes", data)
	case method == "GET" && at(1) == "subscriptions" && at(2) == "":
		var data []any
		for _, id := range sortedKeys(p.subs) {
			data = append(data, p.subJSON(p.subs[id]))
		}
		return 200, stripeList("/v1/subscriptions", data)
	case method == "GET" && at(1) == "payment_intents" && at(2) == "":
		var data []any
		for _, id := range sortedKeys(p.pis) {
			data = append(data, p.paymentJSON(p.pis[id]))
		}
		return 200, stripeList("/v1/payment_intents", data)
	case method == "GET" && at(1) == "refunds" && at(2) == "":
		var data []any
		for _, r := range p.refs {
			data = append(data, refundJSON(r))
		}
		return 200, stripeList("/v1/refunds", data)
	case method == "POST" && at(1) == "subscriptions" && at(2) != "":
		s := p.subs[at(2)]
		if s == nil {
			return stripeError(404, "resource_missing", "no such subscription")
		}
		if v := f.Get("cancel_at_period_end"); v != "" && s.Status == "active" {
			s.CancelAtPeriodEnd = v == "true"
		}
		if v := f.Get("quantity"); v != "" {
			s.Qty, _ = strconv.ParseInt(v, 10, 64)
		}
		if v := f.Get("items[0][quantity]"); v != "" {
			s.Qty, _ = strconv.ParseInt(v, 10, 64)
		}
		p.emit(payments.EventSubscriptionUpdated, p.subJSON(s))
		return 200, p.subJSON(s)
	case method == "DELETE" && at(1) == "subscriptions" && at(2) != "":
		s := p.subs[at(2)]
		if s == nil {
			return stripeError(404, "resource_missing", "no such subscription")
		}
		if s.Status == "canceled" {
			return stripeError(400, "", "the subscription is already canceled")
		}
		p.endSub(s)
		return 200, p.subJSON(s)
	case method == "POST" && at(1) == "refunds":
		charge := f.Get("charge")
		if pi := p.pis[f.Get("payment_intent")]; pi != nil && charge == "" {
			charge = pi.Charge
		}
		r, err := p.refund(charge, f.Get("amount"))
		if err != "" {
			return stripeError(400, "charge_already_refunded", err)
		}
		return 200, refundJSON(r)
	case method == "GET" && at(1) == "charges" && at(2) != "":
		c := p.chs[at(2)]
		if c == nil {
			return stripeError(404, "resource_missing", "no such charge")
		}
		return 200, p.chargeJSON(c, expanded(f, "invoice"))
	case method == "GET" && at(1) == "invoices" && at(2) == "upcoming":
		inv, ok := p.upcoming(f.Get("customer"))
		if !ok {
			return stripeError(404, "invoice_upcoming_none", "no upcoming invoices for this customer")
		}
		if at(3) == "lines" {
			return 200, inv["lines"]
		}
		return 200, inv
	}
	return 0, nil
}

// expanded reports whether a request asks to expand what (stripe-go sends
// expand[0]=…, curl expand[]=…).
func expanded(f url.Values, what string) bool {
	for k, v := range f {
		if strings.HasPrefix(k, "expand[") && slices.Contains(v, what) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func stripeList(url string, data []any) map[string]any {
	if data == nil {
		data = []any{}
	}
	return map[string]any{"object": "list", "url": url, "has_more": false, "data": data}
}

func (p *walkProvider) sessionJSON(s *wpSession) map[string]any {
	m := map[string]any{"id": s.ID, "object": "checkout.session", "mode": s.Mode, "status": s.Status,
		"url": "https://checkout.walk.test/pay/" + s.ID, "customer": s.Customer, "client_reference_id": s.Order,
		"amount_total": s.Unit * s.Qty, "currency": s.Currency, "expires_at": p.now().Add(time.Hour).Unix(),
		"metadata": map[string]string{payments.MetaOrgID: s.Org, payments.MetaOrderID: s.Order}, "payment_status": "unpaid"}
	switch {
	case s.Status == "complete" && s.Mode == payments.ModeSetup:
		m["payment_status"], m["setup_intent"] = "no_payment_required", "seti_"+s.ID
	case s.Status == "complete":
		m["payment_status"] = "paid"
	}
	if s.Status != "open" {
		m["url"] = nil
	}
	if s.Sub != "" {
		m["subscription"] = s.Sub
	}
	if s.PI != "" {
		m["payment_intent"] = s.PI
	}
	return m
}

func (p *walkProvider) subJSON(s *wpSub) map[string]any {
	m := map[string]any{"id": s.ID, "object": "subscription", "status": s.Status, "customer": s.Customer,
		"metadata": map[string]string{payments.MetaOrgID: s.Org, payments.MetaOrderID: s.Order}, "created": s.Start.Unix(),
		"current_period_start": s.Start.Unix(), "current_period_end": s.End.Unix(), "cancel_at_period_end": s.CancelAtPeriodEnd,
		"items": stripeList("/v1/subscription_items", []any{p.itemJSON(s)})}
	if !s.CanceledAt.IsZero() {
		m["canceled_at"], m["ended_at"] = s.CanceledAt.Unix(), s.CanceledAt.Unix()
	}
	return m
}

// itemJSON is the one item of a subscription (its id is si_ and the
// subscription's).
func (p *walkProvider) itemJSON(s *wpSub) map[string]any {
	return map[string]any{"id": "si_" + s.ID, "object": "subscription_item", "subscription": s.ID, "quantity": s.Qty,
		"price": map[string]any{"id": "price_" + s.ID, "object": "price", "unit_amount": s.Unit, "currency": s.Currency}}
}

func (p *walkProvider) metadata(s *wpSub) map[string]string {
	return map[string]string{payments.MetaOrgID: s.Org, payments.MetaOrderID: s.Order}
}

// invoices lists the paid invoices (the ledger's invoices are all paid)
// as GET /v1/invoices does: of a subscription (subscription=…), created
// at or before created[lte] when given, newest first (the order of their
// charges), each charge expanded with expand[]=data.charge.
func (p *walkProvider) invoices(f url.Values) []any {
	if st := f.Get("status"); st != "" && st != "paid" {
		return nil
	}
	lte, _ := strconv.ParseInt(f.Get("created[lte]"), 10, 64)
	var data []any
	for _, id := range sortedKeys(p.subs) {
		s := p.subs[id]
		if sub := f.Get("subscription"); sub != "" && sub != s.ID {
			continue
		}
		for i := len(s.Invoices) - 1; i >= 0; i-- {
			c := p.chs[s.Invoices[i]]
			if f.Get("created[lte]") != "" && c.Created.Unix() > lte {
				continue
			}
			inv := p.invoiceJSON(s, c)
			if expanded(f, "data.charge") {
				inv["charge"] = p.chargeJSON(c, false)
			}
			data = append(data, inv)
		}
	}
	return data
}

func (p *walkProvider) disputeJSON(d *wpDispute) map[string]any {
	return map[string]any{"id": d.ID, "object": "dispute", "charge": d.Charge, "payment_intent": d.PI, "amount": d.Amount,
		"currency": d.Currency, "status": "needs_response", "reason": "fraudulent", "created": d.Created.Unix(),
		"metadata": map[string]string{}}
}

func (p *walkProvider) paymentJSON(pi *wpPayment) map[string]any {
	m := map[string]any{"id": pi.ID, "object": "payment_intent", "status": "succeeded", "amount": pi.Amount,
		"amount_received": pi.Amount, "currency": pi.Currency, "customer": pi.Customer, "latest_charge": pi.Charge,
		"created": pi.Created.Unix(), "metadata": map[string]string{}}
	if pi.Order != "" {
		m["metadata"] = map[string]string{payments.MetaOrgID: pi.Org, payments.MetaOrderID: pi.Order}
	}
	return m
}

func (p *walkProvider) chargeJSON(c *wpCharge, expandInvoice bool) map[string]any {
	m := map[string]any{"id": c.ID, "object": "charge", "payment_intent": c.PI, "customer": c.Customer, "amount": c.Amount,
		"amount_refunded": c.Refunded, "refunded": c.Refunded >= c.Amount, "disputed": c.Disputed > 0, "currency": c.Currency,
		"status": "succeeded", "paid": true, "created": c.Created.Unix(), "metadata": map[string]string{}}
	if c.Invoice != "" {
		m["invoice"] = c.Invoice
		if expandInvoice {
			m["invoice"] = p.invoiceJSON(p.subs[c.Sub], c)
		}
	}
	return m
}

func refundJSON(r *wpRefund) map[string]any {
	return map[string]any{"id": r.ID, "object": "refund", "payment_intent": r.PI, "charge": r.Charge, "amount": r.Amount,
		"currency": r.Currency, "status": "succeeded", "created": r.Created.Unix(), "metadata": map[string]string{}}
}

func (p *walkProvider) emit(typ string, obj map[string]any) {
	raw, err := json.Marshal(obj)
	if err != nil {
		p.t.Errorf("walk provider: %v", err)
	}
	p.events = append(p.events, payments.Event{ID: p.id("evt"), Type: typ, Created: p.now(), Object: raw})
}

// takeEvents hands the events emitted so far to the walk.
func (p *walkProvider) takeEvents() []payments.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.events
	p.events = nil
	return out
}

// charge records a successful charge of amount (a payment intent and its
// charge; of an invoice of sub for reason, billing its period and
// quantity now, when sub is set).
func (p *walkProvider) charge(customer, currency string, amount int64, sub *wpSub, reason string) (*wpPayment, *wpCharge) {
	now := p.now()
	pi := &wpPayment{ID: p.id("pi"), Customer: customer, Amount: amount, Currency: currency, Created: now}
	c := &wpCharge{ID: p.id("ch"), PI: pi.ID, Customer: customer, Amount: amount, Currency: currency, Created: now}
	pi.Charge = c.ID
	if sub != nil {
		c.Invoice, c.Sub = p.id("in"), sub.ID
		c.Reason, c.Start, c.End, c.Qty = reason, sub.Start, sub.End, sub.Qty
		sub.Invoices = append(sub.Invoices, c.ID)
	}
	p.pis[pi.ID], p.chs[c.ID] = pi, c
	return pi, c
}

// pay completes an open session as a customer paying on the page would,
// and returns the charge it made ("" for a card saved in setup mode).
func (p *walkProvider) pay(sessionID string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sess[sessionID]
	if s == nil || s.Status != "open" {
		return "", fmt.Errorf("session %s is not open", sessionID)
	}
	s.Status = "complete"
	var charge string
	switch s.Mode {
	case payments.ModePayment:
		pi, c := p.charge(s.Customer, s.Currency, s.Unit*s.Qty, nil, "")
		pi.Order, pi.Org = s.Order, s.Org
		s.PI, charge = pi.ID, c.ID
	case payments.ModeSubscription:
		now := p.now()
		sub := &wpSub{ID: p.id("sub"), Customer: s.Customer, Status: "active", Order: s.Order, Org: s.Org, Unit: s.Unit,
			Qty: s.Qty, Currency: s.Currency, Start: now, End: now.AddDate(0, 1, 0)}
		p.subs[sub.ID] = sub
		_, c := p.charge(s.Customer, s.Currency, s.Unit*s.Qty, sub, "subscription_create")
		s.Sub, charge = sub.ID, c.ID
		p.emit(payments.EventInvoicePaid, p.invoiceJSON(sub, c))
	}
	p.emit(payments.EventCheckoutCompleted, p.sessionJSON(s))
	return charge, nil
}

// invoiceJSON is the paid invoice of a subscription's charge c, as Stripe
// shows it: the subscription's metadata as it was when the invoice was
// finalized (subscription_details), and one line billing the period and
// quantity the invoice paid, with the subscription's metadata. The
// invoice-level period is the one before (Stripe's covers what was billed
// before the invoice; the line's is the period paid).
func (p *walkProvider) invoiceJSON(s *wpSub, c *wpCharge) map[string]any {
	before := c.Start.AddDate(0, -1, 0)
	return map[string]any{"id": c.Invoice, "object": "invoice", "status": "paid", "customer": s.Customer, "subscription": s.ID,
		"billing_reason": c.Reason, "amount_due": c.Amount, "amount_paid": c.Amount, "total": c.Amount, "currency": s.Currency,
		"charge": c.ID, "payment_intent": c.PI, "period_start": before.Unix(), "period_end": c.Start.Unix(),
		"created": c.Created.Unix(), "subscription_details": map[string]any{"metadata": p.metadata(s)},
		"lines": stripeList("/v1/invoices/"+c.Invoice+"/lines", []any{map[string]any{"id": "il_" + c.Invoice, "object": "line_item",
			"amount": c.Amount, "currency": s.Currency, "quantity": c.Qty, "subscription": s.ID, "metadata": p.metadata(s),
			"period": map[string]any{"start": c.Start.Unix(), "end": c.End.Unix()}}})}
}

// renew bills the next period of a renewing subscription at its quantity
// now and returns the charge ("" when it does not renew: cancelled, or
// ending at the period's end, which ends it instead).
func (p *walkProvider) renew(subID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.subs[subID]
	if s == nil || s.Status != "active" {
		return ""
	}
	if s.CancelAtPeriodEnd {
		p.endSub(s)
		return ""
	}
	s.Start, s.End = s.End, s.End.AddDate(0, 1, 0)
	_, c := p.charge(s.Customer, s.Currency, s.Unit*s.Qty, s, "subscription_cycle")
	p.emit(payments.EventInvoicePaid, p.invoiceJSON(s, c))
	return c.ID
}

func (p *walkProvider) endSub(s *wpSub) {
	s.Status, s.CanceledAt = "canceled", p.now()
	p.emit(payments.EventSubscriptionDeleted, p.subJSON(s))
}

// refund refunds amount ("" or 0: what is left) of a charge; an error
// message when nothing is left to refund.
func (p *walkProvider) refund(chargeID, amount string) (*wpRefund, string) {
	c := p.chs[chargeID]
	if c == nil {
		return nil, "no such charge or payment intent"
	}
	left := c.Amount - c.Refunded - c.Disputed
	n, _ := strconv.ParseInt(amount, 10, 64)
	if n == 0 {
		n = left
	}
	if n <= 0 || n > left {
		return nil, fmt.Sprintf("charge %s has %d left to refund, asked %d", c.ID, left, n)
	}
	c.Refunded += n
	r := &wpRefund{ID: p.id("re"), PI: c.PI, Charge: c.ID, Amount: n, Currency: c.Currency, Created: p.now()}
	p.refs = append(p.refs, r)
	p.emit(payments.EventChargeRefunded, p.chargeJSON(c, false))
	return r, ""
}

// refundCharge is a refund made in the provider's dashboard.
func (p *walkProvider) refundCharge(chargeID string, amount int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := ""
	if amount > 0 {
		a = strconv.FormatInt(amount, 10)
	}
	if _, err := p.refund(chargeID, a); err != "" {
		return fmt.Errorf("%s", err)
	}
	return nil
}

// dispute opens a dispute of a whole charge, as a cardholder's bank does.
func (p *walkProvider) dispute(chargeID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.chs[chargeID]
	left := c.Amount - c.Refunded
	if left <= 0 || c.Disputed > 0 {
		return fmt.Errorf("charge %s cannot be disputed", chargeID)
	}
	c.Disputed = left
	d := &wpDispute{ID: p.id("dp"), Charge: c.ID, PI: c.PI, Amount: left, Currency: c.Currency, Created: p.now()}
	p.disps = append(p.disps, d)
	p.emit(payments.EventDisputeCreated, p.disputeJSON(d))
	return nil
}

// upcoming previews a customer's next invoice: every subscription that
// renews, at its quantity now.
func (p *walkProvider) upcoming(customer string) (map[string]any, bool) {
	var lines []any
	var total int64
	var start, end int64
	for _, id := range sortedKeys(p.subs) {
		s := p.subs[id]
		if s.Customer != customer || s.Status != "active" || s.CancelAtPeriodEnd {
			continue
		}
		amount := s.Unit * s.Qty
		total += amount
		start, end = s.End.Unix(), s.End.AddDate(0, 1, 0).Unix()
		lines = append(lines, map[string]any{"id": "il_next_" + s.ID, "object": "line_item", "amount": amount,
			"currency": s.Currency, "quantity": s.Qty, "subscription": s.ID, "description": "walk renewal",
			"metadata": p.metadata(s), "period": map[string]any{"start": start, "end": end}})
	}
	if len(lines) == 0 {
		return nil, false
	}
	return map[string]any{"object": "invoice", "customer": customer, "amount_due": total, "total": total, "currency": "usd",
		"period_start": start, "period_end": end, "next_payment_attempt": start,
		"lines": stripeList("/v1/invoices/upcoming/lines", lines)}, true
}

// renewingAmount is what the provider will bill customer next.
func (p *walkProvider) renewingAmount(customer string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	inv, ok := p.upcoming(customer)
	if !ok {
		return 0
	}
	return inv["amount_due"].(int64)
}
