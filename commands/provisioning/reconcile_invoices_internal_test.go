package provisioning

import (
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// TestReconcileInvoiceChargesAndPartialRefunds: a partial refund our
// records show leaves a live order standing (no refunded_but_live); a
// refund or dispute of a subscription's invoice is the order's whose
// subscription the charge's invoice paid (chargeSubs), compared with it,
// and an order ended disputed whose subscription's charges the provider
// lists no dispute of is dispute_missing naming the subscription.
func TestReconcileInvoiceChargesAndPartialRefunds(t *testing.T) {
	monthly := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}
	day := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}
	order := func(id string, c domain.PurchaseChoice, sub, pi string) domain.Order {
		return domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: id, FulfilmentIDs: []string{"ful_" + id},
			Choice: c, Currency: "usd", UnitAmount: 400}, State: domain.OrderPaidState, SubscriptionID: sub, PaymentIntentID: pi}
	}
	ended := func(o domain.Order, reason string) domain.Order {
		o.State, o.EndedReason = domain.OrderEndedState, reason
		return o
	}
	disputed := func(o domain.Order) domain.Order { return ended(o, domain.EndDisputed) }
	view := func(o domain.Order) projections.FulfilmentView {
		v := projections.FulfilmentView{FulfilmentID: "ful_" + o.OrderID, OrgID: "org_1", OrderID: o.OrderID,
			State: domain.FulfilmentProvisionedState, Billing: o.Choice.Billing, Currency: "usd", UnitAmount: 400}
		if o.State == domain.OrderEndedState {
			v.State, v.CancelledReason = domain.FulfilmentCancelledState, o.EndedReason
		}
		return v
	}
	invoicePay := func(id, charge string) payments.Payment {
		return payments.Payment{ID: id, Status: "succeeded", Amount: 400, AmountReceived: 400, Currency: "usd",
			CustomerID: "cus_1", ChargeID: charge}
	}
	live := order("ord_day", day, "", "pi_day")
	sub := order("ord_sub", monthly, "sub_1", "")
	subs := []payments.Subscription{{ID: "sub_1", Status: "canceled", CustomerID: "cus_1"}}
	for _, tc := range []struct {
		name  string
		order domain.Order
		in    reconcileInput
		want  []string // kind order provider
	}{
		{"partial_refund_recorded_live", live, reconcileInput{
			pays:          []payments.Payment{{ID: "pi_day", Status: "succeeded", Amount: 400, AmountReceived: 400, Currency: "usd", ChargeID: "ch_day"}},
			refunds:       []payments.Refund{{ID: "re_1", PaymentID: "pi_day", ChargeID: "ch_day", Amount: 150, Currency: "usd", Status: "succeeded"}},
			chargeRefunds: []domain.ChargeRefunded{{OrgID: "org_1", OrderID: "ord_day", ChargeID: "ch_day", Amount: 400, AmountRefunded: 150, Currency: "usd"}}},
			nil},
		{"renewal_refund_recorded", sub, reconcileInput{subs: []payments.Subscription{{ID: "sub_1", Status: "active", CustomerID: "cus_1"}},
			pays:          []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			refunds:       []payments.Refund{{ID: "re_2", PaymentID: "pi_inv_2", ChargeID: "ch_inv_2", Amount: 100, Currency: "usd", Status: "succeeded"}},
			chargeRefunds: []domain.ChargeRefunded{{OrgID: "org_1", OrderID: "ord_sub", ChargeID: "ch_inv_2", Amount: 400, AmountRefunded: 100, Currency: "usd"}},
			chargeSubs:    map[string]string{"ch_inv_2": "sub_1"}},
			nil},
		{"renewal_refund_not_recorded", sub, reconcileInput{subs: []payments.Subscription{{ID: "sub_1", Status: "active", CustomerID: "cus_1"}},
			pays:       []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			refunds:    []payments.Refund{{ID: "re_2", PaymentID: "pi_inv_2", ChargeID: "ch_inv_2", Amount: 100, Currency: "usd", Status: "succeeded"}},
			chargeSubs: map[string]string{"ch_inv_2": "sub_1"}},
			[]string{ReconcileRefundAmountMismatch + " ord_sub ch_inv_2,re_2"}},
		{"renewal_dispute_recorded", disputed(sub), reconcileInput{subs: subs,
			pays:       []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			disputes:   []payments.Dispute{{ID: "dp_2", ChargeID: "ch_inv_2", PaymentIntentID: "pi_inv_2", Amount: 400, Currency: "usd", Status: "lost"}},
			chargeSubs: map[string]string{"ch_inv_2": "sub_1"}},
			nil},
		{"renewal_dispute_not_recorded", sub, reconcileInput{subs: []payments.Subscription{{ID: "sub_1", Status: "active", CustomerID: "cus_1"}},
			pays:       []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			disputes:   []payments.Dispute{{ID: "dp_2", ChargeID: "ch_inv_2", PaymentIntentID: "pi_inv_2", Amount: 400, Currency: "usd", Status: "needs_response"}},
			chargeSubs: map[string]string{"ch_inv_2": "sub_1"}},
			[]string{ReconcileDisputeNotRecorded + " ord_sub dp_2,ch_inv_2,pi_inv_2"}},
		{"renewal_refunded_in_full", ended(sub, domain.EndRefunded), reconcileInput{subs: subs,
			pays:       []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			refunds:    []payments.Refund{{ID: "re_2", PaymentID: "pi_inv_2", ChargeID: "ch_inv_2", Amount: 400, Currency: "usd", Status: "succeeded"}},
			chargeSubs: map[string]string{"ch_inv_2": "sub_1"}},
			nil},
		{"renewal_refunded_in_part_order_ended", ended(sub, domain.EndRefunded), reconcileInput{subs: subs,
			pays:       []payments.Payment{invoicePay("pi_inv_2", "ch_inv_2")},
			refunds:    []payments.Refund{{ID: "re_2", PaymentID: "pi_inv_2", ChargeID: "ch_inv_2", Amount: 300, Currency: "usd", Status: "succeeded"}},
			chargeSubs: map[string]string{"ch_inv_2": "sub_1"}},
			[]string{ReconcileRefundAmountMismatch + " ord_sub ch_inv_2,re_2"}},
		{"subscription_dispute_missing", disputed(sub), reconcileInput{subs: subs}, []string{ReconcileDisputeMissing + " ord_sub sub_1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.accounts = []domain.Account{{OrgID: "org_1", CustomerID: "cus_1", Orders: []domain.Order{tc.order}}}
			tc.in.fulfilments = []projections.FulfilmentView{view(tc.order)}
			var got []string
			for _, d := range reconcile(tc.in).Differences {
				got = append(got, d.Kind+" "+d.OrderID+" "+strings.Join(d.ProviderIDs, ","))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
}
