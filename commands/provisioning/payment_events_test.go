package provisioning_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// fulEnv is a running fleet with the provisioning capability over it, the
// fulfilments read model, a small catalog and an injected clock: what the
// payment webhook and the fulfilment commands need.
type fulEnv struct {
	*fleettest.Env
	clock *fleettest.Clock
	fr    *projections.Runner
	p     *provisioning.Provisioning
	app   commands.Application
}

const fulSecret = "whsec_fulfilments_test_secret"

var fulStart = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// fulCatalog has little inventory, so tests reach sold-out slots: one
// emulator, one cloud phone without a model, two Pixel 8 in the US.
const fulCatalog = `{
  "currency": "usd",
  "default": {"sku": "emulator", "billing": "subscription"},
  "skus": [
    {"sku": "emulator", "name": "Emulator", "prices": {"subscription": 2900, "day": 400, "payg": 3},
     "maxQuantity": 1, "backorderable": true, "inventory": 1},
    {"sku": "cloud_phone", "name": "Cloud phone", "prices": {"day": 1200}, "maxQuantity": 1, "backorderable": true,
     "inventory": 1,
     "models": [{"id": "pixel-8", "name": "Google Pixel 8", "listed": true, "prices": {"subscription": 9900, "day": 1500},
       "maxQuantity": 3, "backorderable": true, "defaultRegion": "US", "regions": [{"code": "US", "inventory": 2}]}]}
  ]
}`

func newFulEnv(t *testing.T, configure ...func(*provisioning.Config)) *fulEnv {
	t.Helper()
	clock := fleettest.NewClock(fulStart)
	env := fleettest.Start(t, fleettest.Options{Clock: clock, MaxConns: 20})
	fr, err := projections.NewRunner(env.Store, fleettest.Quiet, []projections.Projection{projections.Fulfilments{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := fr.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = fr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	catalog, err := domain.ParseCatalog([]byte(fulCatalog))
	if err != nil {
		t.Fatal(err)
	}
	cfg := provisioning.Config{Store: env.Store, Catalog: catalog, Devices: env.Fleet,
		WebhookSecret: fulSecret, Now: clock.Now,
		ReadModels: testutil.ReadModels{RM: env.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: fr}}}
	for _, c := range configure {
		c(&cfg)
	}
	p := provisioning.New(cfg)
	return &fulEnv{Env: env, clock: clock, fr: fr, p: p, app: commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})}
}

// fulAdmin is a signed-in admin of org.
func fulAdmin(org string) domain.Auth {
	return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "admin_" + org, Role: domain.RoleAdmin, Scopes: domain.AllScopes}
}

// openOrder records a checkout attempt whose page is open, as the checkout
// does: n fulfilment ids for choice. It returns the order and the ids.
func (e *fulEnv) openOrder(t *testing.T, org string, choice domain.PurchaseChoice, n int) (string, []string) {
	t.Helper()
	order := domain.NewID(domain.PrefixOrder)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = domain.NewID(domain.PrefixFulfilment)
	}
	choice.Quantity = max(n, 1)
	row, _ := e.p.Catalog().Row(choice.Sku, choice.Billing)
	amount := int64(0)
	if row.Amount != nil {
		amount = *row.Amount
	}
	if m, ok := row.Model(choice.Model); ok && m.Amount != nil {
		amount = *m.Amount
	}
	e.appendAccount(t, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, FulfilmentIDs: ids, Choice: choice, Currency: "usd", UnitAmount: amount,
			RequestDigest: "test", By: domain.Actor{Kind: domain.ActorUser, ID: "admin_" + org}, At: e.clock.Now()},
		domain.CheckoutOpened{OrderID: order, SessionID: "cs_" + order, CheckoutURL: "https://pay.test/" + order,
			ExpiresAt: e.clock.Now().Add(time.Hour), At: e.clock.Now()})
	return order, ids
}

func (e *fulEnv) appendAccount(t *testing.T, org string, evs ...domain.Event) {
	t.Helper()
	news, err := eventstore.Encode(domain.Events, org, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Append(testutil.Context(t), domain.AccountStream(org), eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
}

// stripeEvent renders a provider event as Stripe sends it.
func stripeEvent(t *testing.T, id, typ string, object map[string]any, created time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": created.Unix(),
		"livemode": false, "api_version": "2024-06-20", "pending_webhooks": 1, "data": map[string]any{"object": object}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// session is a checkout.session object of an order of org.
func session(org, order, mode, paymentStatus string, extra map[string]any) map[string]any {
	s := map[string]any{"id": "cs_" + order, "object": "checkout.session", "mode": mode, "status": "complete",
		"payment_status": paymentStatus, "customer": "cus_" + org, "client_reference_id": order,
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}}
	for k, v := range extra {
		s[k] = v
	}
	return s
}

// deliver posts payload signed as Stripe signs it with the webhook secret.
func (e *fulEnv) deliver(t *testing.T, payload []byte) (provisioning.ProviderEventReceipt, error) {
	t.Helper()
	sig := payments.SignWebhookForTest(payload, fulSecret, e.clock.Now())
	return e.app.Provisioning.ReceiveProviderEvent.Handle(testutil.Context(t), provisioning.ReceiveProviderEvent{Payload: payload, Signature: sig})
}

func (e *fulEnv) mustDeliver(t *testing.T, payload []byte, outcome string) provisioning.ProviderEventReceipt {
	t.Helper()
	r, err := e.deliver(t, payload)
	if err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if r.Outcome != outcome {
		t.Fatalf("outcome %q; want %q", r.Outcome, outcome)
	}
	return r
}

// eventCount counts the recorded events (a change of nothing keeps it).
func (e *fulEnv) eventCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// streamTypes lists the event types of a stream.
func (e *fulEnv) streamTypes(t *testing.T, stream string) []string {
	t.Helper()
	evs, err := e.Store.Load(testutil.Context(t), stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// streamEvents calls apply with each event of stream, decoded, and its
// version.
func (e *fulEnv) streamEvents(t *testing.T, stream string, apply func(ev domain.Event, version int64)) {
	t.Helper()
	evs, err := e.Store.Load(testutil.Context(t), stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		de, err := domain.Events.Decode(ev.Type, ev.SchemaVersion, ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		apply(de, ev.StreamVersion)
	}
}

// account folds org's billing account.
func (e *fulEnv) account(t *testing.T, org string) domain.Account {
	t.Helper()
	a := domain.Account{OrgID: org}
	e.streamEvents(t, domain.AccountStream(org), a.Apply)
	return a
}

func (e *fulEnv) orderState(t *testing.T, org, order string) string {
	t.Helper()
	a := e.account(t, org)
	o, ok := a.Order(order)
	if !ok {
		t.Fatalf("order %s not on the account", order)
	}
	return o.State
}

// fulfilment reads a fulfilment from the read model.
func (e *fulEnv) fulfilment(t *testing.T, org, id string) projections.FulfilmentView {
	t.Helper()
	v, ok, err := projections.GetFulfilment(testutil.Context(t), e.Pool, org, id)
	if err != nil || !ok {
		t.Fatalf("fulfilment %s: found %v, %v", id, ok, err)
	}
	return v
}

// cancelled returns the fulfilment.cancelled recorded for id.
func (e *fulEnv) cancelled(t *testing.T, id string) domain.FulfilmentCancelled {
	t.Helper()
	var found *domain.FulfilmentCancelled
	e.streamEvents(t, domain.FulfilmentStream(id), func(ev domain.Event, _ int64) {
		if c, ok := ev.(domain.FulfilmentCancelled); ok && found == nil {
			found = &c
		}
	})
	if found == nil {
		t.Fatalf("fulfilment %s has no fulfilment.cancelled: %v", id, e.streamTypes(t, domain.FulfilmentStream(id)))
	}
	return *found
}

// deviceVisible reports whether org's admin sees the device.
func (e *fulEnv) deviceVisible(t *testing.T, org, deviceID string) bool {
	t.Helper()
	_, err := e.App.Fleet.GetDevice.Handle(testutil.Context(t), fleet.GetDevice{Auth: fulAdmin(org), DeviceID: deviceID})
	if err != nil && domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatal(err)
	}
	return err == nil
}

func (e *fulEnv) registrations(t *testing.T, org string) int {
	t.Helper()
	var n int
	if err := e.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM events WHERE event_type = 'device.registered' AND org_id = $1`,
		org).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPaidOrderProvisionsOncePerFulfilment: a paid subscription checkout
// commits the order paid, its fulfilment and a device registered for the
// organisation; the same event delivered again (twice) changes nothing.
func TestPaidOrderProvisionsOncePerFulfilment(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}, 1)
	paid := stripeEvent(t, "evt_paid_1", payments.EventCheckoutCompleted,
		session(org, order, "subscription", "paid", map[string]any{"subscription": "sub_1"}), e.clock.Now())

	r := e.mustDeliver(t, paid, provisioning.ProviderEventApplied)
	if r.OrderID != order || r.EventID != "evt_paid_1" {
		t.Errorf("receipt %+v", r)
	}
	if got := e.orderState(t, org, order); got != domain.OrderPaidState {
		t.Errorf("order state %s; want paid", got)
	}
	f := e.fulfilment(t, org, ids[0])
	if f.State != domain.FulfilmentProvisionedState || f.DeviceID == "" || f.SubscriptionID != "sub_1" || f.UnitAmount != 2900 ||
		f.ProvisionedAt == nil || !f.ProvisionedAt.Equal(fulStart) {
		t.Fatalf("fulfilment %+v; want provisioned with a device, sub_1, 2900", f)
	}
	if !e.deviceVisible(t, org, f.DeviceID) {
		t.Errorf("device %s is not the organisation's", f.DeviceID)
	}
	if want := []string{"fulfilment.created", "fulfilment.provisioned"}; !slices.Equal(e.streamTypes(t, domain.FulfilmentStream(ids[0])), want) {
		t.Errorf("fulfilment stream %v; want %v", e.streamTypes(t, domain.FulfilmentStream(ids[0])), want)
	}

	before := e.eventCount(t)
	for range 2 {
		e.mustDeliver(t, paid, provisioning.ProviderEventDuplicate)
	}
	if after := e.eventCount(t); after != before {
		t.Errorf("a redelivery recorded %d events", after-before)
	}
	if n := e.registrations(t, org); n != 1 {
		t.Errorf("%d devices registered; want 1", n)
	}
}

// TestPaidOrderPromisesWhatCannotShip: three Pixel 8 in a region with two
// units: two are provisioned, the third awaits provisioning promised
// within 24 hours.
func TestPaidOrderPromisesWhatCannotShip(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription,
		Model: "pixel-8", Region: "US"}, 3)
	e.mustDeliver(t, stripeEvent(t, "evt_three", payments.EventCheckoutCompleted,
		session(org, order, "subscription", "paid", map[string]any{"subscription": "sub_3"}), e.clock.Now()), provisioning.ProviderEventApplied)
	var states []string
	for _, id := range ids {
		f := e.fulfilment(t, org, id)
		states = append(states, f.State)
		if f.Model != "pixel-8" || f.Region != "US" || f.UnitAmount != 9900 {
			t.Errorf("fulfilment %+v", f)
		}
		if f.State == domain.FulfilmentAwaitingState && (f.EstimatedBy == nil || !f.EstimatedBy.Equal(fulStart.Add(24*time.Hour)) || f.DeviceID != "") {
			t.Errorf("awaiting fulfilment %+v; want estimatedBy %s and no device", f, fulStart.Add(24*time.Hour))
		}
	}
	if want := []string{"provisioned", "provisioned", "awaiting_provisioning"}; !slices.Equal(states, want) {
		t.Errorf("states %v; want %v", states, want)
	}
	if n := e.registrations(t, org); n != 2 {
		t.Errorf("%d devices registered; want 2", n)
	}
	est, err := projections.FulfilmentEstimates(testutil.Context(t), e.Pool, org, ids[2])
	if err != nil || len(est) != 1 || est[0].Reason != projections.EstimateFirst {
		t.Errorf("estimate history %+v, %v", est, err)
	}
}

// TestDeviceRegisteredBeforeACrashIsKept: a device registered for a
// fulfilment by an attempt that stopped before recording the payment is
// the one the fulfilment gets when the provider delivers the event again.
func TestDeviceRegisteredBeforeACrashIsKept(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	// The crashed attempt: the registration committed (with its marker),
	// nothing else did.
	reg, err := e.Fleet.RegisterDevices().Handle(testutil.Context(t), fleet.RegisterDevices{OrgID: org, Backend: domain.BackendSim,
		Count: 1, NamePrefix: "emulator", SeedMarker: domain.FulfilmentDeviceStream(ids[0])})
	if err != nil || len(reg) != 1 {
		t.Fatalf("register: %v %v", reg, err)
	}
	e.mustDeliver(t, stripeEvent(t, "evt_after_crash", payments.EventCheckoutCompleted,
		session(org, order, "payment", "paid", map[string]any{"payment_intent": "pi_1"}), e.clock.Now()), provisioning.ProviderEventApplied)
	if f := e.fulfilment(t, org, ids[0]); f.DeviceID != reg[0] || f.PaymentIntentID != "pi_1" {
		t.Errorf("fulfilment %+v; want device %s", f, reg[0])
	}
	if n := e.registrations(t, org); n != 1 {
		t.Errorf("%d devices registered; want 1", n)
	}
}

// TestConcurrentDeliveriesApplyOnce: the provider delivering one event
// twice at once records it once, with one device.
func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}, 1)
	paid := stripeEvent(t, "evt_twice", payments.EventCheckoutCompleted, session(org, order, "subscription", "paid", nil), e.clock.Now())
	var wg sync.WaitGroup
	outcomes := make([]string, 4)
	errs := make([]error, 4)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.deliver(t, paid)
			outcomes[i], errs[i] = r.Outcome, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(outcomes)
	if want := []string{"applied", "duplicate", "duplicate", "duplicate"}; !slices.Equal(outcomes, want) {
		t.Errorf("outcomes %v; want %v", outcomes, want)
	}
	if n := e.registrations(t, org); n != 1 {
		t.Errorf("%d devices registered; want 1", n)
	}
	if got := e.streamTypes(t, domain.FulfilmentStream(ids[0])); len(got) != 2 {
		t.Errorf("fulfilment stream %v", got)
	}
}

// TestProviderEventsOutOfOrder: the subscription's end arriving before the
// payment cannot apply (not_settled, nothing recorded); once the payment
// is applied, its redelivery ends the order and cancels the phone,
// notified, and the device leaves the organisation.
func TestProviderEventsOutOfOrder(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}, 1)
	deleted := stripeEvent(t, "evt_sub_deleted", payments.EventSubscriptionDeleted, map[string]any{"id": "sub_9", "object": "subscription",
		"status": "canceled", "customer": "cus_" + org, "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}},
		e.clock.Now())

	before := e.eventCount(t)
	_, err := e.deliver(t, deleted)
	if de := domain.AsError(err); de.Code != domain.CodeNotSettled || de.Retryable == nil || !*de.Retryable {
		t.Fatalf("subscription deleted before the payment: got %v; want not_settled, retryable", err)
	}
	if after := e.eventCount(t); after != before {
		t.Errorf("a not_settled event recorded %d events", after-before)
	}
	if got := e.streamTypes(t, domain.ProviderEventStream("evt_sub_deleted")); len(got) != 0 {
		t.Errorf("the event is marked applied: %v", got)
	}

	e.mustDeliver(t, stripeEvent(t, "evt_paid_9", payments.EventCheckoutCompleted,
		session(org, order, "subscription", "paid", map[string]any{"subscription": "sub_9"}), e.clock.Now()), provisioning.ProviderEventApplied)
	device := e.fulfilment(t, org, ids[0]).DeviceID
	// The device is in use when the order ends: the lease ends with it.
	if _, err := e.Fleet.AcquireLease().Handle(testutil.Context(t), fleet.AcquireLease{Auth: fulAdmin(org), DeviceID: device}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.mustDeliver(t, deleted, provisioning.ProviderEventApplied)

	if got := e.orderState(t, org, order); got != domain.OrderEndedState {
		t.Errorf("order %s; want ended", got)
	}
	f := e.fulfilment(t, org, ids[0])
	c := e.cancelled(t, ids[0])
	if f.State != domain.FulfilmentCancelledState || f.DeviceID != "" || c.Reason != domain.EndSubscriptionEnded || !c.Notify ||
		c.DeviceID != device || c.ProviderEventID != "evt_sub_deleted" {
		t.Errorf("fulfilment %+v, cancelled %+v", f, c)
	}
	if e.deviceVisible(t, org, device) {
		t.Errorf("device %s is still the organisation's", device)
	}
	if got, want := e.streamTypes(t, domain.DeviceStream(device)), []string{"device.registered", "lease.acquired", "lease.released", "device.retired"}; !slices.Equal(got, want) {
		t.Errorf("device stream %v; want %v", got, want)
	}
	before = e.eventCount(t)
	e.mustDeliver(t, deleted, provisioning.ProviderEventDuplicate)
	if after := e.eventCount(t); after != before {
		t.Errorf("a redelivery recorded %d events", after-before)
	}
}

// TestProviderEventRefusals: a bad or stale signature is invalid_signature
// and a signed body that is not a readable event (or whose object is not
// what its type says) invalid_event; none records anything. An event
// naming an order the account does not hold is not_settled.
func TestProviderEventRefusals(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, _ := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}, 1)
	paid := stripeEvent(t, "evt_refused", payments.EventCheckoutCompleted, session(org, order, "subscription", "paid", nil), e.clock.Now())
	ctx := testutil.Context(t)
	before := e.eventCount(t)
	cases := []struct {
		name    string
		payload []byte
		sig     string
		code    domain.Code
	}{
		{"wrong secret", paid, payments.SignWebhookForTest(paid, "whsec_other", e.clock.Now()), domain.CodeInvalidSignature},
		{"no signature", paid, "", domain.CodeInvalidSignature},
		{"altered body", append(append([]byte{}, paid[:len(paid)-1]...), []byte(`,"x":1}`)...),
			payments.SignWebhookForTest(paid, fulSecret, e.clock.Now()), domain.CodeInvalidSignature},
		{"signed ten minutes ago", paid, payments.SignWebhookForTest(paid, fulSecret, e.clock.Now().Add(-10*time.Minute)), domain.CodeInvalidSignature},
		{"not an event", []byte(`{"hello":"world"}`), payments.SignWebhookForTest([]byte(`{"hello":"world"}`), fulSecret, e.clock.Now()),
			domain.CodeInvalidEvent},
	}
	wrongObject := stripeEvent(t, "evt_wrong_object", payments.EventCheckoutCompleted, map[string]any{"id": "sub_x", "object": "subscription"},
		e.clock.Now())
	cases = append(cases, struct {
		name    string
		payload []byte
		sig     string
		code    domain.Code
	}{"object of another kind", wrongObject, payments.SignWebhookForTest(wrongObject, fulSecret, e.clock.Now()), domain.CodeInvalidEvent})
	for _, c := range cases {
		_, err := e.app.Provisioning.ReceiveProviderEvent.Handle(ctx, provisioning.ReceiveProviderEvent{Payload: c.payload, Signature: c.sig})
		if got := domain.ErrorCode(err); got != c.code {
			t.Errorf("%s: got %v; want %s", c.name, err, c.code)
		}
	}
	unknown := stripeEvent(t, "evt_unknown_order", payments.EventCheckoutCompleted,
		session(org, domain.NewID(domain.PrefixOrder), "subscription", "paid", nil), e.clock.Now())
	if _, err := e.deliver(t, unknown); domain.ErrorCode(err) != domain.CodeNotSettled {
		t.Errorf("an order not recorded yet: got %v; want not_settled", err)
	}
	if after := e.eventCount(t); after != before {
		t.Errorf("refused deliveries recorded %d events", after-before)
	}
	if got := e.orderState(t, org, order); got != domain.OrderOpen {
		t.Errorf("order %s; want open", got)
	}

	// Without a webhook secret, nothing is received.
	none := provisioning.New(provisioning.Config{Store: e.Store, Devices: e.Fleet, Now: e.clock.Now})
	if _, err := (provisioning.ReceiveProviderEventHandler{Provisioning: none}).Handle(ctx, provisioning.ReceiveProviderEvent{Payload: paid,
		Signature: payments.SignWebhookForTest(paid, fulSecret, e.clock.Now())}); domain.ErrorCode(err) != domain.CodeServiceUnavailable {
		t.Errorf("no secret: got %v; want service_unavailable", err)
	}
}

// TestAsynchronousPayments: a checkout completed unpaid is pending; its
// payment succeeding pays it; another's failing expires it.
func TestAsynchronousPayments(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	e.mustDeliver(t, stripeEvent(t, "evt_unpaid", payments.EventCheckoutCompleted, session(org, order, "payment", "unpaid", nil),
		e.clock.Now()), provisioning.ProviderEventApplied)
	if got := e.orderState(t, org, order); got != domain.OrderPendingState {
		t.Fatalf("order %s; want payment_pending", got)
	}
	if got := e.streamTypes(t, domain.FulfilmentStream(ids[0])); len(got) != 0 {
		t.Fatalf("a pending order has fulfilment events %v", got)
	}
	e.mustDeliver(t, stripeEvent(t, "evt_async_ok", payments.EventCheckoutAsyncPaymentSucceeded,
		session(org, order, "payment", "paid", map[string]any{"payment_intent": "pi_async"}), e.clock.Now()), provisioning.ProviderEventApplied)
	if got := e.orderState(t, org, order); got != domain.OrderPaidState {
		t.Errorf("order %s; want paid", got)
	}
	if f := e.fulfilment(t, org, ids[0]); f.State != domain.FulfilmentProvisionedState || f.PaymentIntentID != "pi_async" {
		t.Errorf("fulfilment %+v", f)
	}

	failed, _ := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	e.mustDeliver(t, stripeEvent(t, "evt_unpaid_2", payments.EventCheckoutCompleted, session(org, failed, "payment", "unpaid", nil),
		e.clock.Now()), provisioning.ProviderEventApplied)
	e.mustDeliver(t, stripeEvent(t, "evt_async_failed", payments.EventCheckoutAsyncPaymentFailed,
		session(org, failed, "payment", "unpaid", nil), e.clock.Now()), provisioning.ProviderEventApplied)
	if got := e.orderState(t, org, failed); got != domain.OrderExpired {
		t.Errorf("order with a failed payment %s; want expired", got)
	}
	expired, _ := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	e.mustDeliver(t, stripeEvent(t, "evt_expired", payments.EventCheckoutExpired, session(org, expired, "payment", "unpaid", nil),
		e.clock.Now()), provisioning.ProviderEventApplied)
	if got := e.orderState(t, org, expired); got != domain.OrderExpired {
		t.Errorf("expired session's order %s; want expired", got)
	}
}

// TestPaygOrderGrantsAndEndsPoolAccess: a pay-as-you-go checkout (a card
// saved, nothing charged) gives pool access and no fulfilment; the
// provider ending it takes the access away.
func TestPaygOrderGrantsAndEndsPoolAccess(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	order, _ := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg}, 0)
	e.mustDeliver(t, stripeEvent(t, "evt_setup", payments.EventCheckoutCompleted,
		session(org, order, "setup", "no_payment_required", map[string]any{"setup_intent": "seti_1"}), e.clock.Now()), provisioning.ProviderEventApplied)
	if a := e.account(t, org); !a.PaygActive() {
		t.Fatal("no pay-as-you-go access after the card was saved")
	}
	if n := e.registrations(t, org); n != 0 {
		t.Errorf("%d devices registered for a pay-as-you-go order", n)
	}
	e.mustDeliver(t, stripeEvent(t, "evt_payg_end", payments.EventSubscriptionDeleted, map[string]any{"id": "sub_payg",
		"object": "subscription", "status": "canceled", "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}},
		e.clock.Now()), provisioning.ProviderEventApplied)
	if a := e.account(t, org); a.PaygActive() {
		t.Error("pay-as-you-go access outlived the order's end")
	}
}

// TestRefundsAndDisputes: a full refund ends a day pass order, refunded;
// a dispute found through its payment intent ends another, disputed; both
// notified. A partial refund is recorded and leaves the order paid
// (issue 26). An event of another type and an object that is not this
// service's are acknowledged and ignored (and marked).
func TestRefundsAndDisputes(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	refunded, rids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	disputed, dids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay}, 1)
	e.mustDeliver(t, stripeEvent(t, "evt_pay_r", payments.EventCheckoutCompleted,
		session(org, refunded, "payment", "paid", map[string]any{"payment_intent": "pi_r"}), e.clock.Now()), provisioning.ProviderEventApplied)
	e.mustDeliver(t, stripeEvent(t, "evt_pay_d", payments.EventCheckoutCompleted,
		session(org, disputed, "payment", "paid", map[string]any{"payment_intent": "pi_d"}), e.clock.Now()), provisioning.ProviderEventApplied)

	charge := func(full bool, amountRefunded int) map[string]any {
		return map[string]any{"id": "ch_r", "object": "charge", "amount": 400, "amount_refunded": amountRefunded, "refunded": full,
			"payment_intent": "pi_r", "status": "succeeded", "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: refunded}}
	}
	e.mustDeliver(t, stripeEvent(t, "evt_partial", payments.EventChargeRefunded, charge(false, 100), e.clock.Now()), provisioning.ProviderEventApplied)
	if got := e.orderState(t, org, refunded); got != domain.OrderPaidState {
		t.Errorf("after a partial refund the order is %s; want paid", got)
	}
	e.mustDeliver(t, stripeEvent(t, "evt_refund", payments.EventChargeRefunded, charge(true, 400), e.clock.Now()), provisioning.ProviderEventApplied)
	if c := e.cancelled(t, rids[0]); c.Reason != domain.EndRefunded || !c.Notify {
		t.Errorf("refunded: %+v", c)
	}
	// A dispute carries no metadata of ours: its payment intent names the order.
	e.mustDeliver(t, stripeEvent(t, "evt_dispute", payments.EventDisputeCreated, map[string]any{"id": "dp_1", "object": "dispute",
		"amount": 1200, "charge": "ch_d", "payment_intent": "pi_d", "status": "needs_response", "reason": "fraudulent"}, e.clock.Now()),
		provisioning.ProviderEventApplied)
	if c := e.cancelled(t, dids[0]); c.Reason != domain.EndDisputed || !c.Notify {
		t.Errorf("disputed: %+v", c)
	}
	if got := e.orderState(t, org, disputed); got != domain.OrderEndedState {
		t.Errorf("disputed order %s; want ended", got)
	}

	e.mustDeliver(t, stripeEvent(t, "evt_other_type", "invoice.finalized", map[string]any{"id": "in_1", "object": "invoice"}, e.clock.Now()),
		provisioning.ProviderEventIgnored)
	e.mustDeliver(t, stripeEvent(t, "evt_not_ours", payments.EventCheckoutCompleted, map[string]any{"id": "cs_x", "object": "checkout.session",
		"payment_status": "paid"}, e.clock.Now()), provisioning.ProviderEventIgnored)
	e.mustDeliver(t, stripeEvent(t, "evt_other_type", "invoice.finalized", map[string]any{"id": "in_1", "object": "invoice"}, e.clock.Now()),
		provisioning.ProviderEventDuplicate)
	for _, id := range []string{"evt_partial", "evt_other_type", "evt_not_ours"} {
		if got := e.streamTypes(t, domain.ProviderEventStream(id)); !slices.Equal(got, []string{"payment.provider_event_applied"}) {
			t.Errorf("%s marker: %v", id, got)
		}
	}
}
