package domain

import (
	"testing"
	"time"
)

func TestAccountFoldsItsOrders(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	var a Account
	events := []Event{
		CheckoutStarted{OrgID: "org_a", OrderID: "ord_1", Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingPayg, Quantity: 1}, At: at},
		CheckoutOpened{OrderID: "ord_1", SessionID: "cs_1", CheckoutURL: "https://pay/1", ExpiresAt: at.Add(time.Hour), CustomerID: "cus_1", At: at},
		CheckoutStarted{OrgID: "org_a", OrderID: "ord_2", Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay, Quantity: 1}, At: at},
		CheckoutFailed{OrderID: "ord_2", Code: CodeCheckoutUnavailable, At: at},
		OrderPaid{OrderID: "ord_1", ProviderEventID: "evt_1", PaidAt: at},
	}
	for i, e := range events {
		a.Apply(e, int64(i+1))
	}
	if a.OrgID != "org_a" || a.CustomerID != "cus_1" || a.Version != 5 || len(a.Orders) != 2 {
		t.Fatalf("account: %+v", a)
	}
	if o, _ := a.Order("ord_2"); o.State != OrderFailed || o.FailedCode != CodeCheckoutUnavailable {
		t.Errorf("ord_2: %+v", o)
	}
	if !a.PaygActive() {
		t.Error("a paid payg order gives pay-as-you-go access")
	}
	a.Apply(OrderEnded{OrderID: "ord_1", Reason: EndSubscriptionEnded, At: at}, 6)
	if a.PaygActive() {
		t.Error("an ended payg order gives no access")
	}
	// An expired page that is then paid (the provider completed it just
	// before it expired) is pending, then paid: a payment is never lost.
	a.Apply(CheckoutStarted{OrgID: "org_a", OrderID: "ord_3", Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay, Quantity: 1}}, 7)
	a.Apply(CheckoutOpened{OrderID: "ord_3", SessionID: "cs_3"}, 8)
	a.Apply(CheckoutExpired{OrderID: "ord_3", Reason: CheckoutTimedOut}, 9)
	a.Apply(OrderPaymentPending{OrderID: "ord_3"}, 10)
	if o, _ := a.Order("ord_3"); o.State != OrderPendingState {
		t.Errorf("ord_3 after a late completion: %s", o.State)
	}
}

func TestFulfilmentStates(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	var f Fulfilment
	f.Apply(FulfilmentCreated{FulfilmentID: "ful_1", OrgID: "org_a", OrderID: "ord_1"}, 1)
	f.Apply(FulfilmentAwaitingProvisioning{FulfilmentID: "ful_1", EstimatedBy: at.Add(24 * time.Hour), At: at}, 2)
	if !f.Exists() || f.State != FulfilmentAwaitingState || f.DeviceID != "" {
		t.Fatalf("awaiting: %+v", f)
	}
	f.Apply(FulfilmentProvisioned{FulfilmentID: "ful_1", DeviceID: "dev_1", At: at.Add(time.Hour)}, 3)
	if f.State != FulfilmentProvisionedState || f.DeviceID != "dev_1" || !f.EstimatedBy.IsZero() || !f.ProvisionedAt.Equal(at.Add(time.Hour)) {
		t.Fatalf("provisioned: %+v", f)
	}
	f.Apply(FulfilmentCancelled{FulfilmentID: "ful_1", Reason: EndCustomerReturn, Notify: true, DeviceID: "dev_1", At: at}, 4)
	if f.State != FulfilmentCancelledState || f.DeviceID != "" {
		t.Errorf("a cancelled fulfilment has no device (spec 3.1): %+v", f)
	}
}

func TestNotifiedEndsAreSpec32s(t *testing.T) {
	for reason, want := range map[string]bool{
		EndSubscriptionEnded: true, EndRefunded: true, EndDisputed: true, EndCustomerCancel: true, EndCustomerReturn: true,
		EndOwnerRefund: false, EndUndelivered: false, EndDayPassExpired: false, EndCloudUndelivered: false,
	} {
		if NotifiedEnd(reason) != want {
			t.Errorf("%s: notified %v, want %v", reason, !want, want)
		}
	}
}
