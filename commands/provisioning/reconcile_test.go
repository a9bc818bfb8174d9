package provisioning_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// reconcileWorld names what the reconciliation tests record: two
// organisations' billing accounts with their orders and fulfilments, and
// the provider ids their orders were paid with. The recorded provider
// answers (testdata/reconcile/*) are templates over these names.
type reconcileWorld struct {
	OrgA, OrgB, CusA, CusB                      string
	OrderA1, OrderA2, OrderB1, OrderB2, OrderB3 string
	SubA1, SubB1, PiA2, PiB2                    string
	FA1a, FA1b, FA2, FB1, FB2                   string
}

func newReconcileWorld() reconcileWorld {
	id := domain.NewID
	return reconcileWorld{
		OrgA: id(domain.PrefixOrganisation), OrgB: id(domain.PrefixOrganisation),
		CusA: "cus_" + id("a")[2:], CusB: "cus_" + id("b")[2:],
		OrderA1: id(domain.PrefixOrder), OrderA2: id(domain.PrefixOrder), OrderB1: id(domain.PrefixOrder),
		OrderB2: id(domain.PrefixOrder), OrderB3: id(domain.PrefixOrder),
		SubA1: "sub_" + id("a")[2:], SubB1: "sub_" + id("b")[2:], PiA2: "pi_" + id("a")[2:], PiB2: "pi_" + id("b")[2:],
		FA1a: id(domain.PrefixFulfilment), FA1b: id(domain.PrefixFulfilment), FA2: id(domain.PrefixFulfilment),
		FB1: id(domain.PrefixFulfilment), FB2: id(domain.PrefixFulfilment),
	}
}

// record appends the world's history, as checkout, the provider's webhook
// and fulfilment would have recorded it:
//
//   - A1: organisation A's monthly order of two cloud phones (9900 usd
//     each), paid with subscription SubA1: one phone provisioned, one
//     awaiting provisioning.
//   - A2: A's day pass (400 usd), paid with PiA2, provisioned.
//   - B1: organisation B's monthly emulator (2900 usd), paid with SubB1,
//     which the provider then ended: the order ended, its phone cancelled.
//   - B2: B's day pass, paid with PiB2, then refunded by the provider: the
//     order ended, its phone cancelled.
//   - B3: B's day pass whose payment page expired unpaid.
func (w reconcileWorld) record(t *testing.T, ctx context.Context, store *eventstore.Store) {
	t.Helper()
	at := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	appendTo := func(stream, org string, evs ...domain.Event) {
		t.Helper()
		nes, err := eventstore.Encode(domain.Events, org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.AnyVersion, nes...); err != nil {
			t.Fatal(err)
		}
	}
	by := domain.Actor{Kind: "user", ID: "user_admin"}
	order := func(org, orderID string, fulfilments []string, c domain.PurchaseChoice, amount int64, customer string) []domain.Event {
		return []domain.Event{
			domain.CheckoutStarted{OrgID: org, OrderID: orderID, FulfilmentIDs: fulfilments, Choice: c, Currency: "usd",
				UnitAmount: amount, QuoteID: domain.QuoteID("usd", c.Sku, c.Billing, c.Model, amount), RequestDigest: "digest",
				By: by, At: at},
			domain.CheckoutOpened{OrderID: orderID, SessionID: "cs_" + orderID, CheckoutURL: "https://pay.test/" + orderID,
				ExpiresAt: at.Add(time.Hour), CustomerID: customer, At: at},
		}
	}
	created := func(f, org, orderID string, c domain.PurchaseChoice, amount int64, sub, pi string) domain.Event {
		return domain.FulfilmentCreated{FulfilmentID: f, OrgID: org, OrderID: orderID, Choice: c, Currency: "usd",
			UnitAmount: amount, SubscriptionID: sub, PaymentIntentID: pi, At: at}
	}
	cloud := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US", Quantity: 2}
	dayPass := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}
	monthly := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}

	// Organisation A.
	appendTo(domain.AccountStream(w.OrgA), w.OrgA, domain.BillingCustomerRecorded{OrgID: w.OrgA, CustomerID: w.CusA, At: at})
	appendTo(domain.AccountStream(w.OrgA), w.OrgA, order(w.OrgA, w.OrderA1, []string{w.FA1a, w.FA1b}, cloud, 9900, w.CusA)...)
	appendTo(domain.AccountStream(w.OrgA), w.OrgA, domain.OrderPaid{OrderID: w.OrderA1, ProviderEventID: "evt_a1",
		CustomerID: w.CusA, SubscriptionID: w.SubA1, PaidAt: at})
	appendTo(domain.FulfilmentStream(w.FA1a), w.OrgA, created(w.FA1a, w.OrgA, w.OrderA1, cloud, 9900, w.SubA1, ""),
		domain.FulfilmentProvisioned{FulfilmentID: w.FA1a, DeviceID: "dev_a1a", At: at})
	appendTo(domain.FulfilmentStream(w.FA1b), w.OrgA, created(w.FA1b, w.OrgA, w.OrderA1, cloud, 9900, w.SubA1, ""),
		domain.FulfilmentAwaitingProvisioning{FulfilmentID: w.FA1b, EstimatedBy: at.Add(24 * time.Hour), At: at})
	appendTo(domain.AccountStream(w.OrgA), w.OrgA, order(w.OrgA, w.OrderA2, []string{w.FA2}, dayPass, 400, w.CusA)...)
	appendTo(domain.AccountStream(w.OrgA), w.OrgA, domain.OrderPaid{OrderID: w.OrderA2, ProviderEventID: "evt_a2",
		CustomerID: w.CusA, PaymentIntentID: w.PiA2, PaidAt: at})
	appendTo(domain.FulfilmentStream(w.FA2), w.OrgA, created(w.FA2, w.OrgA, w.OrderA2, dayPass, 400, "", w.PiA2),
		domain.FulfilmentProvisioned{FulfilmentID: w.FA2, DeviceID: "dev_a2", At: at})

	// Organisation B.
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, order(w.OrgB, w.OrderB1, []string{w.FB1}, monthly, 2900, w.CusB)...)
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, domain.OrderPaid{OrderID: w.OrderB1, ProviderEventID: "evt_b1",
		CustomerID: w.CusB, SubscriptionID: w.SubB1, PaidAt: at})
	appendTo(domain.FulfilmentStream(w.FB1), w.OrgB, created(w.FB1, w.OrgB, w.OrderB1, monthly, 2900, w.SubB1, ""),
		domain.FulfilmentProvisioned{FulfilmentID: w.FB1, DeviceID: "dev_b1", At: at})
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, domain.OrderEnded{OrderID: w.OrderB1, Reason: domain.EndSubscriptionEnded,
		ProviderEventID: "evt_b1_end", At: at.Add(24 * time.Hour)})
	appendTo(domain.FulfilmentStream(w.FB1), w.OrgB, domain.FulfilmentCancelled{FulfilmentID: w.FB1, Reason: domain.EndSubscriptionEnded,
		Notify: true, DeviceID: "dev_b1", ProviderEventID: "evt_b1_end", At: at.Add(24 * time.Hour)})
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, order(w.OrgB, w.OrderB2, []string{w.FB2}, dayPass, 400, w.CusB)...)
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, domain.OrderPaid{OrderID: w.OrderB2, ProviderEventID: "evt_b2",
		CustomerID: w.CusB, PaymentIntentID: w.PiB2, PaidAt: at})
	appendTo(domain.FulfilmentStream(w.FB2), w.OrgB, created(w.FB2, w.OrgB, w.OrderB2, dayPass, 400, "", w.PiB2),
		domain.FulfilmentProvisioned{FulfilmentID: w.FB2, DeviceID: "dev_b2", At: at})
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, domain.OrderEnded{OrderID: w.OrderB2, Reason: domain.EndRefunded,
		ProviderEventID: "evt_b2_refund", At: at.Add(time.Hour)})
	appendTo(domain.FulfilmentStream(w.FB2), w.OrgB, domain.FulfilmentCancelled{FulfilmentID: w.FB2, Reason: domain.EndRefunded,
		Notify: true, DeviceID: "dev_b2", ProviderEventID: "evt_b2_refund", At: at.Add(time.Hour)})
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, order(w.OrgB, w.OrderB3, []string{domain.NewID(domain.PrefixFulfilment)}, dayPass, 400, w.CusB)...)
	appendTo(domain.AccountStream(w.OrgB), w.OrgB, domain.CheckoutExpired{OrderID: w.OrderB3, Reason: domain.CheckoutTimedOut, At: at.Add(time.Hour)})
}

// reconcileEnv is a database of its own (reconciliation reads every
// billing account there is) holding the world, the fulfilments read model
// running, and the provisioning capability whose provider is the real
// stripe-mock with the three list calls answered from testdata/reconcile/
// <answers>.
type reconcileEnv struct {
	p *provisioning.Provisioning
	w reconcileWorld
}

func newReconcileEnv(t *testing.T, answers string) reconcileEnv {
	t.Helper()
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	w := newReconcileWorld()
	// Recorded before the read model runs: reconciliation reads the event
	// log itself, never the read model, so it need not catch up.
	w.record(t, ctx, store)
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), []projections.Projection{projections.Fulfilments{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { runner.Run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	base := testutil.StripeRecordedLists(t, testutil.StripeMock(t), "testdata/reconcile/"+answers, w)
	p := provisioning.New(provisioning.Config{Store: store,
		Payments:   payments.New(payments.Config{SecretKey: "sk_test_reconcile", APIBase: base, MaxNetworkRetries: -1}),
		ReadModels: runner})
	return reconcileEnv{p: p, w: w}
}

func TestReconcileConsistentRecordsShowNoDifference(t *testing.T) {
	e := newReconcileEnv(t, "consistent")
	rep, err := (provisioning.ReconcileHandler{Provisioning: e.p}).Handle(testutil.Context(t), provisioning.Reconcile{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Differences {
		t.Errorf("difference in a consistent set: %s", d)
	}
	if !rep.Clean() {
		t.Fatalf("got %d differences; want none", len(rep.Differences))
	}
	// Everything was read and compared: two accounts, five orders, five
	// fulfilments (the read model caught up); three subscriptions, five
	// payments, two refunds from the provider, of which the first invoice
	// of A's subscription is A's without an order, and one subscription
	// and one payment are another deployment's.
	want := provisioning.ReconcileReport{Accounts: 2, Orders: 5, Fulfilments: 5, Subscriptions: 3, Payments: 5, Refunds: 2,
		InvoicePayments: 1, NotOurs: 2}
	rep.ProviderReadAt, rep.Differences = time.Time{}, nil
	if rep.Accounts != want.Accounts || rep.Orders != want.Orders || rep.Fulfilments != want.Fulfilments ||
		rep.Subscriptions != want.Subscriptions || rep.Payments != want.Payments || rep.Refunds != want.Refunds ||
		rep.InvoicePayments != want.InvoicePayments || rep.NotOurs != want.NotOurs {
		t.Errorf("got counts %+v; want %+v", rep, want)
	}
}

func TestReconcileFindsEveryPlantedDifference(t *testing.T) {
	e := newReconcileEnv(t, "planted")
	w := e.w
	rep, err := (provisioning.ReconcileHandler{Provisioning: e.p}).Handle(testutil.Context(t), provisioning.Reconcile{})
	if err != nil {
		t.Fatal(err)
	}
	type found struct{ kind, org, order, fulfilments, provider string }
	var got []found
	for _, d := range rep.Differences {
		got = append(got, found{d.Kind, d.OrgID, d.OrderID, strings.Join(d.FulfilmentIDs, ","), strings.Join(d.ProviderIDs, ",")})
	}
	want := []found{
		// The provider ended A1's subscription; both its phones are live.
		{provisioning.ReconcileSubscriptionEnded, w.OrgA, w.OrderA1, strings.Join(slices.Sorted(slices.Values([]string{w.FA1a, w.FA1b})), ","), w.SubA1},
		// A2's payment is 500, the order 400; and 400 of it was refunded
		// while its phone is live.
		{provisioning.ReconcileAmountMismatch, w.OrgA, w.OrderA2, "", w.PiA2},
		{provisioning.ReconcileRefundedButLive, w.OrgA, w.OrderA2, w.FA2, w.PiA2 + ",re_a2"},
		// That refund of A2's charge was never recorded here, and the
		// provider lost a dispute of its payment our records do not show.
		{provisioning.ReconcileRefundAmountMismatch, w.OrgA, w.OrderA2, "", "ch_a2,re_a2"},
		{provisioning.ReconcileDisputeNotRecorded, w.OrgA, w.OrderA2, "", "dp_a2,ch_a2," + w.PiA2},
		// A subscription for A's customer that no order records.
		{provisioning.ReconcileSubscriptionUnmatched, w.OrgA, "", "", "sub_made_by_hand_a"},
		// B1 ended here, but the provider still renews its subscription.
		{provisioning.ReconcileSubscriptionUnfulfilled, w.OrgB, w.OrderB1, "", w.SubB1},
		// B2's phone was cancelled as refunded; the provider shows no refund.
		{provisioning.ReconcileRefundMissing, w.OrgB, w.OrderB2, w.FB2, w.PiB2},
		{provisioning.ReconcileRefundAmountMismatch, w.OrgB, w.OrderB2, "", "ch_b2"},
		// B3 expired here, but the provider took its payment.
		{provisioning.ReconcilePaidNotRecorded, w.OrgB, w.OrderB3, "", "pi_paid_b3"},
		// A succeeded payment naming an order B never made.
		{provisioning.ReconcilePaymentUnmatched, w.OrgB, "ord_never_made", "", "pi_no_such_order_b"},
	}
	for _, f := range want {
		if !slices.Contains(got, f) {
			t.Errorf("missing difference %+v", f)
		}
	}
	for i, f := range got {
		if !slices.Contains(want, f) {
			t.Errorf("unexpected difference %s", rep.Differences[i])
		}
	}
	if rep.Clean() {
		t.Error("got a clean report; want differences")
	}
}

// TestReconcileWithoutProviderFails: with no payment provider there is
// nothing to reconcile against, which is an error, not a clean report.
func TestReconcileWithoutProviderFails(t *testing.T) {
	store := eventstore.New(testutil.Pool(t), eventstore.WithUpcaster(domain.Events))
	p := provisioning.New(provisioning.Config{Store: store})
	if _, err := (provisioning.ReconcileHandler{Provisioning: p}).Handle(testutil.Context(t), provisioning.Reconcile{}); err == nil || !strings.Contains(err.Error(), "no payment provider") {
		t.Fatalf("got %v; want an error naming the missing payment provider", err)
	}
}

// TestReconcileProviderDownFails: a provider that does not answer is an
// error (payments.ErrUnavailable), never a report.
func TestReconcileProviderDownFails(t *testing.T) {
	store := eventstore.New(testutil.Pool(t), eventstore.WithUpcaster(domain.Events))
	p := provisioning.New(provisioning.Config{Store: store,
		Payments: payments.New(payments.Config{SecretKey: "sk_test_down", APIBase: billingClosedURL(t), MaxNetworkRetries: -1})})
	_, err := (provisioning.ReconcileHandler{Provisioning: p}).Handle(testutil.Context(t), provisioning.Reconcile{})
	if err == nil || !errors.Is(err, payments.ErrUnavailable) {
		t.Fatalf("got %v; want payments.ErrUnavailable", err)
	}
}
