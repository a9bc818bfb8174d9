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
