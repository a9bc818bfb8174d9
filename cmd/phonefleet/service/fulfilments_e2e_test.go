package service

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/webhooksig"
)

const e2eStripeSecret = "whsec_e2e_fulfilments"

// e2eCatalog: one emulator, one cloud phone without a model, and a Pixel
// 8 region with no units (its phones always await provisioning).
const e2eCatalog = `{
  "currency": "usd",
  "default": {"sku": "emulator", "billing": "subscription"},
  "skus": [
    {"sku": "emulator", "name": "Emulator", "prices": {"subscription": 2900, "day": 400}, "maxQuantity": 1,
     "backorderable": true, "inventory": 1},
    {"sku": "cloud_phone", "name": "Cloud phone", "prices": {"day": 1200}, "maxQuantity": 1, "backorderable": true,
     "inventory": 1,
     "models": [{"id": "pixel-8", "name": "Google Pixel 8", "listed": true, "prices": {"subscription": 9900},
       "maxQuantity": 3, "backorderable": true, "defaultRegion": "US", "regions": [{"code": "US", "inventory": 0}]}]}
  ]
}`

// openTestOrder records an open checkout of org for one phone of choice on
// the running service's store, as the checkout does, and returns the
// order and its fulfilment id.
func openTestOrder(t *testing.T, a *App, org string, choice domain.PurchaseChoice) (string, string) {
	t.Helper()
	order, ful := domain.NewID(domain.PrefixOrder), domain.NewID(domain.PrefixFulfilment)
	choice.Quantity = 1
	now := time.Now().UTC().Truncate(time.Microsecond)
	news, err := eventstore.Encode[domain.Event](domain.Events, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, FulfilmentIDs: []string{ful}, Choice: choice, Currency: "usd",
			UnitAmount: 400, RequestDigest: "test", By: domain.Actor{Kind: domain.ActorUser, ID: "test"}, At: now},
		domain.CheckoutOpened{OrderID: order, SessionID: "cs_" + order, CheckoutURL: "https://pay.test/" + order,
			ExpiresAt: now.Add(time.Hour), At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.Append(testutil.Context(t), domain.AccountStream(org), eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
	return order, ful
}

// paidSessionEvent is checkout.session.completed, paid, for an order.
func paidSessionEvent(t *testing.T, org, order string) payments.Event {
	t.Helper()
	obj, err := json.Marshal(map[string]any{"id": "cs_" + order, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "payment_intent": "pi_" + order, "client_reference_id": order,
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}})
	if err != nil {
		t.Fatal(err)
	}
	return payments.Event{ID: "evt_paid_" + order, Type: payments.EventCheckoutCompleted, Created: time.Now(), Object: obj}
}

// signed renders ev as Stripe sends it and signs it with secret now.
func signed(t *testing.T, ev payments.Event, secret string) provisioning.ReceiveProviderEvent {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": ev.ID, "object": "event", "type": ev.Type, "created": ev.Created.Unix(),
		"livemode": false, "api_version": "2024-06-20", "data": map[string]any{"object": json.RawMessage(ev.Object)}})
	if err != nil {
		t.Fatal(err)
	}
	return provisioning.ReceiveProviderEvent{Payload: b, Signature: payments.SignWebhookForTest(b, secret, time.Now())}
}

// TestFulfilmentChangedReachesAnHTTPSReceiver: fulfilment.changed reaches
// a real HTTPS receiver, signed, with exactly fulfilmentId, state and
// deviceId, for a phone provisioned, one awaiting provisioning, and phones
// cancelled by the provider and by the customer's Return; and never for
// the cancellations spec 3.2 keeps silent: an owner refund, a cloud phone
// cancelled before delivery, a day pass expiring and the undelivered-order
// sweep. Provider events go through the application's webhook command,
// signed as Stripe signs them (a local service trusts the loopback
// receiver; the HTTP route itself is hosted-only).
func TestFulfilmentChangedReachesAnHTTPSReceiver(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	catalogFile := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(catalogFile, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": rcv.CAFile, "SERVICE_SIM_DEVICES": "0",
		"SERVICE_STRIPE_WEBHOOK_SECRET": e2eStripeSecret, "SERVICE_CATALOG_FILE": catalogFile,
	})
	ctx := testutil.Context(t)
	app := a.Application()
	org := a.orgID
	auth := domain.LocalOperator(org)
	hook, err := app.Webhooks.CreateWebhook.Handle(ctx, webhooks.CreateWebhook{Auth: auth, URL: rcv.URL + "/in",
		Events: []string{domain.WebhookFulfilmentChanged}})
	if err != nil {
		t.Fatal(err)
	}
	var lastOrder string
	pay := func(choice domain.PurchaseChoice) string {
		t.Helper()
		order, ful := openTestOrder(t, a, org, choice)
		r, err := app.Provisioning.ReceiveProviderEvent.Handle(ctx, signed(t, paidSessionEvent(t, org, order), e2eStripeSecret))
		if err != nil || r.Outcome != provisioning.ProviderEventApplied {
			t.Fatalf("payment of %s: %+v, %v", order, r, err)
		}
		lastOrder = order
		return ful
	}
	state := func(id string) (string, string) {
		t.Helper()
		page, err := app.Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page.Fulfilments {
			if f.FulfilmentID == id {
				return f.State, f.DeviceID
			}
		}
		t.Fatalf("fulfilment %s is not listed", id)
		return "", ""
	}
	type change = fulfilmentChange
	var want []change

	// Evented: provisioned, awaiting, cancelled by the provider and by the
	// customer's Return.
	emulator := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}
	first := pay(emulator)
	_, device := state(first)
	want = append(want, change{first, "provisioned", device})
	second := pay(emulator)
	secondOrder := lastOrder
	want = append(want, change{second, "awaiting_provisioning", ""})
	subEnded, _ := json.Marshal(map[string]any{"id": "sub_2", "object": "subscription", "status": "canceled",
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: secondOrder}})
	if _, err := app.Provisioning.ReceiveProviderEvent.Handle(ctx, signed(t, payments.Event{ID: "evt_sub_2_deleted",
		Type: payments.EventSubscriptionDeleted, Created: time.Now(), Object: subEnded}, e2eStripeSecret)); err != nil {
		t.Fatal(err)
	}
	want = append(want, change{second, "cancelled", ""})
	if _, err := app.Provisioning.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: auth, FulfilmentID: first}); err != nil {
		t.Fatal(err)
	}
	want = append(want, change{first, "cancelled", ""})

	// Silent: an owner refund (its provisioning is evented).
	refunded := pay(domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay})
	_, device = state(refunded)
	want = append(want, change{refunded, "provisioned", device})
	if _, err := app.Provisioning.RefundFulfilment.Handle(ctx, provisioning.RefundFulfilment{FulfilmentID: refunded}); err != nil {
		t.Fatal(err)
	}
	// Silent: a cloud phone cancelled before delivery.
	cloud := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay}
	dayPass := pay(cloud)
	_, device = state(dayPass)
	want = append(want, change{dayPass, "provisioned", device})
	undelivered := pay(cloud)
	want = append(want, change{undelivered, "awaiting_provisioning", ""})
	if v, err := app.Provisioning.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: auth, FulfilmentID: undelivered}); err != nil ||
		v.CancelledReason != domain.EndCloudUndelivered {
		t.Fatalf("cancel before delivery: %+v, %v", v, err)
	}
	// Silent: a day pass expiring and the undelivered-order sweep, on a
	// clock a week ahead (a second provisioning capability over the same
	// store, as a sweep on another instance would be).
	pixel := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US"}
	stuck := pay(pixel)
	want = append(want, change{stuck, "awaiting_provisioning", ""})
	catalog, err := domain.ParseCatalog([]byte(e2eCatalog))
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(8 * 24 * time.Hour)
	ahead := provisioning.New(provisioning.Config{Store: a.store, Catalog: catalog, Devices: a.capabilities.Fleet,
		Now:        func() time.Time { return later },
		ReadModels: a.runner})
	for id, expect := range map[string]string{dayPass: provisioning.SweptEnded, stuck: provisioning.SweptUndelivered} {
		if did, err := (provisioning.SweepFulfilmentHandler{Provisioning: ahead}).Handle(ctx, provisioning.SweepFulfilment{FulfilmentID: id}); err != nil || did != expect {
			t.Fatalf("sweep %s a week later: %q, %v; want %q", id, did, err, expect)
		}
	}
	// The sentinel: a last evented change. The outbox records deliveries in
	// event order, so once its delivery is recorded, every earlier change
	// has been decided on.
	sentinel := pay(pixel)
	want = append(want, change{sentinel, "awaiting_provisioning", ""})

	for id, reason := range map[string]string{refunded: domain.EndOwnerRefund, undelivered: domain.EndCloudUndelivered,
		dayPass: domain.EndDayPassExpired, stuck: domain.EndUndelivered} {
		page, err := app.Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(page.Fulfilments, func(f projections.FulfilmentView) bool { return f.FulfilmentID == id })
		if i < 0 || page.Fulfilments[i].State != domain.FulfilmentCancelledState || page.Fulfilments[i].CancelledReason != reason {
			t.Errorf("silent cancellation of %s: listed as %+v; want cancelled %s", id, page.Fulfilments, reason)
		}
	}

	// Every recorded delivery, once the sentinel's is.
	var recorded []change
	waitUntil(t, 30*time.Second, "the sentinel's delivery", func() (bool, error) {
		page, err := app.Webhooks.ListDeliveries.Handle(ctx, webhooks.ListDeliveries{Auth: auth, WebhookID: hook.WebhookID, Limit: 100})
		if err != nil {
			return false, err
		}
		recorded = recorded[:0]
		for _, d := range slices.Backward(page.Deliveries) {
			c, err := changeOf(d.Payload)
			if err != nil {
				return false, err
			}
			recorded = append(recorded, c)
		}
		return slices.Contains(recorded, change{sentinel, "awaiting_provisioning", ""}), nil
	})
	if !slices.Equal(recorded, want) {
		t.Errorf("recorded deliveries:\n%v\nwant exactly:\n%v", recorded, want)
	}

	// And the receiver gets each of them, signed, with exactly the spec 6
	// data fields.
	var received []change
	waitUntil(t, 30*time.Second, "every delivery at the receiver", func() (bool, error) {
		reqs, bodies := rcv.received()
		received = received[:0]
		for i, r := range reqs {
			if err := webhooksig.Verify(bodies[i], r.Header.Get(webhooksig.SignatureHeader), hook.Secret, time.Now(), 0); err != nil {
				return false, err
			}
			if r.Header.Get(webhooksig.EventHeader) != domain.WebhookFulfilmentChanged {
				t.Errorf("Service-Event %q", r.Header.Get(webhooksig.EventHeader))
			}
			var body struct {
				Data map[string]any `json:"data"`
			}
			if err := json.Unmarshal(bodies[i], &body); err != nil {
				return false, err
			}
			wantKeys(t, body.Data, "fulfilmentId", "state", "deviceId")
			c, err := changeOf(bodies[i])
			if err != nil {
				return false, err
			}
			received = append(received, c)
		}
		return len(received) >= len(want), nil
	})
	slices.SortFunc(received, compareChange)
	sorted := slices.Clone(want)
	slices.SortFunc(sorted, compareChange)
	if !slices.Equal(received, sorted) {
		t.Errorf("received:\n%v\nwant exactly:\n%v", received, sorted)
	}
}

// fulfilmentChange is one fulfilment.changed as delivered.
type fulfilmentChange struct{ id, state, device string }

func compareChange(a, b fulfilmentChange) int {
	return strings.Compare(a.id+" "+a.state, b.id+" "+b.state)
}

// changeOf reads a delivery body's fulfilment.changed data.
func changeOf(body []byte) (fulfilmentChange, error) {
	var d struct {
		Event string `json:"event"`
		Data  struct {
			FulfilmentID string  `json:"fulfilmentId"`
			State        string  `json:"state"`
			DeviceID     *string `json:"deviceId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return fulfilmentChange{}, err
	}
	c := fulfilmentChange{id: d.Data.FulfilmentID, state: d.Data.State}
	if d.Data.DeviceID != nil {
		c.device = *d.Data.DeviceID
	}
	return c, nil
}
