package proxies_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// Issue 26, item 1 ("Why", bullet 5) for managed proxy orders: an
// order's Idempotency-Key follows checkout's rules (domain.HeldKey), its
// final failures and its takeover races included.

// keyProvider is stripe-mock behind two switches: refuse answers page
// requests as the provider refuses one it will not serve (a 4xx, final);
// hold, when set, reports each page request on arrived and holds it until
// gate is closed. creates counts page requests that reached stripe-mock.
type keyProvider struct {
	payments.Provider
	refuse  atomic.Bool
	hold    atomic.Bool
	arrived chan struct{}
	gate    chan struct{}
	creates atomic.Int32
}

func (k *keyProvider) CreateCheckoutSession(ctx context.Context, r payments.CheckoutRequest) (payments.CheckoutSession, error) {
	if k.refuse.Load() {
		return payments.CheckoutSession{}, &payments.RefusedError{Status: 400, Type: "invalid_request_error", Message: "this account cannot take payments"}
	}
	if k.hold.Load() {
		k.arrived <- struct{}{}
		<-k.gate
	}
	k.creates.Add(1)
	return k.Provider.CreateCheckoutSession(ctx, r)
}

type keyEnv struct {
	ctx      context.Context
	store    *eventstore.Store
	h        proxies.Handlers
	provider *keyProvider
	clock    *testutil.Clock
	auth     domain.Auth
}

func newKeyEnv(t *testing.T) *keyEnv {
	t.Helper()
	store := eventstore.New(testutil.FreshPool(t), eventstore.WithUpcaster(domain.Events))
	fp, err := forwardproxy.Listen("127.0.0.1:0", forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	box, _ := domain.NewSecretBox(make([]byte, 32))
	kp := &keyProvider{Provider: payments.New(payments.Config{SecretKey: "sk_test_keys", APIBase: testutil.StripeMock(t)}),
		arrived: make(chan struct{}, 2), gate: make(chan struct{})}
	clock := testutil.NewClock(time.Now().UTC().Truncate(time.Second))
	h := proxies.New(proxies.Config{Store: store, Supplier: fp, Devices: unreachable{}, Box: box, PublicURL: "http://proxies.test",
		Payments: kp, Now: clock.Now}).Handlers(cqrs.Decorator{})
	return &keyEnv{ctx: testutil.Context(t), store: store, h: h, provider: kp, clock: clock, auth: domain.LocalOperator("org_keys")}
}

func (e *keyEnv) order(key, product string) (proxies.PlacedOrder, error) {
	return e.h.PlaceProxyOrder.Handle(e.ctx, proxies.PlaceProxyOrder{Auth: e.auth, ProductID: product, IdempotencyKey: key})
}

func (e *keyEnv) eventNames(t *testing.T) []string {
	t.Helper()
	evs, err := e.store.Load(e.ctx, domain.ProxyStream(e.auth.OrgID), 0)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(evs))
	for i, ev := range evs {
		names[i] = ev.Type
	}
	return names
}

// TestProxyOrderFinalFailureIsReplayed: an order whose first attempt the
// provider refused for good (retryable false) keeps its key: a repeat
// within 24 hours answers the same refusal, replayed, with no new order
// and no page asked for, even once the provider would open one; another
// order under the key is idempotency_conflict; past 24 hours the key
// starts a new order.
func TestProxyOrderFinalFailureIsReplayed(t *testing.T) {
	e := newKeyEnv(t)
	e.provider.refuse.Store(true)
	_, first := e.order("k-final", "de-fixed")
	want := domain.AsError(first)
	if want.Code != domain.CodeCheckoutUnavailable || want.Retryable == nil || *want.Retryable || domain.Replayed(first) {
		t.Fatalf("first: %v (replayed %v); want checkout_unavailable, not retryable, not replayed", first, domain.Replayed(first))
	}

	e.provider.refuse.Store(false)
	e.clock.Advance(time.Hour)
	again, err := e.order("k-final", "de-fixed")
	if err == nil {
		t.Fatalf("repeat: got a new order %+v; want the first answer (the refusal) replayed", again.Order)
	}
	if got := domain.AsError(err); got.Code != want.Code || got.Message != want.Message || !domain.Replayed(err) ||
		got.Retryable == nil || *got.Retryable {
		t.Fatalf("repeat: %v (replayed %v); want %q, not retryable, replayed", err, domain.Replayed(err), want.Message)
	}
	if names := e.eventNames(t); len(names) != 2 || names[0] != "proxy.order_started" || names[1] != "proxy.order_failed" ||
		e.provider.creates.Load() != 0 {
		t.Fatalf("recorded %v with %d pages; want one order, failed, and no page", names, e.provider.creates.Load())
	}
	if _, err := e.order("k-final", "us-fixed"); domain.ErrorCode(err) != domain.CodeIdempotencyConflict || domain.Replayed(err) {
		t.Fatalf("another order under the key: %v; want idempotency_conflict", err)
	}

	e.clock.Advance(23 * time.Hour)
	later, err := e.order("k-final", "de-fixed")
	if err != nil || later.Replayed || later.Order.State != domain.ProxyOrderAwaitingPayment {
		t.Fatalf("after 24 h: %+v, %v; want a new order with its page", later, err)
	}
}

// TestProxyOrderTwoTakeoversOneAnswerReplayed: two repeats of one key both
// find its order abandoned while running. Only one takes the order's claim
// and runs it to the provider; the other, finding the claim held, answers
// as for an order still running (idempotency_conflict, retryable) and never
// reaches the provider. Repeated once the first recorded the page, it gets
// that answer, replayed: exactly one answer is not a replay (as checkout's
// TestCheckoutTwoTakeoversOneAnswerReplayed).
func TestProxyOrderTwoTakeoversOneAnswerReplayed(t *testing.T) {
	e := newKeyEnv(t)
	product, _ := domain.DefaultCatalog().ProxyProduct("de-fixed")
	digest := e.placeDigest(t, "de-fixed")
	news, err := eventstore.Encode[domain.Event](domain.Events, e.auth.OrgID,
		domain.ProxyOrderStarted{OrgID: e.auth.OrgID, OrderID: "pxo_dead", ProxyID: "prx_dead", Product: product, Currency: "usd",
			IdempotencyKey: domain.DigestKey("k-dead"), RequestDigest: digest, By: domain.ActorOf(e.auth), At: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Append(e.ctx, domain.ProxyStream(e.auth.OrgID), eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(domain.CheckoutAbandonedAfter)

	e.provider.hold.Store(true)
	var first proxies.PlacedOrder
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, firstErr = e.order("k-dead", "de-fixed")
	}()
	select {
	case <-e.provider.arrived:
	case <-time.After(30 * time.Second):
		close(e.provider.gate)
		<-done
		t.Fatalf("the first repeat did not reach the provider: %+v, %v", first, firstErr)
	}
	// The second finds the order's claim held by the first: an order still
	// running, and it never reaches the provider.
	_, err = e.order("k-dead", "de-fixed")
	if domain.ErrorCode(err) != domain.CodeIdempotencyConflict {
		close(e.provider.gate)
		<-done
		t.Fatalf("second repeat while the first runs the order: %v; want idempotency_conflict", err)
	}
	if n := len(e.provider.arrived); n != 0 {
		t.Errorf("%d more requests reached the provider; want none while the order is being run", n)
	}
	close(e.provider.gate)
	<-done
	if firstErr != nil || first.Replayed || first.Order.OrderID != "pxo_dead" || first.Order.CheckoutURL == "" {
		t.Fatalf("first repeat: %+v, %v; want the abandoned order's page, answered fresh", first, firstErr)
	}
	if again, err := e.order("k-dead", "de-fixed"); err != nil || !again.Replayed || again.Order.OrderID != "pxo_dead" ||
		again.Order.CheckoutURL != first.Order.CheckoutURL {
		t.Fatalf("got %+v, %v; want the finished order replayed", again, err)
	}
}

// placeDigest is the request digest the handler records for an order of
// product without a quote: read from an order placed under a throwaway
// key by another organisation, so the test hard-codes no digest.
func (e *keyEnv) placeDigest(t *testing.T, product string) string {
	t.Helper()
	other := domain.LocalOperator("org_digest")
	if _, err := e.h.PlaceProxyOrder.Handle(e.ctx, proxies.PlaceProxyOrder{Auth: other, ProductID: product, IdempotencyKey: "digest"}); err != nil {
		t.Fatal(err)
	}
	evs, err := e.store.Load(e.ctx, domain.ProxyStream(other.OrgID), 0)
	if err != nil || len(evs) == 0 {
		t.Fatalf("digest order: %v, %v", evs, err)
	}
	var acct domain.ProxyAccount
	for _, ev := range evs {
		d, err := domain.Events.Decode(ev.Type, ev.SchemaVersion, ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		acct.Apply(d)
	}
	return acct.Orders[0].RequestDigest
}
