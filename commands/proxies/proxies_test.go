package proxies_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// unreachable is a device that cannot be configured: a phone that dropped
// off its transport, which no test here can unplug for real.
type unreachable struct{}

func (unreachable) Visible(_ context.Context, a domain.Auth, id string) (domain.Device, error) {
	return domain.Device{ID: id, OrgID: a.OrgID}, nil
}

func (unreachable) SetNetworkProxy(context.Context, string, *domain.NetworkProxy) error {
	return domain.Errorf(domain.CodeDeviceDisconnected, "the phone dropped off its transport")
}

// TestOperationThatCannotConfigureItsDeviceFails: an assignment whose
// device cannot be configured ends failed with the device's error code and
// message as its reason, the device not behind the proxy; a pass finds
// nothing more to do; an order on a deployment without a payment provider
// is checkout_unavailable and records nothing.
func TestOperationThatCannotConfigureItsDeviceFails(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(store, nil, []projections.Projection{projections.Proxies{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	run, cancel := context.WithCancel(ctx)
	if err := r.Ensure(run); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(run); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	fp, err := forwardproxy.Listen("127.0.0.1:0", forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	box, err := domain.NewSecretBox(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	h := proxies.New(proxies.Config{Store: store, Supplier: fp, Devices: unreachable{}, Box: box, ReadModels: r}).Handlers(cqrs.Decorator{})
	auth := domain.LocalOperator("org_t")

	if _, err := h.PlaceProxyOrder.Handle(ctx, proxies.PlaceProxyOrder{Auth: auth, ProductID: "us-fixed"}); domain.ErrorCode(err) != domain.CodeCheckoutUnavailable {
		t.Fatalf("order without a provider: %v; want checkout_unavailable", err)
	}
	if l, _ := h.ListProxyOrders.Handle(ctx, proxies.ListProxyOrders{Auth: auth}); len(l) != 0 {
		t.Fatalf("a refused order was recorded: %+v", l)
	}

	// A paid proxy, as the provider's event leaves it.
	us, _ := domain.DefaultCatalog().ProxyProduct("us-fixed")
	news, err := eventstore.Encode[domain.Event](domain.Events, "org_t",
		domain.ProxyOrderStarted{OrgID: "org_t", OrderID: "pxo_t", ProxyID: "prx_t", Product: us, Currency: "usd", By: domain.ActorOf(auth), At: time.Now()},
		domain.ProxyOrderPaid{OrderID: "pxo_t", At: time.Now()},
		domain.ProxyIssued{ProxyID: "prx_t", OrderID: "pxo_t", Host: "127.0.0.1", Port: 1, Username: "px-t",
			SealedPassword: domain.SealProxyPassword(box, "prx_t", "pw"), At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ProxyStream("org_t"), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
	op, err := h.RequestProxyOperation.Handle(ctx, proxies.RequestProxyOperation{Auth: auth, ProxyID: "prx_t", Kind: domain.ProxyOpAssign,
		DeviceIDs: []string{"dev_gone"}})
	if err != nil || op.Operation.State != domain.ProxyOpPending {
		t.Fatalf("assign: %+v, %v", op, err)
	}
	if n, err := h.PerformProxyOperations.Handle(ctx, proxies.PerformProxyOperations{}); err != nil || n != 1 {
		t.Fatalf("pass: %d, %v; want one operation finished", n, err)
	}
	v, err := h.GetProxyOperation.Handle(ctx, proxies.GetProxyOperation{Auth: auth, OperationID: op.Operation.OperationID})
	if err != nil || v.State != domain.ProxyOpFailed || v.Code != string(domain.CodeDeviceDisconnected) || v.Reason != "the phone dropped off its transport" {
		t.Fatalf("operation %+v, %v; want failed with the device's code and reason", v, err)
	}
	if p, _ := h.GetProxy.Handle(ctx, proxies.GetProxy{Auth: auth, ProxyID: "prx_t"}); len(p.Devices) != 0 {
		t.Fatalf("proxy devices %v; want none", p.Devices)
	}
	if n, err := h.PerformProxyOperations.Handle(ctx, proxies.PerformProxyOperations{}); err != nil || n != 0 {
		t.Fatalf("second pass: %d, %v; want nothing to do", n, err)
	}
	if _, err := h.GetProxy.Handle(ctx, proxies.GetProxy{Auth: domain.LocalOperator("org_other"), ProxyID: "prx_t"}); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("another organisation: %v; want not_found", err)
	}
}

// gate is stripe-mock behind a door that holds checkout-session requests
// until opened: a provider slow to open a payment page.
type gate struct {
	url     string
	arrived chan struct{}
	open    chan struct{}
}

func newGate(t *testing.T) *gate {
	t.Helper()
	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{arrived: make(chan struct{}, 8), open: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/checkout/sessions" {
			g.arrived <- struct{}{}
			<-g.open
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// TestOrderKeyWhileTheFirstAttemptRuns: with the provider still opening
// the first attempt's page, the same request under its Idempotency-Key is
// idempotency_conflict, retryable; once the page is open the repeat is the
// first answer, replayed.
func TestOrderKeyWhileTheFirstAttemptRuns(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	g := newGate(t)
	fp, err := forwardproxy.Listen("127.0.0.1:0", forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	box, _ := domain.NewSecretBox(make([]byte, 32))
	h := proxies.New(proxies.Config{Store: store, Supplier: fp, Devices: unreachable{}, Box: box, PublicURL: "http://proxies.test",
		Payments: payments.New(payments.Config{SecretKey: "sk_test_gate", APIBase: g.url})}).Handlers(cqrs.Decorator{})
	ctx := testutil.Context(t)
	cmd := proxies.PlaceProxyOrder{Auth: domain.LocalOperator("org_k"), ProductID: "de-fixed", IdempotencyKey: "k-running"}
	first := make(chan proxies.PlacedOrder, 1)
	go func() {
		o, err := h.PlaceProxyOrder.Handle(ctx, cmd)
		if err != nil {
			t.Error(err)
		}
		first <- o
	}()
	<-g.arrived
	_, err = h.PlaceProxyOrder.Handle(ctx, cmd)
	if e := domain.AsError(err); e.Code != domain.CodeIdempotencyConflict || e.Retryable == nil || !*e.Retryable {
		t.Fatalf("while the first runs: %v; want a retryable idempotency_conflict", err)
	}
	close(g.open)
	o := <-first
	if o.Order.State != domain.ProxyOrderAwaitingPayment || o.Replayed {
		t.Fatalf("first: %+v", o)
	}
	again, err := h.PlaceProxyOrder.Handle(ctx, cmd)
	if err != nil || !again.Replayed || again.Order.OrderID != o.Order.OrderID || again.Order.CheckoutURL != o.Order.CheckoutURL {
		t.Fatalf("repeat: %+v, %v; want the first order replayed", again, err)
	}
}

// reachable is a device that takes its network setting; it records what
// it was told (a phone, which no test here holds).
type reachable struct {
	set map[string]*domain.NetworkProxy
}

func (reachable) Visible(_ context.Context, a domain.Auth, id string) (domain.Device, error) {
	return domain.Device{ID: id, OrgID: a.OrgID}, nil
}

func (d reachable) SetNetworkProxy(_ context.Context, id string, p *domain.NetworkProxy) error {
	d.set[id] = p
	return nil
}

// TestFullRefundTakesTheDevicesOffTheProxy: a full refund of a proxy
// order (a charge whose metadata names the order, as the first payment's
// may) ends the order refunded and asks, as the system, that its devices
// leave the proxy, which the worker's pass does (direct again), as a
// subscription's end does; the refund is recorded on the order.
func TestFullRefundTakesTheDevicesOffTheProxy(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(store, nil, []projections.Projection{projections.Proxies{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	run, cancel := context.WithCancel(ctx)
	if err := r.Ensure(run); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(run); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	fp, err := forwardproxy.Listen("127.0.0.1:0", forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	box, err := domain.NewSecretBox(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	phones := reachable{set: map[string]*domain.NetworkProxy{}}
	const secret = "whsec_refund"
	h := proxies.New(proxies.Config{Store: store, Supplier: fp, Devices: phones, Box: box, ReadModels: r, WebhookSecret: secret}).
		Handlers(cqrs.Decorator{})
	auth := domain.LocalOperator("org_t")
	us, _ := domain.DefaultCatalog().ProxyProduct("us-fixed")
	news, err := eventstore.Encode[domain.Event](domain.Events, "org_t",
		domain.ProxyOrderStarted{OrgID: "org_t", OrderID: "pxo_t", ProxyID: "prx_t", Product: us, Currency: "usd", By: domain.ActorOf(auth), At: time.Now()},
		domain.ProxyOrderPaid{OrderID: "pxo_t", SubscriptionID: "sub_t", At: time.Now()},
		domain.ProxyIssued{ProxyID: "prx_t", OrderID: "pxo_t", Host: "127.0.0.1", Port: 1, Username: "px-t",
			SealedPassword: domain.SealProxyPassword(box, "prx_t", "pw"), At: time.Now()},
		domain.ProxyAssigned{ProxyID: "prx_t", DeviceID: "dev_a", OperationID: "pxop_0", At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ProxyStream("org_t"), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"id": "evt_refund_t", "object": "event", "type": payments.EventChargeRefunded, "created": time.Now().Unix(),
		"data": map[string]any{"object": map[string]any{"id": "ch_t", "object": "charge", "amount": 1500, "amount_refunded": 1500,
			"currency": "usd", "refunded": true, "metadata": map[string]any{payments.MetaOrgID: "org_t", payments.MetaOrderID: "pxo_t",
				proxies.MetaKind: proxies.MetaKindProxy}}}})
	out, err := h.ReceiveProviderEvent.Handle(ctx, proxies.ReceiveProviderEvent{Payload: body,
		Signature: payments.SignWebhookForTest(body, secret, time.Now())})
	if err != nil || !out.Ours || out.Outcome != proxies.OutcomeApplied || out.OrderID != "pxo_t" {
		t.Fatalf("full refund: %+v, %v", out, err)
	}
	o, err := h.GetProxyOrder.Handle(ctx, proxies.GetProxyOrder{Auth: auth, OrderID: "pxo_t"})
	if err != nil || o.State != domain.ProxyOrderEndedState || o.EndedReason != domain.EndRefunded || o.Refund == nil || !o.Refund.Full {
		t.Fatalf("order %+v, %v; want ended refunded with its refund", o, err)
	}
	phones.set["dev_a"] = &domain.NetworkProxy{Host: "127.0.0.1", Port: 1}
	if n, err := h.PerformProxyOperations.Handle(ctx, proxies.PerformProxyOperations{}); err != nil || n != 1 {
		t.Fatalf("pass: %d, %v; want the system's unassign finished", n, err)
	}
	if p, ok := phones.set["dev_a"]; !ok || p != nil {
		t.Fatalf("dev_a's setting %+v (set %v); want direct again", p, ok)
	}
	ops, err := h.ListProxyOperations.Handle(ctx, proxies.ListProxyOperations{Auth: auth, ProxyID: "prx_t"})
	if err != nil || len(ops) != 1 || ops[0].Kind != domain.ProxyOpUnassign || ops[0].State != domain.ProxyOpSucceeded || ops[0].By.Kind != "system" {
		t.Fatalf("operations %+v, %v; want the system's unassign, succeeded", ops, err)
	}
	if p, _ := h.GetProxy.Handle(ctx, proxies.GetProxy{Auth: auth, ProxyID: "prx_t"}); p.State != domain.ProxyRevoked || len(p.Devices) != 0 {
		t.Fatalf("proxy %+v; want revoked with no devices", p)
	}
}
