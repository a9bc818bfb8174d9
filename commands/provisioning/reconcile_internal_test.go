package provisioning

import (
	"slices"
	"testing"

	"phonefleet/domain"
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
