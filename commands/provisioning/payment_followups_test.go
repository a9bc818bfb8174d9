package provisioning_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// followupEnv is fulEnv with the payment follow-ups read model, a provider
// over stripe-mock behind a recording proxy that can be switched to answer
// 503 (the provider down), and the follow-up reactor on the test's clock.
type followupEnv struct {
	*fulEnv
	runner  *projections.Runner
	w       *workers.PaymentFollowups
	mock    *followupMock
	mockURL string // the provider's address: the recording proxy
}

// followupMock records every request the provider sent; while down it
// answers 503 itself and forwards nothing to stripe-mock.
type followupMock struct {
	mu       sync.Mutex
	down     bool
	refusing bool // answer 400 itself, as the provider refusing the request
	sent     []followupRequest
	received int // requests forwarded to stripe-mock
}

type followupRequest struct {
	method, path, key string
	form              url.Values
}

func (m *followupMock) setDown(d bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = d
}

func (m *followupMock) setRefusing(r bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refusing = r
}

func (m *followupMock) requests() ([]followupRequest, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]followupRequest(nil), m.sent...), m.received
}

func newFollowupEnv(t *testing.T) *followupEnv {
	t.Helper()
	e := newFulEnv(t)
	r, err := projections.NewRunner(e.Store, fleettest.Quiet, []projections.Projection{projections.PaymentFollowups{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	m := &followupMock{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		form, _ := url.ParseQuery(string(body))
		if len(body) == 0 {
			form = r.URL.Query() // a read's parameters
		}
		m.mu.Lock()
		m.sent = append(m.sent, followupRequest{method: r.Method, path: r.URL.Path, key: r.Header.Get("Idempotency-Key"), form: form})
		down, refusing := m.down, m.refusing
		if !down && !refusing {
			m.received++
		}
		m.mu.Unlock()
		if refusing {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such subscription"}}`))
			return
		}
		if down {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"down for maintenance"}}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	provider := payments.New(payments.Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL, MaxNetworkRetries: -1})
	w := workers.NewPaymentFollowups(workers.PaymentFollowupsConfig{Pool: e.Pool, Record: e.app.Provisioning.RecordPaymentFollowup, Provider: provider,
		Now: e.clock.Now, ID: "test"})
	return &followupEnv{fulEnv: e, runner: r, w: w, mock: m, mockURL: srv.URL}
}

// catchUp waits until the follow-ups read model has applied every event
// recorded so far.
func (e *followupEnv) catchUp(t *testing.T) {
	t.Helper()
	ctx := testutil.Context(t)
	tx, err := e.Store.LastTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head, err := e.Store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.runner.WaitFor(wctx, projections.PaymentFollowupsName, eventstore.Appended{TransactionID: tx, LastPosition: head}); err != nil {
		t.Fatalf("follow-ups read model: %v", err)
	}
}

// once catches up, then makes the due attempts.
func (e *followupEnv) once(t *testing.T) []workers.FollowupAttempt {
	t.Helper()
	e.catchUp(t)
	as, err := e.w.Once(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Err != nil {
			t.Fatalf("recording %s: %v", a.Event.FollowupID, a.Err)
		}
	}
	return as
}

// followups reads the follow-ups of a fulfilment.
func (e *followupEnv) followups(t *testing.T, fulfilmentID string) []projections.FollowupView {
	t.Helper()
	e.catchUp(t)
	vs, err := projections.PaymentFollowupsOf(testutil.Context(t), e.Pool, fulfilmentID)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// only returns the single follow-up of a fulfilment.
func (e *followupEnv) only(t *testing.T, fulfilmentID string) projections.FollowupView {
	t.Helper()
	vs := e.followups(t, fulfilmentID)
	if len(vs) != 1 {
		t.Fatalf("fulfilment %s has %d follow-ups; want 1: %+v", fulfilmentID, len(vs), vs)
	}
	return vs[0]
}

// orderOf returns the order of a fulfilment.
func (e *followupEnv) orderOf(t *testing.T, org, id string) string {
	t.Helper()
	return e.fulfilment(t, org, id).OrderID
}

var pixelMonthly = domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US"}

// TestPaymentFollowupsTellTheProvider: the customer's Cancel of a
// subscription phone cancels its subscription now, a Return of a day
// phone refunds its price of the order's payment, a cancelled renewal
// sets cancel_at_period_end: each by one provider call carrying the
// idempotency key derived from the triggering event, recorded as
// payment.followup_attempted; nothing is called again afterwards.
func TestPaymentFollowupsTellTheProvider(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c := e.app.Provisioning

	monthly := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	day := e.paidOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay, Model: "pixel-8", Region: "US"}, 1)[0]
	renewing := e.paidOrder(t, org, pixelMonthly, 1)[0]
	if _, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: monthly}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: day}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: renewing}); err != nil {
		t.Fatal(err)
	}

	as := e.once(t)
	if len(as) != 3 {
		t.Fatalf("made %d attempts; want 3: %+v", len(as), as)
	}
	for _, a := range as {
		if a.Event.Outcome != domain.FollowupDone || a.Event.Attempt != 1 || a.Appended.Version != 1 {
			t.Errorf("attempt %+v; want the first, done, recorded", a.Event)
		}
	}
	want := map[string]struct{ action, method, path string }{
		monthly:  {domain.FollowupCancelSubscription, http.MethodDelete, "/v1/subscriptions/sub_" + e.orderOf(t, org, monthly)},
		day:      {domain.FollowupRefund, http.MethodPost, "/v1/refunds"},
		renewing: {domain.FollowupCancelAtPeriodEnd, http.MethodPost, "/v1/subscriptions/sub_" + e.orderOf(t, org, renewing)},
	}
	sent, _ := e.mock.requests()
	if len(sent) != 3 {
		t.Fatalf("the provider got %d requests; want 3: %+v", len(sent), sent)
	}
	for id, w := range want {
		f := e.only(t, id)
		if f.Action != w.action || f.Status != projections.FollowupDone || f.Attempts != 1 || f.OrgID != org {
			t.Errorf("follow-up of %s: %+v; want %s done after one attempt", id, f, w.action)
		}
		key := domain.PaymentFollowupKey(f.FollowupID)
		n := 0
		for _, r := range sent {
			if r.key != key {
				continue
			}
			n++
			if r.method != w.method || r.path != w.path {
				t.Errorf("follow-up of %s sent %s %s; want %s %s", id, r.method, r.path, w.method, w.path)
			}
			switch w.action {
			case domain.FollowupRefund:
				if r.form.Get("payment_intent") != "pi_"+e.orderOf(t, org, day) || r.form.Get("amount") != "1500" {
					t.Errorf("refund form %v; want the order's payment intent, amount 1500", r.form)
				}
			case domain.FollowupCancelAtPeriodEnd:
				if r.form.Get("cancel_at_period_end") != "true" {
					t.Errorf("cancel-renewal form %v; want cancel_at_period_end=true", r.form)
				}
			}
		}
		if n != 1 {
			t.Errorf("follow-up of %s: %d requests with its key %s; want 1", id, n, key)
		}
	}
	if f := e.only(t, day); !strings.HasPrefix(f.RefundID, "re_") || f.Amount != 1500 {
		t.Errorf("refund follow-up %+v; want the refund's id recorded", f)
	}
	// The trigger's id derives the follow-up's: the cancellation event.
	evs, err := e.Store.Load(ctx, domain.FulfilmentStream(monthly), 1)
	if err != nil {
		t.Fatal(err)
	}
	if f := e.only(t, monthly); f.FollowupID != domain.PaymentFollowupID(evs[len(evs)-1].ID) {
		t.Errorf("follow-up id %s is not derived from the cancellation event", f.FollowupID)
	}
	if got := e.streamTypes(t, domain.PaymentFollowupStream(e.only(t, monthly).FollowupID)); len(got) != 1 || got[0] != "payment.followup_attempted" {
		t.Errorf("follow-up stream %v", got)
	}

	e.clock.Advance(24 * time.Hour)
	if as := e.once(t); len(as) != 0 {
		t.Errorf("a settled follow-up was attempted again: %+v", as)
	}
	if sent, _ := e.mock.requests(); len(sent) != 3 {
		t.Errorf("the provider got %d requests in all; want 3", len(sent))
	}

	// The read model rebuilt from position 0 holds the same rows: the
	// plans are folded from the log as it stood at each trigger.
	rows := followupRowsText(t, e)
	if err := e.runner.Rebuild(ctx, projections.PaymentFollowupsName, nil); err != nil {
		t.Fatal(err)
	}
	if again := followupRowsText(t, e); again != rows || rows == "" {
		t.Errorf("rebuild changed the follow-up rows:\nbefore\n%s\nafter\n%s", rows, again)
	}
}

// followupRowsText dumps both tables of the follow-ups read model.
func followupRowsText(t *testing.T, e *followupEnv) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{`SELECT f::text FROM payment_followups f ORDER BY followup_id`,
		`SELECT f::text FROM payment_followup_fulfilments f ORDER BY fulfilment_id`} {
		rows, err := e.Store.Pool().Query(testutil.Context(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestPaymentFollowupRetriesWhileProviderDown: an attempt that finds the
// provider down is recorded retrying and made again once due, with the
// same idempotency key, and then succeeds; not before it is due.
func TestPaymentFollowupRetriesWhileProviderDown(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	id := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	if _, err := e.app.Provisioning.RefundFulfilment.Handle(testutil.Context(t), provisioning.RefundFulfilment{FulfilmentID: id}); err != nil {
		t.Fatal(err)
	}
	e.mock.setDown(true)
	as := e.once(t)
	if len(as) != 1 || as[0].Event.Outcome != domain.FollowupRetrying || as[0].Event.NextAttemptAt == nil ||
		!as[0].Event.NextAttemptAt.Equal(e.clock.Now().Add(domain.FollowupRetryGaps[0])) || as[0].Event.Error == "" {
		t.Fatalf("attempts while down: %+v; want one retrying after %s", as, domain.FollowupRetryGaps[0])
	}
	if f := e.only(t, id); f.Status != projections.FollowupPending || f.Attempts != 1 ||
		f.Action != domain.FollowupCancelSubscription || !f.RefundShare {
		t.Errorf("follow-up after a failed attempt: %+v", f)
	}
	e.mock.setDown(false)
	if as := e.once(t); len(as) != 0 {
		t.Fatalf("attempted before it was due: %+v", as)
	}
	e.clock.Advance(domain.FollowupRetryGaps[0])
	as = e.once(t)
	if len(as) != 1 || as[0].Event.Outcome != domain.FollowupDone || as[0].Event.Attempt != 2 {
		t.Fatalf("attempts once due: %+v; want the second, done", as)
	}
	// The cancel while down, then the cancel again with the same key, the
	// read of the paid invoice and the refund of the phone's share.
	sent, received := e.mock.requests()
	key := domain.PaymentFollowupKey(e.only(t, id).FollowupID)
	if len(sent) != 4 || received != 3 || sent[0].key != key || sent[1].key != key ||
		sent[3].key != domain.PaymentFollowupRefundKey(e.only(t, id).FollowupID) {
		t.Errorf("requests %+v (%d reached stripe-mock); want the cancel twice with key %s, then the share refunded", sent, received, key)
	}
	if f := e.only(t, id); f.Status != projections.FollowupDone || f.Attempts != 2 {
		t.Errorf("follow-up %+v; want done after two attempts", f)
	}
}

// TestPaymentFollowupsLeaveProviderEndsAlone: ends the provider made (a
// refund, a subscription it ended) and a day pass running out owe no
// follow-up; a phone sharing its subscription with another that still
// renews is recorded skipped, and the last one cancels the subscription.
func TestPaymentFollowupsLeaveProviderEndsAlone(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)

	refunded := e.paidOrder(t, org, emulatorDay, 1)[0]
	order := e.orderOf(t, org, refunded)
	e.mustDeliver(t, stripeEvent(t, "evt_refund_"+order, payments.EventChargeRefunded, map[string]any{"id": "ch_" + order,
		"object": "charge", "amount": 400, "amount_refunded": 400, "refunded": true, "payment_intent": "pi_" + order,
		"status": "succeeded", "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}}, e.clock.Now()),
		provisioning.ProviderEventApplied)

	pair := e.paidOrder(t, org, pixelMonthly, 2)
	if _, err := e.app.Provisioning.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: pair[0]}); err != nil {
		t.Fatal(err)
	}
	as := e.once(t)
	if len(as) != 1 || as[0].Event.Outcome != domain.FollowupDone || as[0].Event.Action != domain.FollowupSetQuantity ||
		as[0].Event.Quantity != 1 {
		t.Fatalf("first of two phones on one subscription: %+v; want its quantity set to 1", as)
	}
	if ups := e.quantityUpdates(t); len(ups) != 1 {
		t.Fatalf("quantity updates for a shared subscription: %+v; want one", ups)
	}
	if vs := e.followups(t, refunded); len(vs) != 0 {
		t.Errorf("a provider refund has follow-ups: %+v", vs)
	}

	// The provider ends the subscription of the second: no follow-up.
	sub := "sub_" + e.orderOf(t, org, pair[1])
	e.mustDeliver(t, stripeEvent(t, "evt_sub_deleted", payments.EventSubscriptionDeleted, map[string]any{"id": sub,
		"object": "subscription", "status": "canceled", "metadata": map[string]any{payments.MetaOrgID: org,
			payments.MetaOrderID: e.orderOf(t, org, pair[1])}}, e.clock.Now()), provisioning.ProviderEventApplied)
	if f := e.fulfilment(t, org, pair[1]); f.CancelledReason != domain.EndSubscriptionEnded {
		t.Fatalf("second phone %+v; want ended by the provider", f)
	}
	if as := e.once(t); len(as) != 0 {
		t.Errorf("a provider end was followed up: %+v", as)
	}
	if vs := e.followups(t, pair[1]); len(vs) != 0 {
		t.Errorf("a provider end has follow-ups: %+v", vs)
	}

	// A new pair: the last phone to go cancels the subscription.
	pair = e.paidOrder(t, org, pixelMonthly, 2)
	for _, id := range pair {
		if _, err := e.app.Provisioning.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// The first lowers the quantity; the second, waiting for it (one
	// subscription's follow-ups go in the log's order), then cancels.
	before, _ := e.mock.requests()
	if as = append(e.once(t), e.once(t)...); len(as) != 2 {
		t.Fatalf("attempts %+v; want two", as)
	}
	if f := e.only(t, pair[0]); f.Status != projections.FollowupDone || f.Action != domain.FollowupSetQuantity || f.Quantity != 1 {
		t.Errorf("first of the pair %+v; want its quantity set to 1", f)
	}
	if f := e.only(t, pair[1]); f.Status != projections.FollowupDone || f.Action != domain.FollowupCancelSubscription {
		t.Errorf("last of the pair %+v; want the subscription cancelled", f)
	}
	sent, _ := e.mock.requests()
	if sent = sent[len(before):]; len(sent) != 3 || sent[2].method != http.MethodDelete ||
		sent[2].path != "/v1/subscriptions/sub_"+e.orderOf(t, org, pair[1]) {
		t.Errorf("requests %+v; want the read, the quantity update, then the one cancel", sent)
	}
}

// TestProviderEndOfSubscriptionCancelsIt (issue 26, found by the payments
// walk): a refund or a dispute the provider started (its dashboard, the
// cardholder's bank) on a subscription's invoice ends the order's phones,
// but the subscription would go on renewing them: the last phone of it to
// end cancels it now, once (one follow-up for the subscription, however
// many phones the end took; none for a day pass, whose payment is not
// renewed).
func TestProviderEndOfSubscriptionCancelsIt(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)

	pair := e.paidOrder(t, org, pixelMonthly, 2)
	order := e.orderOf(t, org, pair[0])
	e.mustDeliver(t, stripeEvent(t, "evt_refund_"+order, payments.EventChargeRefunded, map[string]any{"id": "ch_" + order,
		"object": "charge", "amount": 19800, "amount_refunded": 19800, "refunded": true, "invoice": "in_" + order,
		"status": "succeeded", "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}}, e.clock.Now()),
		provisioning.ProviderEventApplied)
	disputed := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	dorder := e.orderOf(t, org, disputed)
	e.mustDeliver(t, stripeEvent(t, "evt_dispute_"+dorder, payments.EventDisputeCreated, map[string]any{"id": "dp_" + dorder,
		"object": "dispute", "amount": 2900, "charge": "ch_" + dorder, "status": "needs_response", "reason": "fraudulent",
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: dorder}}, e.clock.Now()),
		provisioning.ProviderEventApplied)
	for _, id := range append(pair, disputed) {
		if f := e.fulfilment(t, org, id); f.State != domain.FulfilmentCancelledState {
			t.Fatalf("phone %s is %s after the provider ended its order", id, f.State)
		}
	}

	as := e.once(t)
	if len(as) != 2 {
		t.Fatalf("attempts %+v; want one for each subscription", as)
	}
	for _, w := range []struct{ phone, order string }{{pair[1], order}, {disputed, dorder}} {
		f := e.only(t, w.phone)
		if f.Action != domain.FollowupCancelSubscription || f.SubscriptionID != "sub_"+w.order || f.Status != projections.FollowupDone {
			t.Errorf("follow-up of %s: %+v; want its subscription cancelled now, done", w.phone, f)
		}
	}
	if vs := e.followups(t, pair[0]); len(vs) != 0 {
		t.Errorf("the first phone of the refunded pair has follow-ups %+v; want the last one's only", vs)
	}
	sent, _ := e.mock.requests()
	var cancels []string
	for _, r := range sent {
		if r.method == http.MethodDelete {
			cancels = append(cancels, r.path)
		}
	}
	want := []string{"/v1/subscriptions/sub_" + order, "/v1/subscriptions/sub_" + dorder}
	slices.Sort(cancels)
	slices.Sort(want)
	if !slices.Equal(cancels, want) {
		t.Errorf("cancels sent %v; want each subscription's once: %v", cancels, want)
	}
	if as := e.once(t); len(as) != 0 {
		t.Errorf("attempted again: %+v", as)
	}
}
