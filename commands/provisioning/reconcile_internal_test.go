package provisioning

import (
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// TestReconcileOwnRecords covers the differences between our own records
// (the billing accounts and the fulfilments read model), which no
// provider answer plants: a fulfilment of no order, a paid order whose
// fulfilments are missing, a live phone of an ended order, a phone priced
// unlike its order. A payg order (a card saved, nothing charged) needs no
// provider record.
func TestReconcileOwnRecords(t *testing.T) {
	paid := func(id string, c domain.PurchaseChoice, fulfilments ...string) domain.Order {
		return domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: id, FulfilmentIDs: fulfilments,
			Choice: c, Currency: "usd", UnitAmount: 400}, State: domain.OrderPaidState, PaymentIntentID: "pi_" + id}
	}
	day := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}
	ended := paid("ord_ended", day, "ful_ended")
	ended.State, ended.EndedReason = domain.OrderEndedState, domain.EndDisputed
	payg := paid("ord_payg", domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg, Quantity: 1})
	payg.PaymentIntentID = ""
	view := func(id, order, state string, amount int64) projections.FulfilmentView {
		return projections.FulfilmentView{FulfilmentID: id, OrgID: "org_1", OrderID: order, State: state, Billing: domain.BillingDay,
			Currency: "usd", UnitAmount: amount}
	}
	in := reconcileInput{
		accounts: []domain.Account{{OrgID: "org_1", Orders: []domain.Order{paid("ord_missing", day, "ful_missing"), ended, payg,
			paid("ord_priced", day, "ful_priced")}}},
		fulfilments: []projections.FulfilmentView{
			view("ful_orphan", "ord_nobody", domain.FulfilmentProvisionedState, 400),
			view("ful_ended", "ord_ended", domain.FulfilmentProvisionedState, 400),
			view("ful_priced", "ord_priced", domain.FulfilmentProvisionedState, 300),
		},
	}
	rep := reconcile(in)
	var got []string
	for _, d := range rep.Differences {
		got = append(got, d.Kind+" "+d.OrderID)
	}
	slices.Sort(got)
	// Every paid day order also lacks its payment: no provider record was
	// given.
	want := []string{
		ReconcileFulfilmentPriceMismatch + " ord_priced",
		ReconcileFulfilmentWithoutOrder + " ord_nobody",
		ReconcileFulfilmentsMissing + " ord_missing",
		ReconcileLiveAfterOrderEnded + " ord_ended",
		ReconcilePaymentMissing + " ord_missing",
		ReconcilePaymentMissing + " ord_priced",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got differences\n%v\nwant\n%v", got, want)
	}
}

// TestReconcileKindsNoOtherTestPlants plants the kinds of difference no
// other reconciliation test reached: a paid subscription order whose
// subscription the provider does not list (by the id it was paid with,
// and with none recorded), a live phone whose subscription is not being
// paid, a subscription billing another quantity or price than its order
// (and one billing what was sold, which is no difference), and a paid day
// order whose payment has not succeeded.
func TestReconcileKindsNoOtherTestPlants(t *testing.T) {
	monthly := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}
	day := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}
	order := func(id string, c domain.PurchaseChoice, sub, pi string) domain.Order {
		return domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: id, FulfilmentIDs: []string{"ful_" + id},
			Choice: c, Currency: "usd", UnitAmount: 400}, State: domain.OrderPaidState, SubscriptionID: sub, PaymentIntentID: pi}
	}
	live := func(id string, c domain.PurchaseChoice) projections.FulfilmentView {
		return projections.FulfilmentView{FulfilmentID: "ful_" + id, OrgID: "org_1", OrderID: id, State: domain.FulfilmentProvisionedState,
			Billing: c.Billing, Currency: "usd", UnitAmount: 400}
	}
	for _, tc := range []struct {
		name  string
		order domain.Order
		subs  []payments.Subscription
		pays  []payments.Payment
		want  string // kind fulfilments provider
	}{
		{"subscription_missing_by_id", order("ord_gone", monthly, "sub_gone", ""), nil, nil,
			ReconcileSubscriptionMissing + " ful_ord_gone sub_gone"},
		{"subscription_missing_none_recorded", order("ord_norec", monthly, "", ""), nil, nil,
			ReconcileSubscriptionMissing + " ful_ord_norec "},
		{"subscription_not_current", order("ord_unpaid", monthly, "sub_unpaid", ""),
			[]payments.Subscription{{ID: "sub_unpaid", Status: "unpaid", Metadata: map[string]string{payments.MetaOrderID: "ord_unpaid"}}}, nil,
			ReconcileSubscriptionNotCurrent + " ful_ord_unpaid sub_unpaid"},
		{"subscription_amount_mismatch_quantity", order("ord_qty", monthly, "sub_qty", ""),
			[]payments.Subscription{{ID: "sub_qty", Status: "active", Items: []payments.SubscriptionItem{
				{ID: "si_qty", Quantity: 2, UnitAmount: 400, Currency: "usd"}}}}, nil,
			ReconcileSubscriptionAmountMismatch + " ful_ord_qty sub_qty,si_qty"},
		{"subscription_amount_mismatch_price", order("ord_price", monthly, "sub_price", ""),
			[]payments.Subscription{{ID: "sub_price", Status: "active", Items: []payments.SubscriptionItem{
				{ID: "si_price", Quantity: 1, UnitAmount: 500, Currency: "usd"}}}}, nil,
			ReconcileSubscriptionAmountMismatch + " ful_ord_price sub_price,si_price"},
		{"subscription_as_sold", order("ord_ok", monthly, "sub_ok", ""),
			[]payments.Subscription{{ID: "sub_ok", Status: "active", Items: []payments.SubscriptionItem{
				{ID: "si_ok", Quantity: 1, UnitAmount: 400, Currency: "USD"}}}}, nil, ""},
		{"payment_not_succeeded", order("ord_pending", day, "", "pi_pending"), nil,
			[]payments.Payment{{ID: "pi_pending", Status: "requires_payment_method", Amount: 400, Currency: "usd"}},
			ReconcilePaymentNotSucceeded + " ful_ord_pending pi_pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := reconcile(reconcileInput{subs: tc.subs, pays: tc.pays,
				accounts:    []domain.Account{{OrgID: "org_1", Orders: []domain.Order{tc.order}}},
				fulfilments: []projections.FulfilmentView{live(tc.order.OrderID, tc.order.Choice)}})
			var got []string
			for _, d := range rep.Differences {
				got = append(got, d.Kind+" "+strings.Join(d.FulfilmentIDs, ",")+" "+strings.Join(d.ProviderIDs, ","))
				if d.OrgID != "org_1" || d.OrderID != tc.order.OrderID || d.Detail == "" {
					t.Errorf("difference %+v lacks our organisation, order or a detail", d)
				}
			}
			if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
				t.Errorf("got %q; want [%q]", got, tc.want)
			}
		})
	}
}
