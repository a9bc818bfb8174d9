package provisioning_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// monthNames are the names the recorded month of provider answers
// (testdata/reconcile/month/*.json) is a template over: the organisation,
// its orders (the provider's ids are derived from them: sub_<order>,
// pi_<order>, ch_<order>_<invoice>, …) and the times (Unix seconds).
type monthNames struct {
	Org                                    string
	S1, S2, S3, S4, S5, P1, D1, D2, D3, E1 string
	T0, T1, T2                             int64
	S3End, S4Disp, S5Disp                  int64
	DayPaid, DayRefunds, S1Refund          int64
}

// monthEnv is one organisation's month, recorded by the service's own
// webhook handler and fulfilment commands, against the recorded provider
// answers of the same month.
type monthEnv struct {
	*fulEnv
	rec *testutil.StripeRecorded
	n   *monthNames
	// fuls are each order's fulfilment ids, by order id.
	fuls map[string][]string
	// reconcile runs reconciliation over a pool whose every transaction
	// is read only.
	reconcile func(t *testing.T) provisioning.ReconcileReport
}

// newMonthEnv records the month:
//
//   - S1: two Pixel 8 on one subscription (9900 usd each), paid at T0,
//     renewed at T1; one phone cancelled by the customer (the provider's
//     quantity lowered to 1), and 2000 of the renewal invoice refunded
//     from the dashboard (a partial refund of a renewal invoice).
//   - S2: a monthly emulator, renewed at T1, its renewal cancelled (the
//     provider cancels at the period's end).
//   - S3: a monthly emulator the provider ended (subscription deleted).
//   - S4: a monthly emulator whose first invoice was disputed.
//   - S5: a monthly emulator whose renewal invoice was disputed.
//   - P1: pay-as-you-go (a card saved); its metered invoice was paid.
//   - D1: a day pass partly refunded (150 of 400, a goodwill credit) and
//     still live; an inquiry about its charge closed.
//   - D2: a day pass refunded in full by the provider.
//   - D3: two Pixel 8 day passes, one refunded by the owner.
//   - E1: a day pass whose payment page expired unpaid.
//
// plus a subscription, a payment and a refund of another deployment.
func newMonthEnv(t *testing.T) *monthEnv {
	t.Helper()
	n := &monthNames{}
	rec := testutil.NewStripeRecorded(t, testutil.StripeMock(t), "testdata/reconcile/month", *n)
	provider := payments.New(payments.Config{SecretKey: "sk_test_month", APIBase: rec.URL, MaxNetworkRetries: -1})
	e := &monthEnv{fulEnv: newFulEnv(t, func(c *provisioning.Config) { c.Payments = provider }), rec: rec, n: n,
		fuls: map[string][]string{}}
	ctx := testutil.Context(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	c := e.app.Provisioning
	t0 := e.clock.Now()
	t1, t2 := t0.AddDate(0, 1, 0), t0.AddDate(0, 2, 0)
	n.Org, n.T0, n.T1, n.T2 = org, t0.Unix(), t1.Unix(), t2.Unix()

	paid := func(choice domain.PurchaseChoice, phones int) string {
		t.Helper()
		order, ids := e.openOrder(t, org, choice, phones)
		e.fuls[order] = ids
		mode, extra := "payment", map[string]any{"payment_intent": "pi_" + order}
		switch choice.Billing {
		case domain.BillingSubscription:
			mode, extra = "subscription", map[string]any{"subscription": "sub_" + order}
		case domain.BillingPayg:
			mode, extra = "setup", map[string]any{"setup_intent": "seti_" + order}
		}
		status := "paid"
		if mode == "setup" {
			status = "no_payment_required"
		}
		e.mustDeliver(t, stripeEvent(t, "evt_paid_"+order, payments.EventCheckoutCompleted, session(org, order, mode, status, extra),
			e.clock.Now()), provisioning.ProviderEventApplied)
		return order
	}
	deliver := func(id, typ string, object map[string]any) {
		t.Helper()
		rec.SetVars(*n) // the provider's answers name what the month made so far
		e.mustDeliver(t, stripeEvent(t, id, typ, object, e.clock.Now()), provisioning.ProviderEventApplied)
	}
	charge := func(id, pi, invoice string, amount, refunded int64) map[string]any {
		m := map[string]any{"id": id, "object": "charge", "payment_intent": pi, "customer": "cus_" + org, "amount": amount,
			"amount_refunded": refunded, "refunded": refunded >= amount, "currency": "usd", "status": "succeeded", "paid": true,
			"created": e.clock.Now().Unix(), "metadata": map[string]any{}}
		if invoice != "" {
			m["invoice"] = invoice
		}
		return m
	}
	dispute := func(id, chargeID, pi string, amount int64) map[string]any {
		return map[string]any{"id": id, "object": "dispute", "charge": chargeID, "payment_intent": pi, "amount": amount,
			"currency": "usd", "status": "needs_response", "reason": "fraudulent", "created": e.clock.Now().Unix(),
			"metadata": map[string]any{}}
	}
	pixel := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US"}
	pixelDay := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay, Model: "pixel-8", Region: "US"}

	// T0: the subscriptions, pay-as-you-go and a page left unpaid.
	n.S2 = paid(emulatorMonthly, 1)
	n.S1 = paid(pixel, 2)
	n.S3, n.S4, n.S5 = paid(emulatorMonthly, 1), paid(emulatorMonthly, 1), paid(emulatorMonthly, 1)
	n.P1 = paid(domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg}, 0)
	for _, o := range []string{n.S1, n.S2, n.S3, n.S4, n.S5} {
		deliver("evt_inv_1_"+o, payments.EventInvoicePaid, subscriptionInvoice(org, o, "subscription_create", t0, t1))
	}
	n.E1, _ = e.openOrder(t, org, emulatorDay, 1)
	e.clock.Advance(time.Hour)
	deliver("evt_expired_"+n.E1, payments.EventCheckoutExpired, session(org, n.E1, "payment", "unpaid", nil))

	// The provider ends S3; S4's first invoice is disputed.
	e.clock.Set(t0.Add(10 * 24 * time.Hour))
	n.S3End = e.clock.Now().Unix()
	ended := subscriptionObject(org, n.S3, t0, t1)
	ended["status"], ended["canceled_at"], ended["ended_at"] = "canceled", n.S3End, n.S3End
	deliver("evt_deleted_"+n.S3, payments.EventSubscriptionDeleted, ended)
	e.clock.Set(t0.Add(12 * 24 * time.Hour))
	n.S4Disp = e.clock.Now().Unix()
	deliver("evt_dispute_"+n.S4, payments.EventDisputeCreated, dispute("dp_first_"+n.S4, "ch_"+n.S4+"_1", "pi_"+n.S4+"_1", 2900))

	// T1: the renewals.
	e.clock.Set(t1)
	for _, o := range []string{n.S1, n.S2, n.S5} {
		deliver("evt_inv_2_"+o, payments.EventInvoicePaid, subscriptionInvoice(org, o, "subscription_cycle", t1, t2))
	}

	// A day later, the day passes and their refunds: D1 partly refunded
	// (still live), D2 refunded in full, one phone of D3 refunded by the
	// owner (the follow-up refunds its price; the provider reports it).
	e.clock.Set(t1.Add(24 * time.Hour))
	n.DayPaid = e.clock.Now().Unix()
	n.D1, n.D2, n.D3 = paid(emulatorDay, 1), paid(emulatorDay, 1), paid(pixelDay, 2)
	e.clock.Advance(time.Hour)
	n.DayRefunds = e.clock.Now().Unix()
	deliver("evt_refund_"+n.D1, payments.EventChargeRefunded, charge("ch_"+n.D1, "pi_"+n.D1, "", 400, 150))
	deliver("evt_refund_"+n.D2, payments.EventChargeRefunded, charge("ch_"+n.D2, "pi_"+n.D2, "", 400, 400))
	if _, err := c.RefundFulfilment.Handle(ctx, provisioning.RefundFulfilment{FulfilmentID: e.fuls[n.D3][1]}); err != nil {
		t.Fatal(err)
	}
	deliver("evt_refund_"+n.D3, payments.EventChargeRefunded, charge("ch_"+n.D3, "pi_"+n.D3, "", 3000, 1500))

	// S2's renewal cancelled; one of S1's phones cancelled; 2000 of S1's
	// renewal invoice refunded; S5's renewal invoice disputed.
	e.clock.Set(t1.Add(3 * 24 * time.Hour))
	if _, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: e.fuls[n.S2][0]}); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t1.Add(5 * 24 * time.Hour))
	if _, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: e.fuls[n.S1][1]}); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t1.Add(6 * 24 * time.Hour))
	n.S1Refund = e.clock.Now().Unix()
	deliver("evt_refund_"+n.S1, payments.EventChargeRefunded, charge("ch_"+n.S1+"_2", "pi_"+n.S1+"_2", "in_"+n.S1+"_2", 19800, 2000))
	e.clock.Set(t1.Add(8 * 24 * time.Hour))
	n.S5Disp = e.clock.Now().Unix()
	deliver("evt_dispute_"+n.S5, payments.EventDisputeCreated, dispute("dp_renewal_"+n.S5, "ch_"+n.S5+"_2", "pi_"+n.S5+"_2", 2900))
	e.clock.Set(t1.Add(9 * 24 * time.Hour))
	rec.SetVars(*n)

	// Reconciliation on connections whose every transaction is read only:
	// a write anywhere in it fails the run.
	cfg, err := pgxpool.ParseConfig(e.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.MaxConns = 2
	ro, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	if _, err := ro.Exec(ctx, `CREATE TEMP TABLE reconcile_may_not_write (x int)`); err == nil ||
		!strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("a write on the read-only pool: %v; want it refused", err)
	}
	rp := provisioning.New(provisioning.Config{Store: eventstore.New(ro, eventstore.WithUpcaster(domain.Events)),
		Payments: provider, Now: e.clock.Now})
	e.reconcile = func(t *testing.T) provisioning.ReconcileReport {
		t.Helper()
		rep, err := (provisioning.ReconcileHandler{Provisioning: rp}).Handle(testutil.Context(t), provisioning.Reconcile{})
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return rep
	}
	return e
}

// TestReconcileRecordedMonth: over a month with every kind of payment
// event, recorded by the service's own handlers, reconciliation (read
// only) finds nothing, and reads and counts everything.
func TestReconcileRecordedMonth(t *testing.T) {
	e := newMonthEnv(t)
	rep := e.reconcile(t)
	for _, d := range rep.Differences {
		t.Errorf("difference in the recorded month: %s", d)
	}
	// One account; ten orders; ten phones (two of S1, one each of S2–S5,
	// D1, D2, two of D3); six subscriptions, thirteen payments (eight
	// subscription invoices, three day passes, the metered invoice, one
	// elsewhere), five refunds, three disputes; nine invoice payments of
	// our customer; one subscription and one payment not ours.
	got := fmt.Sprintf("%d %d %d %d %d %d %d %d %d", rep.Accounts, rep.Orders, rep.Fulfilments, rep.Subscriptions, rep.Payments,
		rep.Refunds, rep.Disputes, rep.InvoicePayments, rep.NotOurs)
	if want := "1 10 10 6 13 5 3 9 2"; got != want {
		t.Errorf("counts (accounts orders fulfilments subscriptions payments refunds disputes invoicePayments notOurs) %s; want %s", got, want)
	}
}

// monthPlant is one planted change of the recorded month and the
// differences it must make (kind order fulfilments provider, each list
// comma separated), beside what the month showed before.
type monthPlant struct {
	kind string
	// provider edits the provider's answers; ours appends to our records
	// (it stays for the later plants).
	provider func(n *monthNames, lists map[string][]map[string]any)
	ours     func(t *testing.T, e *monthEnv)
	want     func(e *monthEnv) []string
}

// TestReconcileMonthPlanted plants one change per kind of difference in
// the recorded month and checks reconciliation reports exactly the
// differences it makes, each naming the provider's objects and our order
// and phones; every kind reconciliation declares has a plant.
func TestReconcileMonthPlanted(t *testing.T) {
	e := newMonthEnv(t)
	n := e.n
	find := func(lists map[string][]map[string]any, file, id string) map[string]any {
		for _, it := range lists[file] {
			if it["id"] == id {
				return it
			}
		}
		t.Errorf("plant: %s has no %s", file, id)
		return map[string]any{}
	}
	remove := func(lists map[string][]map[string]any, file, id string) {
		find(lists, file, id)
		lists[file] = slices.DeleteFunc(lists[file], func(it map[string]any) bool { return it["id"] == id })
	}
	diff := func(kind, order string, fulfilments []string, provider ...string) string {
		return kind + " " + order + " " + strings.Join(slices.Sorted(slices.Values(fulfilments)), ",") + " " + strings.Join(provider, ",")
	}
	live := func(order string, i int) []string { return []string{e.fuls[order][i]} }
	var noPhone []string
	const (
		sub  = "subscriptions.json"
		pays = "payment_intents.json"
		refs = "refunds.json"
		disp = "disputes.json"
	)
	plants := []monthPlant{
		{kind: provisioning.ReconcileSubscriptionMissing,
			provider: func(n *monthNames, l map[string][]map[string]any) { remove(l, sub, "sub_"+n.S1) },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionMissing, n.S1, live(n.S1, 0), "sub_"+n.S1)}
			}},
		{kind: provisioning.ReconcileSubscriptionEnded,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				s := find(l, sub, "sub_"+n.S1)
				s["status"], s["canceled_at"], s["ended_at"] = "canceled", n.S1Refund, n.S1Refund
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionEnded, n.S1, live(n.S1, 0), "sub_"+n.S1)}
			}},
		{kind: provisioning.ReconcileSubscriptionNotCurrent,
			provider: func(n *monthNames, l map[string][]map[string]any) { find(l, sub, "sub_"+n.S1)["status"] = "unpaid" },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionNotCurrent, n.S1, live(n.S1, 0), "sub_"+n.S1)}
			}},
		{kind: provisioning.ReconcileSubscriptionUnfulfilled,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				s := find(l, sub, "sub_"+n.S3)
				s["status"], s["canceled_at"], s["ended_at"] = "active", nil, nil
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionUnfulfilled, n.S3, noPhone, "sub_"+n.S3)}
			}},
		{kind: provisioning.ReconcileSubscriptionUnmatched,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				l[sub] = append(l[sub], map[string]any{"id": "sub_made_by_hand", "object": "subscription", "status": "active",
					"customer": "cus_" + n.Org, "metadata": map[string]any{}, "created": n.T1, "current_period_start": n.T1,
					"current_period_end": n.T2})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionUnmatched, "", noPhone, "sub_made_by_hand")}
			}},
		{kind: provisioning.ReconcileSubscriptionAmountMismatch,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				items := find(l, sub, "sub_"+n.S1)["items"].(map[string]any)["data"].([]any)
				items[0].(map[string]any)["quantity"] = 2 // the cancelled phone's follow-up never reached the provider
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileSubscriptionAmountMismatch, n.S1, live(n.S1, 0), "sub_"+n.S1, "si_"+n.S1)}
			}},
		{kind: provisioning.ReconcilePaymentMissing,
			provider: func(n *monthNames, l map[string][]map[string]any) { remove(l, pays, "pi_"+n.D1) },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcilePaymentMissing, n.D1, live(n.D1, 0), "pi_"+n.D1)}
			}},
		{kind: provisioning.ReconcilePaymentNotSucceeded,
			provider: func(n *monthNames, l map[string][]map[string]any) { find(l, pays, "pi_"+n.D1)["status"] = "processing" },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcilePaymentNotSucceeded, n.D1, live(n.D1, 0), "pi_"+n.D1)}
			}},
		{kind: provisioning.ReconcilePaymentUnmatched,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				l[pays] = append(l[pays], map[string]any{"id": "pi_second_" + n.D1, "object": "payment_intent", "status": "succeeded",
					"amount": 400, "amount_received": 400, "currency": "usd", "customer": "cus_" + n.Org,
					"metadata": map[string]any{"org_id": n.Org, "order_id": n.D1}, "created": n.DayPaid})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcilePaymentUnmatched, n.D1, noPhone, "pi_second_"+n.D1)}
			}},
		{kind: provisioning.ReconcilePaidNotRecorded,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				l[pays] = append(l[pays], map[string]any{"id": "pi_" + n.E1, "object": "payment_intent", "status": "succeeded",
					"amount": 400, "amount_received": 400, "currency": "usd", "customer": "cus_" + n.Org,
					"metadata": map[string]any{"org_id": n.Org, "order_id": n.E1}, "created": n.T0})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcilePaidNotRecorded, n.E1, noPhone, "pi_"+n.E1)}
			}},
		{kind: provisioning.ReconcileAmountMismatch,
			provider: func(n *monthNames, l map[string][]map[string]any) { find(l, pays, "pi_"+n.D1)["amount_received"] = 500 },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileAmountMismatch, n.D1, noPhone, "pi_"+n.D1)}
			}},
		// A refund of D1's whole rest while its phone is live, never
		// reported to us: the phone outlived its money, and our records
		// of the charge's refunds are short.
		{kind: provisioning.ReconcileRefundedButLive,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				l[refs] = append(l[refs], map[string]any{"id": "re_rest_" + n.D1, "object": "refund", "amount": 250, "currency": "usd",
					"status": "succeeded", "payment_intent": "pi_" + n.D1, "charge": "ch_" + n.D1, "metadata": map[string]any{},
					"created": n.S1Refund})
			},
			want: func(e *monthEnv) []string {
				return []string{
					diff(provisioning.ReconcileRefundedButLive, n.D1, live(n.D1, 0), "pi_"+n.D1, "re_goodwill_"+n.D1, "re_rest_"+n.D1),
					diff(provisioning.ReconcileRefundAmountMismatch, n.D1, noPhone, "ch_"+n.D1, "re_goodwill_"+n.D1, "re_rest_"+n.D1),
				}
			}},
		// The owner's refund of D3's phone, missing at the provider.
		{kind: provisioning.ReconcileRefundMissing,
			provider: func(n *monthNames, l map[string][]map[string]any) { remove(l, refs, "re_owner_"+n.D3) },
			want: func(e *monthEnv) []string {
				return []string{
					diff(provisioning.ReconcileRefundMissing, n.D3, live(n.D3, 1), "pi_"+n.D3),
					diff(provisioning.ReconcileRefundAmountMismatch, n.D3, noPhone, "ch_"+n.D3),
				}
			}},
		{kind: provisioning.ReconcileRefundAmountMismatch,
			provider: func(n *monthNames, l map[string][]map[string]any) { find(l, refs, "re_renewal_"+n.S1)["amount"] = 2500 },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileRefundAmountMismatch, n.S1, noPhone, "ch_"+n.S1+"_2", "re_renewal_"+n.S1)}
			}},
		{kind: provisioning.ReconcilePeriodMismatch,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				find(l, sub, "sub_"+n.S1)["current_period_end"] = n.T2 + 30*24*3600
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcilePeriodMismatch, n.S1, live(n.S1, 0), "sub_"+n.S1)}
			}},
		{kind: provisioning.ReconcileDisputeNotRecorded,
			provider: func(n *monthNames, l map[string][]map[string]any) {
				l[disp] = append(l[disp], map[string]any{"id": "dp_new_" + n.D1, "object": "dispute", "charge": "ch_" + n.D1,
					"payment_intent": "pi_" + n.D1, "amount": 400, "currency": "usd", "status": "needs_response",
					"reason": "fraudulent", "metadata": map[string]any{}, "created": n.S1Refund})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileDisputeNotRecorded, n.D1, noPhone, "dp_new_"+n.D1, "ch_"+n.D1, "pi_"+n.D1)}
			}},
		// The dispute of S5's renewal invoice, gone at the provider.
		{kind: provisioning.ReconcileDisputeMissing,
			provider: func(n *monthNames, l map[string][]map[string]any) { remove(l, disp, "dp_renewal_"+n.S5) },
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileDisputeMissing, n.S5, noPhone, "sub_"+n.S5)}
			}},

		// Our own records, planted in the log (each stays for the plants
		// after it).
		{kind: provisioning.ReconcileFulfilmentWithoutOrder,
			ours: func(t *testing.T, e *monthEnv) {
				f := domain.NewID(domain.PrefixFulfilment)
				e.fuls["ord_nobody"] = []string{f}
				e.record(t, domain.FulfilmentStream(f), domain.FulfilmentCreated{FulfilmentID: f, OrgID: n.Org, OrderID: "ord_nobody",
					Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd",
					UnitAmount: 400, PaymentIntentID: "pi_nobody", At: e.clock.Now()})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileFulfilmentWithoutOrder, "ord_nobody", e.fuls["ord_nobody"], "pi_nobody")}
			}},
		// A paid order (its payment at the provider) whose phone was
		// never recorded.
		{kind: provisioning.ReconcileFulfilmentsMissing,
			ours: func(t *testing.T, e *monthEnv) {
				order, ids := e.openOrder(t, n.Org, emulatorDay, 1)
				e.fuls["D4"] = append([]string{order}, ids...)
				e.appendAccount(t, n.Org, domain.OrderPaid{OrderID: order, ProviderEventID: "evt_paid_" + order,
					CustomerID: "cus_" + n.Org, PaymentIntentID: "pi_" + order, PaidAt: e.clock.Now()})
				e.rec.Plant(func(l map[string][]map[string]any) {
					l[pays] = append(l[pays], map[string]any{"id": "pi_" + order, "object": "payment_intent", "status": "succeeded",
						"amount": 400, "amount_received": 400, "currency": "usd", "customer": "cus_" + n.Org,
						"metadata": map[string]any{"org_id": n.Org, "order_id": order}, "created": n.S1Refund})
				})
			},
			want: func(e *monthEnv) []string {
				order := e.fuls["D4"][0]
				return []string{diff(provisioning.ReconcileFulfilmentsMissing, order, e.fuls["D4"][1:], "pi_"+order)}
			}},
		// S2's order ended here without its phone.
		{kind: provisioning.ReconcileLiveAfterOrderEnded,
			ours: func(t *testing.T, e *monthEnv) {
				e.appendAccount(t, n.Org, domain.OrderEnded{OrderID: n.S2, Reason: domain.EndSubscriptionEnded,
					ProviderEventID: "evt_planted_end", At: e.clock.Now()})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileLiveAfterOrderEnded, n.S2, live(n.S2, 0), "sub_"+n.S2)}
			}},
		// A phone of the expired order E1 at another price.
		{kind: provisioning.ReconcileFulfilmentPriceMismatch,
			ours: func(t *testing.T, e *monthEnv) {
				f := domain.NewID(domain.PrefixFulfilment)
				e.fuls[n.E1] = []string{f}
				e.record(t, domain.FulfilmentStream(f), domain.FulfilmentCreated{FulfilmentID: f, OrgID: n.Org, OrderID: n.E1,
					Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd",
					UnitAmount: 300, At: e.clock.Now()})
			},
			want: func(e *monthEnv) []string {
				return []string{diff(provisioning.ReconcileFulfilmentPriceMismatch, n.E1, e.fuls[n.E1], "")}
			}},
	}

	show := func(rep provisioning.ReconcileReport) []string {
		var out []string
		for _, d := range rep.Differences {
			if d.OrgID != n.Org || d.Detail == "" {
				t.Errorf("difference %s does not name our organisation or say what differs", d)
			}
			out = append(out, diff(d.Kind, d.OrderID, d.FulfilmentIDs, d.ProviderIDs...))
		}
		return out
	}
	before := show(e.reconcile(t))
	if len(before) != 0 {
		t.Fatalf("the recorded month is not clean: %q", before)
	}
	planted := map[string]bool{}
	for _, pl := range plants {
		t.Run(pl.kind, func(t *testing.T) {
			planted[pl.kind] = true
			if pl.provider != nil {
				e.rec.Plant(func(l map[string][]map[string]any) { pl.provider(n, l) })
				defer e.rec.Plant(nil)
			}
			if pl.ours != nil {
				pl.ours(t, e)
			}
			after := show(e.reconcile(t))
			var added []string
			for _, d := range after {
				if !slices.Contains(before, d) {
					added = append(added, d)
				}
			}
			want := pl.want(e)
			slices.Sort(added)
			slices.Sort(want)
			if !slices.Equal(added, want) {
				t.Errorf("planted %s: the differences it made\n%q\nwant\n%q", pl.kind, added, want)
			}
			if pl.ours != nil {
				before = after
			}
		})
	}
	for _, kind := range provisioning.ReconcileKinds {
		if !planted[kind] {
			t.Errorf("kind %s has no planted case", kind)
		}
	}
}

// record appends evs to stream, as a planted record.
func (e *monthEnv) record(t *testing.T, stream string, evs ...domain.Event) {
	t.Helper()
	news, err := eventstore.Encode(domain.Events, e.n.Org, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Append(testutil.Context(t), stream, eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileKindsAreEveryDeclaredKind: provisioning.ReconcileKinds
// (which the planted tests enumerate) lists every Reconcile* kind
// constant reconcile.go declares, once.
func TestReconcileKindsAreEveryDeclaredKind(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "reconcile.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reconcile") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, v)
			}
		}
	}
	listed := slices.Clone(provisioning.ReconcileKinds)
	slices.Sort(declared)
	slices.Sort(listed)
	if len(declared) == 0 || !slices.Equal(declared, listed) || len(slices.Compact(slices.Clone(listed))) != len(listed) {
		t.Errorf("reconcile.go declares the kinds\n%q\nReconcileKinds lists\n%q", declared, listed)
	}
}
