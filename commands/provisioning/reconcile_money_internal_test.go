package provisioning

import (
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// TestReconcileRefundsPeriodsDisputes plants each difference of refunds
// per charge, periods and disputes (and the agreeing case of each, which
// is no difference): every difference names the provider's objects and
// our order.
func TestReconcileRefundsPeriodsDisputes(t *testing.T) {
	paidAt := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	monthly := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}
	day := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 2}
	order := func(id string, c domain.PurchaseChoice, sub, pi string) domain.Order {
		return domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: id, FulfilmentIDs: []string{"ful_" + id},
			Choice: c, Currency: "usd", UnitAmount: 400}, State: domain.OrderPaidState, SubscriptionID: sub, PaymentIntentID: pi}
	}
	ended := func(o domain.Order, reason string) domain.Order {
		o.State, o.EndedReason = domain.OrderEndedState, reason
		return o
	}
	view := func(o domain.Order, state string) projections.FulfilmentView {
		return projections.FulfilmentView{FulfilmentID: "ful_" + o.OrderID, OrgID: "org_1", OrderID: o.OrderID, State: state,
			Billing: o.Choice.Billing, Currency: "usd", UnitAmount: 400}
	}
	pay := func(o domain.Order) payments.Payment {
		return payments.Payment{ID: o.PaymentIntentID, Status: "succeeded", Amount: 800, AmountReceived: 800, Currency: "usd",
			ChargeID: "ch_" + o.OrderID}
	}
	refund := func(id string, o domain.Order, amount int64) payments.Refund {
		return payments.Refund{ID: id, PaymentID: o.PaymentIntentID, ChargeID: "ch_" + o.OrderID, Amount: amount, Currency: "usd",
			Status: "succeeded"}
	}
	partial := func(o domain.Order, amount int64) domain.ChargeRefunded {
		return domain.ChargeRefunded{OrgID: "org_1", OrderID: o.OrderID, ChargeID: "ch_" + o.OrderID, PaymentIntentID: o.PaymentIntentID,
			Amount: 800, AmountRefunded: amount, Currency: "usd"}
	}
	sub := func(o domain.Order, start, end time.Time) payments.Subscription {
		return payments.Subscription{ID: o.SubscriptionID, Status: "active", CurrentPeriodStart: start, CurrentPeriodEnd: end,
			Items: []payments.SubscriptionItem{{ID: "si_" + o.OrderID, Quantity: 1, UnitAmount: 400, Currency: "usd"}}}
	}
	folded := func(o domain.Order, cancelledEnd time.Time) map[string]domain.Fulfilment {
		f := domain.Fulfilment{FulfilmentCreated: domain.FulfilmentCreated{FulfilmentID: "ful_" + o.OrderID, OrgID: "org_1",
			OrderID: o.OrderID, Choice: o.Choice, At: paidAt}, State: domain.FulfilmentProvisionedState}
		if !cancelledEnd.IsZero() {
			f.RenewalCancelled, f.EndsAt = true, cancelledEnd
		}
		return map[string]domain.Fulfilment{f.FulfilmentID: f}
	}
	feb1, mar1 := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	partOrder := order("ord_part", day, "", "pi_part")
	fullOrder := ended(order("ord_full", day, "", "pi_full"), domain.EndRefunded)
	subOrder := order("ord_sub", monthly, "sub_sub", "")
	dispOrder := order("ord_disp", day, "", "pi_disp")
	disputedOrder := ended(dispOrder, domain.EndDisputed)
	for _, tc := range []struct {
		name  string
		order domain.Order
		in    reconcileInput
		want  string // kind order provider
	}{
		{"partial_refund_not_recorded", partOrder, reconcileInput{pays: []payments.Payment{pay(partOrder)},
			refunds: []payments.Refund{refund("re_p1", partOrder, 400)}},
			ReconcileRefundAmountMismatch + " ord_part ch_ord_part,re_p1"},
		{"partial_refunds_short_of_record", partOrder, reconcileInput{pays: []payments.Payment{pay(partOrder)},
			refunds:       []payments.Refund{refund("re_p1", partOrder, 100)},
			chargeRefunds: []domain.ChargeRefunded{partial(partOrder, 100), partial(partOrder, 300)}},
			ReconcileRefundAmountMismatch + " ord_part ch_ord_part,re_p1"},
		{"partial_refunds_as_recorded", partOrder, reconcileInput{pays: []payments.Payment{pay(partOrder)},
			refunds:       []payments.Refund{refund("re_p1", partOrder, 100), refund("re_p2", partOrder, 200)},
			chargeRefunds: []domain.ChargeRefunded{partial(partOrder, 300), partial(partOrder, 100)}}, ""},
		{"full_refund_of_part", fullOrder, reconcileInput{pays: []payments.Payment{pay(fullOrder)},
			refunds: []payments.Refund{refund("re_f1", fullOrder, 300)}},
			ReconcileRefundAmountMismatch + " ord_full ch_ord_full,re_f1"},
		{"full_refund_as_recorded", fullOrder, reconcileInput{pays: []payments.Payment{pay(fullOrder)},
			refunds: []payments.Refund{refund("re_f1", fullOrder, 800)}}, ""},
		{"period_a_month_off", subOrder, reconcileInput{subs: []payments.Subscription{sub(subOrder, feb1, mar1)}, folded: folded(subOrder, time.Time{})},
			ReconcilePeriodMismatch + " ord_sub sub_sub"},
		{"period_cancelled_end_off", subOrder, reconcileInput{subs: []payments.Subscription{sub(subOrder, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), feb1)},
			folded: folded(subOrder, mar1)},
			ReconcilePeriodMismatch + " ord_sub sub_sub"},
		{"period_as_recorded", subOrder, reconcileInput{subs: []payments.Subscription{sub(subOrder, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), feb1)},
			folded: folded(subOrder, time.Time{})}, ""},
		{"dispute_not_recorded", dispOrder, reconcileInput{pays: []payments.Payment{pay(dispOrder)},
			disputes: []payments.Dispute{{ID: "dp_1", ChargeID: "ch_ord_disp", PaymentIntentID: "pi_disp", Amount: 800, Currency: "usd", Status: "lost"}}},
			ReconcileDisputeNotRecorded + " ord_disp dp_1,ch_ord_disp,pi_disp"},
		{"dispute_missing", disputedOrder, reconcileInput{pays: []payments.Payment{pay(dispOrder)}},
			ReconcileDisputeMissing + " ord_disp pi_disp"},
		{"dispute_won_as_recorded", disputedOrder, reconcileInput{pays: []payments.Payment{pay(dispOrder)},
			disputes: []payments.Dispute{{ID: "dp_1", ChargeID: "ch_ord_disp", PaymentIntentID: "pi_disp", Amount: 800, Currency: "usd", Status: "won"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.order
			state := domain.FulfilmentProvisionedState
			if o.State == domain.OrderEndedState {
				state = domain.FulfilmentCancelledState
			}
			tc.in.accounts = []domain.Account{{OrgID: "org_1", Orders: []domain.Order{o}}}
			v := view(o, state)
			if state == domain.FulfilmentCancelledState {
				v.CancelledReason = o.EndedReason
			}
			tc.in.fulfilments = []projections.FulfilmentView{v}
			rep := reconcile(tc.in)
			var got []string
			for _, d := range rep.Differences {
				if d.Kind != ReconcileRefundAmountMismatch && d.Kind != ReconcilePeriodMismatch &&
					d.Kind != ReconcileDisputeNotRecorded && d.Kind != ReconcileDisputeMissing {
					continue // the order's other differences, tested elsewhere
				}
				got = append(got, d.Kind+" "+d.OrderID+" "+strings.Join(d.ProviderIDs, ","))
				if d.OrgID != "org_1" || d.Detail == "" {
					t.Errorf("difference %+v lacks our organisation or a detail", d)
				}
			}
			if tc.want == "" && len(got) != 0 || tc.want != "" && !slices.Equal(got, []string{tc.want}) {
				t.Errorf("got %q; want [%q]", got, tc.want)
			}
		})
	}
}

// TestReconcilePartialRefundOfLivePhone (issue 26, found by the payments
// walk): a partial refund the provider made of a live day pass's payment
// (its dashboard) does not end the phone, and our records show it
// (payment.charge_refunded): it is not refunded_but_live. A refund our
// records do not show, or a full refund while the phone is live, still is.
func TestReconcilePartialRefundOfLivePhone(t *testing.T) {
	o := domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: "ord_day", FulfilmentIDs: []string{"ful_day"},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400},
		State: domain.OrderPaidState, PaymentIntentID: "pi_day"}
	in := func(refunded int64, recorded ...int64) reconcileInput {
		r := reconcileInput{accounts: []domain.Account{{OrgID: "org_1", Orders: []domain.Order{o}}},
			fulfilments: []projections.FulfilmentView{{FulfilmentID: "ful_day", OrgID: "org_1", OrderID: "ord_day",
				State: domain.FulfilmentProvisionedState, Billing: domain.BillingDay, Currency: "usd", UnitAmount: 400}},
			pays: []payments.Payment{{ID: "pi_day", Status: "succeeded", Amount: 400, AmountReceived: 400, Currency: "usd",
				ChargeID: "ch_day"}},
			refunds: []payments.Refund{{ID: "re_day", PaymentID: "pi_day", ChargeID: "ch_day", Amount: refunded, Currency: "usd",
				Status: "succeeded"}}}
		for _, n := range recorded {
			r.chargeRefunds = append(r.chargeRefunds, domain.ChargeRefunded{OrgID: "org_1", OrderID: "ord_day", ChargeID: "ch_day",
				PaymentIntentID: "pi_day", Amount: 400, AmountRefunded: n, Currency: "usd", Full: n >= 400})
		}
		return r
	}
	kinds := func(rep ReconcileReport) []string {
		var out []string
		for _, d := range rep.Differences {
			out = append(out, d.Kind)
		}
		return out
	}
	if got := kinds(reconcile(in(100, 100))); len(got) != 0 {
		t.Errorf("a partial refund recorded, the phone live: %v; want no difference", got)
	}
	if got := kinds(reconcile(in(100))); !slices.Contains(got, ReconcileRefundedButLive) {
		t.Errorf("a partial refund not recorded, the phone live: %v; want %s", got, ReconcileRefundedButLive)
	}
	if got := kinds(reconcile(in(400, 400))); !slices.Contains(got, ReconcileRefundedButLive) {
		t.Errorf("a full refund recorded, the phone live: %v; want %s", got, ReconcileRefundedButLive)
	}
}

// TestReconcileRenewalInvoiceCharges (issue 26, found by the payments
// walk): a dispute or a refund of a renewal invoice's charge names no
// order (the invoice's payment carries no metadata of ours); it is traced
// charge → invoice → subscription → order (chargeSubs, read from the
// provider) and compared with that order: a dispute of an order ended
// disputed, or a refund our records show for it, is no difference; a
// refund our records do not show names the order.
func TestReconcileRenewalInvoiceCharges(t *testing.T) {
	o := domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: "ord_sub", FulfilmentIDs: []string{"ful_sub"},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}, Currency: "usd",
		UnitAmount: 2900}, State: domain.OrderEndedState, EndedReason: domain.EndDisputed, SubscriptionID: "sub_1"}
	base := func() reconcileInput {
		return reconcileInput{
			accounts: []domain.Account{{OrgID: "org_1", CustomerID: "cus_1", Orders: []domain.Order{o}}},
			fulfilments: []projections.FulfilmentView{{FulfilmentID: "ful_sub", OrgID: "org_1", OrderID: "ord_sub",
				State: domain.FulfilmentCancelledState, CancelledReason: domain.EndDisputed, Billing: domain.BillingSubscription,
				Currency: "usd", UnitAmount: 2900}},
			subs: []payments.Subscription{{ID: "sub_1", Status: "canceled", CustomerID: "cus_1",
				Metadata: map[string]string{payments.MetaOrgID: "org_1", payments.MetaOrderID: "ord_sub"}}},
			// The first invoice's payment and a renewal's: the customer's,
			// no metadata.
			pays: []payments.Payment{
				{ID: "pi_first", Status: "succeeded", Amount: 2900, AmountReceived: 2900, Currency: "usd", CustomerID: "cus_1", ChargeID: "ch_first"},
				{ID: "pi_renew", Status: "succeeded", Amount: 2900, AmountReceived: 2900, Currency: "usd", CustomerID: "cus_1", ChargeID: "ch_renew"}},
			chargeSubs: map[string]string{"ch_first": "sub_1", "ch_renew": "sub_1"},
		}
	}
	differences := func(in reconcileInput) []string {
		var out []string
		for _, d := range reconcile(in).Differences {
			out = append(out, d.Kind+" "+d.OrderID)
		}
		return out
	}

	in := base()
	in.disputes = []payments.Dispute{{ID: "dp_1", ChargeID: "ch_renew", PaymentIntentID: "pi_renew", Amount: 2900, Currency: "usd",
		Status: "needs_response"}}
	if got := differences(in); len(got) != 0 {
		t.Errorf("a renewal's dispute of an order ended disputed: %v; want no difference", got)
	}

	in = base()
	in.refunds = []payments.Refund{{ID: "re_1", PaymentID: "pi_renew", ChargeID: "ch_renew", Amount: 100, Currency: "usd", Status: "succeeded"}}
	if got := differences(in); !slices.Equal(got, []string{ReconcileDisputeMissing + " ord_sub", ReconcileRefundAmountMismatch + " ord_sub"}) {
		t.Errorf("a renewal's refund not recorded, no dispute listed: %v; want the refund and the dispute named for ord_sub", got)
	}
	in.chargeRefunds = []domain.ChargeRefunded{{OrgID: "org_1", OrderID: "ord_sub", ChargeID: "ch_renew", PaymentIntentID: "pi_renew",
		Amount: 2900, AmountRefunded: 100, Currency: "usd"}}
	in.disputes = []payments.Dispute{{ID: "dp_1", ChargeID: "ch_first", PaymentIntentID: "pi_first", Amount: 2900, Currency: "usd",
		Status: "lost"}}
	if got := differences(in); len(got) != 0 {
		t.Errorf("a renewal's refund recorded, the first invoice's dispute: %v; want no difference", got)
	}
}
