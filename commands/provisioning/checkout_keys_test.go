package provisioning_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// Issue 26, item 1 ("Why", bullet 5): an Idempotency-Key's answer is the
// same answer whoever gives it, failures included; a page that cannot be
// closed is read before it is called in progress.

// gatedProvider holds every CreateCheckoutSession until gate is closed,
// after reporting its arrival on arrived: so a test lines up requests at
// the provider, in the window between asking for a page and recording it.
type gatedProvider struct {
	payments.Provider
	arrived chan struct{}
	gate    chan struct{}
}

func (g *gatedProvider) CreateCheckoutSession(ctx context.Context, r payments.CheckoutRequest) (payments.CheckoutSession, error) {
	g.arrived <- struct{}{}
	<-g.gate
	return g.Provider.CreateCheckoutSession(ctx, r)
}

// TestCheckoutTwoTakeoversOneAnswerReplayed: two repeats of one key both
// find its attempt abandoned. Only one takes the attempt's claim and runs
// it to the provider; the other, finding the claim held, answers as for an
// attempt still running (idempotency_conflict, retryable) and never
// reaches the provider, so two live processes never run one attempt.
// Repeated once the first recorded the page, it gets that answer,
// replayed: exactly one answer is not a replay.
func TestCheckoutTwoTakeoversOneAnswerReplayed(t *testing.T) {
	gated := &gatedProvider{arrived: make(chan struct{}, 2), gate: make(chan struct{})}
	e := newCheckoutEnv(t, testutil.Pool(t), func(c *provisioning.Config) {
		gated.Provider = c.Payments
		c.Payments = gated
	})
	req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
	orderID := domain.NewID(domain.PrefixOrder)
	e.record(domain.AccountStream(e.org), e.org, domain.CheckoutStarted{OrgID: e.org, OrderID: orderID, FulfilmentIDs: []string{orderID},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400,
		IdempotencyKey: domain.DigestKey("dead-key"), RequestDigest: req.Digest(), At: e.clock.Now()})
	e.clock.Advance(domain.CheckoutAbandonedAfter)

	var first provisioning.CheckoutAnswer
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, firstErr = e.checkout("dead-key", checkoutDay)
	}()
	select {
	case <-gated.arrived:
	case <-time.After(30 * time.Second):
		close(gated.gate)
		t.Fatal("the first repeat did not reach the provider")
	}
	_, err := e.checkout("dead-key", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeIdempotencyConflict, "yes")
	if n := len(gated.arrived); n != 0 {
		t.Errorf("%d more requests reached the provider; want none while the attempt is being run", n)
	}
	close(gated.gate)
	<-done
	if firstErr != nil || first.OrderID != orderID || first.CheckoutURL == "" || first.Replayed {
		t.Fatalf("the repeat that took the attempt over: got %+v, %v; want the attempt's page, not replayed", first, firstErr)
	}
	if again, err := e.checkout("dead-key", checkoutDay); err != nil || !again.Replayed || again.OrderID != orderID ||
		again.CheckoutURL != first.CheckoutURL {
		t.Fatalf("got %+v, %v; want the finished attempt replayed", again, err)
	}
}

// refusingProvider refuses to open pages while refuse is set, as the
// provider answers a request it will not serve (a 4xx): retrying it
// unchanged does not help.
type refusingProvider struct {
	payments.Provider
	mu     sync.Mutex
	refuse bool
}

func (r *refusingProvider) set(refuse bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = refuse
}

func (r *refusingProvider) CreateCheckoutSession(ctx context.Context, req payments.CheckoutRequest) (payments.CheckoutSession, error) {
	r.mu.Lock()
	refuse := r.refuse
	r.mu.Unlock()
	if refuse {
		return payments.CheckoutSession{}, &payments.RefusedError{Status: 400, Type: "invalid_request_error", Message: "this account cannot take payments"}
	}
	return r.Provider.CreateCheckoutSession(ctx, req)
}

// TestCheckoutFinalFailureIsReplayed: a first attempt that failed with an
// answer that retrying does not change (retryable false: here the
// provider refusing to open the page) is its key's answer for 24 hours:
// a repeat answers the same refusal, replayed, without a new attempt or a
// new page, even once the provider would open one; the key for another
// purchase is idempotency_conflict. A failure retrying may cure (the
// provider not answering) still frees the key
// (TestCheckoutProviderDownFreesTheKey).
func TestCheckoutFinalFailureIsReplayed(t *testing.T) {
	refusing := &refusingProvider{refuse: true}
	e := newCheckoutEnv(t, testutil.Pool(t), func(c *provisioning.Config) {
		refusing.Provider = c.Payments
		c.Payments = refusing
	})
	_, first := e.checkout("k", checkoutDay)
	want := wantCheckoutCode(t, first, domain.CodeCheckoutUnavailable, "no")
	if domain.Replayed(first) {
		t.Errorf("the first answer is marked replayed")
	}

	refusing.set(false)
	e.clock.Advance(time.Hour)
	_, again := e.checkout("k", ` {"billing":"day","sku":"emulator"}`)
	got := wantCheckoutCode(t, again, domain.CodeCheckoutUnavailable, "no")
	if got.Message != want.Message || !domain.Replayed(again) {
		t.Errorf("got %q (replayed %v); want the first answer %q, replayed", got.Message, domain.Replayed(again), want.Message)
	}
	if names := e.eventNames(); len(names) != 3 || names[0] != "checkout.started" || names[2] != "checkout.failed" || e.provider.n("create") != 0 {
		t.Errorf("recorded %v with %d sessions; want one attempt, failed, and no page made since", names, e.provider.n("create"))
	}
	_, err := e.checkout("k", checkoutWeek)
	wantCheckoutCode(t, err, domain.CodeIdempotencyConflict, "no")

	// Past 24 hours the key is free again.
	e.clock.Advance(23 * time.Hour)
	later, err := e.checkout("k", checkoutDay)
	if err != nil || later.Replayed {
		t.Fatalf("after 24 h: got %+v, %v; want a new attempt", later, err)
	}
}

// paidSessions answers a session read as the provider would once the
// person paid the page (stripe-mock holds no paid sessions): complete and
// paid, or, with pending, complete with its payment still being confirmed.
type paidSessions struct {
	payments.Provider
	mu      sync.Mutex
	pending bool
	reads   []string
}

func (p *paidSessions) CheckoutSession(_ context.Context, id string) (payments.CheckoutSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads = append(p.reads, id)
	status := "paid"
	if p.pending {
		status = "unpaid"
	}
	return payments.CheckoutSession{ID: id, Status: "complete", PaymentStatus: status, CustomerID: "cus_paid", SubscriptionID: "sub_paid"}, nil
}

// TestCheckoutUnclosablePageThatWasPaid: a new checkout finds the earlier
// page open in our records, but the provider will not expire it because
// the person paid it (its event has not arrived yet). The session is read:
// paid, the order is recorded paid with its phones, exactly as the
// provider's event would, and the new checkout is answered as it would be
// once that event had arrived (a subscription paid: 409 wrong_state,
// provisioned); completed but still being confirmed, 409
// payment_in_progress. Neither is checkout_in_progress.
func TestCheckoutUnclosablePageThatWasPaid(t *testing.T) {
	sessions := &paidSessions{}
	e, _ := checkoutWithInventory(t, func(c *provisioning.Config) {
		sessions.Provider = c.Payments
		c.Payments = sessions
	})
	first, err := e.checkout("", checkoutWeek)
	if err != nil {
		t.Fatal(err)
	}
	e.provider.notExpirable = true
	e.clock.Advance(time.Minute)
	_, err = e.checkout("second", checkoutWeek)
	if de := wantCheckoutCode(t, err, domain.CodeWrongState, "no"); de.Extra["state"] != domain.FulfilmentProvisionedState {
		t.Errorf("got %v; want state provisioned", de.Extra)
	}
	// That refusal is its key's answer.
	_, err = e.checkout("second", checkoutWeek)
	if de := wantCheckoutCode(t, err, domain.CodeWrongState, "no"); de.Extra["state"] != domain.FulfilmentProvisionedState || !domain.Replayed(err) {
		t.Errorf("repeat: got %v (replayed %v); want wrong_state, state provisioned, replayed", de.Extra, domain.Replayed(err))
	}
	if len(sessions.reads) != 1 || sessions.reads[0] != mustSession(t, e, first.OrderID) {
		t.Errorf("read sessions %v; want the first page's", sessions.reads)
	}
	var a domain.Account
	for i, ev := range e.events() {
		a.Apply(ev, int64(i+1))
	}
	if o, _ := a.Order(first.OrderID); o.State != domain.OrderPaidState || o.SubscriptionID != "sub_paid" {
		t.Fatalf("first order %+v; want it recorded paid from the session read", o)
	}
	f, err := e.store.Load(e.ctx, domain.FulfilmentStream(first.OrderID), 1)
	if err != nil || len(f) == 0 || f[0].Type != "fulfilment.created" {
		t.Fatalf("got %v, %v; want the paid order's phone created", f, err)
	}
	adm, err := (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: checkoutAdmin(e.org), CheckoutServed: true})
	if err != nil || !adm.Provisioned {
		t.Errorf("admission %+v, %v; want provisioned", adm, err)
	}
	if e.provider.n("create") != 1 {
		t.Errorf("got %d pages; want no second page", e.provider.n("create"))
	}

	// Another organisation's day pass, completed but being confirmed.
	e.org = domain.NewID(domain.PrefixOrganisation)
	e.provider.notExpirable = false
	day, err := e.checkout("", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	e.provider.notExpirable = true
	sessions.pending = true
	_, err = e.checkout("", checkoutDay)
	wantCheckoutCode(t, err, domain.CodePaymentInProgress, "yes")
	a = domain.Account{}
	for i, ev := range e.events() {
		a.Apply(ev, int64(i+1))
	}
	if o, _ := a.Order(day.OrderID); o.State != domain.OrderPendingState {
		t.Errorf("day pass %+v; want its payment recorded pending", o)
	}
}
