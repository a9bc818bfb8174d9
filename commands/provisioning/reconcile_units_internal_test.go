package provisioning

import (
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// TestReconcileQuantityIsThePhonesStillRenewing: once a phone of a
// two-phone subscription ended, the subscription must bill one (issue 26
// item 1 sets it so); billing the order's two is a difference.
func TestReconcileQuantityIsThePhonesStillRenewing(t *testing.T) {
	c := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Model: "pixel-8", Billing: domain.BillingSubscription, Quantity: 2}
	o := domain.Order{CheckoutStarted: domain.CheckoutStarted{OrgID: "org_1", OrderID: "ord_pair", FulfilmentIDs: []string{"ful_a", "ful_b"},
		Choice: c, Currency: "usd", UnitAmount: 9900}, State: domain.OrderPaidState, SubscriptionID: "sub_pair"}
	fuls := []projections.FulfilmentView{
		{FulfilmentID: "ful_a", OrgID: "org_1", OrderID: "ord_pair", State: domain.FulfilmentCancelledState,
			CancelledReason: domain.EndCustomerCancel, Billing: c.Billing, Currency: "usd", UnitAmount: 9900},
		{FulfilmentID: "ful_b", OrgID: "org_1", OrderID: "ord_pair", State: domain.FulfilmentProvisionedState,
			Billing: c.Billing, Currency: "usd", UnitAmount: 9900},
	}
	for _, tc := range []struct {
		quantity int64
		want     int
	}{{1, 0}, {2, 1}} {
		subs := []payments.Subscription{{ID: "sub_pair", Status: "active", Items: []payments.SubscriptionItem{
			{ID: "si_pair", Quantity: tc.quantity, UnitAmount: 9900, Currency: "usd"}}}}
		rep := reconcile(reconcileInput{subs: subs, accounts: []domain.Account{{OrgID: "org_1", Orders: []domain.Order{o}}},
			fulfilments: fuls})
		if len(rep.Differences) != tc.want || tc.want == 1 && rep.Differences[0].Kind != ReconcileSubscriptionAmountMismatch {
			t.Errorf("subscription billing %d for one renewing phone: %+v; want %d differences", tc.quantity, rep.Differences, tc.want)
		}
	}
}
