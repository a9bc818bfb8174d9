package domain

import (
	"maps"
	"slices"
	"testing"
	"time"
)

var fulT0 = time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)

// fulfilmentIn returns a fulfilment of sku and billing in state, paid at
// fulT0 (provisioned then, when it is provisioned).
func fulfilmentIn(state, sku, billing string) Fulfilment {
	f := Fulfilment{}
	f.Apply(FulfilmentCreated{FulfilmentID: "ful_1", OrgID: "org_a", OrderID: "ord_1",
		Choice: PurchaseChoice{Sku: sku, Billing: billing, Quantity: 1}, At: fulT0}, 1)
	switch state {
	case FulfilmentProvisionedState:
		f.Apply(FulfilmentProvisioned{FulfilmentID: "ful_1", DeviceID: "dev_1", At: fulT0}, 2)
	case FulfilmentAwaitingState:
		f.Apply(FulfilmentAwaitingProvisioning{FulfilmentID: "ful_1", EstimatedBy: fulT0.Add(24 * time.Hour), At: fulT0}, 2)
	case FulfilmentCancelledState:
		f.Apply(FulfilmentProvisioned{FulfilmentID: "ful_1", DeviceID: "dev_1", At: fulT0}, 2)
		f.Apply(FulfilmentCancelled{FulfilmentID: "ful_1", Reason: EndCustomerReturn, Notify: true, At: fulT0}, 3)
	}
	return f
}

// endOf returns a check that a decision returned one fulfilment.cancelled,
// and returns it.
func endOf(t *testing.T) func(evs []Event, err error) FulfilmentCancelled {
	return func(evs []Event, err error) FulfilmentCancelled {
		t.Helper()
		if err != nil || len(evs) != 1 {
			t.Fatalf("got %v, %v; want one fulfilment.cancelled", evs, err)
		}
		c, ok := evs[0].(FulfilmentCancelled)
		if !ok {
			t.Fatalf("got %T", evs[0])
		}
		return c
	}
}

func TestCustomerCancelAndReturnRules(t *testing.T) {
	by := Actor{Kind: ActorUser, ID: "u"}
	now := fulT0.Add(time.Hour)
	cases := []struct {
		state, sku       string
		cancel, returned string // reason, or "" for wrong_state
		cancelNotified   bool
		returnedNotified bool
	}{
		{FulfilmentProvisionedState, SkuEmulator, EndCustomerCancel, EndCustomerReturn, true, true},
		{FulfilmentProvisionedState, SkuCloudPhone, EndCustomerCancel, EndCustomerReturn, true, true},
		{FulfilmentAwaitingState, SkuEmulator, EndCustomerCancel, "", true, false},
		{FulfilmentAwaitingState, SkuCloudPhone, EndCloudUndelivered, "", false, false},
		{FulfilmentCancelledState, SkuEmulator, "", "", false, false},
	}
	for _, c := range cases {
		f := fulfilmentIn(c.state, c.sku, BillingSubscription)
		evs, err := f.CustomerCancel(by, now)
		if c.cancel == "" {
			if e := AsError(err); e.Code != CodeWrongState || e.Extra["state"] != c.state {
				t.Errorf("%s %s cancel: got %v; want wrong_state %s", c.state, c.sku, err, c.state)
			}
		} else if ev := endOf(t)(evs, err); ev.Reason != c.cancel || ev.Notify != c.cancelNotified || ev.DeviceID != f.DeviceID || ev.By == nil {
			t.Errorf("%s %s cancel: %+v", c.state, c.sku, ev)
		}
		evs, err = f.CustomerReturn(by, now)
		if c.returned == "" {
			if e := AsError(err); e.Code != CodeWrongState || e.Extra["state"] != c.state {
				t.Errorf("%s %s return: got %v; want wrong_state %s", c.state, c.sku, err, c.state)
			}
		} else if ev := endOf(t)(evs, err); ev.Reason != c.returned || ev.Notify != c.returnedNotified {
			t.Errorf("%s %s return: %+v", c.state, c.sku, ev)
		}
	}
}

func TestFulfilmentEndsByThemselves(t *testing.T) {
	day := fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingDay)
	if evs, _ := day.Expire(fulT0.Add(DayPassLength - time.Microsecond)); len(evs) != 0 {
		t.Errorf("a day pass ended early: %v", evs)
	}
	if ev := endOf(t)(day.Expire(fulT0.Add(DayPassLength))); ev.Reason != EndDayPassExpired || ev.Notify {
		t.Errorf("day pass: %+v", ev)
	}
	monthly := fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingSubscription)
	if evs, _ := monthly.Expire(fulT0.AddDate(5, 0, 0)); len(evs) != 0 {
		t.Errorf("a renewing subscription ended: %v", evs)
	}
	evs, err := monthly.CancelRenewal(Actor{Kind: ActorUser, ID: "u"}, fulT0.Add(40*24*time.Hour))
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	monthly.Apply(evs[0], 3)
	if ev := endOf(t)(monthly.Expire(monthly.EndsAt)); ev.Reason != EndSubscriptionEnded || !ev.Notify {
		t.Errorf("renewal end: %+v", ev)
	}
	waiting := fulfilmentIn(FulfilmentAwaitingState, SkuEmulator, BillingSubscription)
	if evs, _ := waiting.GiveUp(DefaultUndeliveredAfter, fulT0.Add(DefaultUndeliveredAfter-time.Second)); len(evs) != 0 {
		t.Errorf("given up early: %v", evs)
	}
	if ev := endOf(t)(waiting.GiveUp(DefaultUndeliveredAfter, fulT0.Add(DefaultUndeliveredAfter))); ev.Reason != EndUndelivered || ev.Notify {
		t.Errorf("undelivered: %+v", ev)
	}
	refund := fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingSubscription)
	if ev := endOf(t)(refund.OwnerRefund(Actor{Kind: "operator", ID: "cli"}, fulT0)); ev.Reason != EndOwnerRefund || ev.Notify {
		t.Errorf("owner refund: %+v", ev)
	}
}

// TestPeriodEnd: monthly periods count from the payment; a month without
// the payment's day ends on the normalised date Go's AddDate gives.
func TestPeriodEnd(t *testing.T) {
	f := fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingSubscription)
	f.At = time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct{ now, want time.Time }{
		{f.At, time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC)},
		{time.Date(2026, 4, 15, 9, 59, 0, 0, time.UTC), time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC)},
		{time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC), time.Date(2026, 5, 15, 10, 0, 0, 0, time.UTC)},
		{time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 15, 10, 0, 0, 0, time.UTC)},
	} {
		if got := f.PeriodEnd(c.now); !got.Equal(c.want) {
			t.Errorf("at %s: period ends %s; want %s", c.now, got, c.want)
		}
	}
}

func TestCancelRenewalRules(t *testing.T) {
	by := Actor{Kind: ActorUser, ID: "u"}
	for _, c := range []struct{ state, billing, wrong string }{
		{FulfilmentProvisionedState, BillingDay, FulfilmentProvisionedState},
		{FulfilmentCancelledState, BillingSubscription, FulfilmentCancelledState},
	} {
		f := fulfilmentIn(c.state, SkuEmulator, c.billing)
		if _, err := f.CancelRenewal(by, fulT0); AsError(err).Extra["state"] != c.wrong || AsError(err).Code != CodeWrongState {
			t.Errorf("%s %s: got %v", c.state, c.billing, err)
		}
	}
	f := fulfilmentIn(FulfilmentAwaitingState, SkuEmulator, BillingSubscription)
	evs, err := f.CancelRenewal(by, fulT0)
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	f.Apply(evs[0], 3)
	if evs, err := f.CancelRenewal(by, fulT0); err != nil || len(evs) != 0 {
		t.Errorf("a second cancel-renewal: %v, %v; want nothing", evs, err)
	}
}

func TestAccountSettlement(t *testing.T) {
	now := fulT0
	newAccount := func(states ...Event) Account {
		a := Account{}
		a.Apply(CheckoutStarted{OrgID: "org_a", OrderID: "ord_1", Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay}}, 1)
		for i, e := range states {
			a.Apply(e, int64(i+2))
		}
		return a
	}
	opened := CheckoutOpened{OrderID: "ord_1", SessionID: "cs_1"}
	paid := OrderPaid{OrderID: "ord_1", ProviderEventID: "evt_1", PaidAt: now}
	code := func(err error) Code {
		if err == nil {
			return ""
		}
		return AsError(err).Code
	}
	for _, c := range []struct {
		name    string
		a       Account
		decide  func(a *Account) ([]Event, error)
		events  int
		refused Code
	}{
		{"paid while still opening", newAccount(), func(a *Account) ([]Event, error) { return a.SettlePaid(paid) }, 0, CodeNotSettled},
		{"paid when open", newAccount(opened), func(a *Account) ([]Event, error) { return a.SettlePaid(paid) }, 1, ""},
		{"paid again", newAccount(opened, paid), func(a *Account) ([]Event, error) { return a.SettlePaid(paid) }, 0, ""},
		{"an unknown order", newAccount(opened), func(a *Account) ([]Event, error) {
			return a.SettlePaid(OrderPaid{OrderID: "ord_2"})
		}, 0, CodeNotSettled},
		{"ended before paid", newAccount(opened), func(a *Account) ([]Event, error) {
			return a.EndOrder("ord_1", EndSubscriptionEnded, "evt_2", now)
		}, 0, CodeNotSettled},
		{"ended when paid", newAccount(opened, paid), func(a *Account) ([]Event, error) {
			return a.EndOrder("ord_1", EndRefunded, "evt_2", now)
		}, 1, ""},
		{"pending when open", newAccount(opened), func(a *Account) ([]Event, error) {
			return a.SettlePending("ord_1", "evt_3", now)
		}, 1, ""},
		{"pending when paid", newAccount(opened, paid), func(a *Account) ([]Event, error) {
			return a.SettlePending("ord_1", "evt_3", now)
		}, 0, ""},
		{"expired when pending", newAccount(opened, OrderPaymentPending{OrderID: "ord_1"}), func(a *Account) ([]Event, error) {
			return a.SettleExpired("ord_1", now)
		}, 1, ""},
		{"expired when paid", newAccount(opened, paid), func(a *Account) ([]Event, error) {
			return a.SettleExpired("ord_1", now)
		}, 0, ""},
	} {
		evs, err := c.decide(&c.a)
		if len(evs) != c.events || code(err) != c.refused {
			t.Errorf("%s: got %v, %v; want %d events, refusal %q", c.name, evs, err, c.events, c.refused)
		}
	}
	a := newAccount(opened, OrderPaymentPending{OrderID: "ord_1"}, CheckoutExpired{OrderID: "ord_1", Reason: CheckoutTimedOut})
	if o, _ := a.Order("ord_1"); o.State != OrderExpired {
		t.Errorf("a pending order whose payment failed is %s; want expired", o.State)
	}
}

// TestFulfilmentChangedData: exactly the spec 6 fields, deviceId null but
// for provisioned, and nothing for a cancellation that sends no event.
func TestFulfilmentChangedData(t *testing.T) {
	for _, c := range []struct {
		e      Event
		state  string
		device any
		sends  bool
	}{
		{FulfilmentProvisioned{FulfilmentID: "ful_1", DeviceID: "dev_1"}, FulfilmentProvisionedState, "dev_1", true},
		{FulfilmentAwaitingProvisioning{FulfilmentID: "ful_1"}, FulfilmentAwaitingState, nil, true},
		{FulfilmentCancelled{FulfilmentID: "ful_1", Reason: EndCustomerReturn, Notify: true, DeviceID: "dev_1"}, FulfilmentCancelledState, nil, true},
		{FulfilmentCancelled{FulfilmentID: "ful_1", Reason: EndOwnerRefund, Notify: false}, "", nil, false},
	} {
		src, ok := WebhookSourceFor(c.e.EventName())
		if !ok || src.Event != WebhookFulfilmentChanged {
			t.Fatalf("%s causes no fulfilment.changed", c.e.EventName())
		}
		data, target, sends := src.Build(c.e)
		if sends != c.sends || target != "" {
			t.Errorf("%+v: sends %v", c.e, sends)
			continue
		}
		if !sends {
			continue
		}
		if keys := slices.Sorted(maps.Keys(data)); !slices.Equal(keys, []string{"deviceId", "fulfilmentId", "state"}) {
			t.Errorf("data keys %v", keys)
		}
		if data["fulfilmentId"] != "ful_1" || data["state"] != c.state || data["deviceId"] != c.device {
			t.Errorf("%+v: data %v", c.e, data)
		}
	}
}

// TestDeviceRetire: a retired device ends its lease in the same events and
// then answers as one that never existed.
func TestDeviceRetire(t *testing.T) {
	d := Device{}
	d.Apply(DeviceRegistered{DeviceID: "dev_1", OrgID: "org_a", Name: "sim-1", Backend: BackendSim}, 1)
	d.Apply(LeaseAcquired{DeviceID: "dev_1", LeaseID: "lea_1", FencingToken: 1, AcquiredAt: fulT0, ExpiresAt: fulT0.Add(time.Minute)}, 2)
	evs := d.Retire(EndCustomerReturn, fulT0.Add(time.Second))
	if len(evs) != 2 {
		t.Fatalf("got %v", evs)
	}
	if r, ok := evs[0].(LeaseReleased); !ok || r.LeaseID != "lea_1" {
		t.Errorf("first event %+v; want the lease released", evs[0])
	}
	for i, e := range evs {
		d.Apply(e, int64(3+i))
	}
	if d.Registered() || d.Lease != nil {
		t.Errorf("retired device %+v still registered or leased", d)
	}
	if len(d.Retire(EndCustomerReturn, fulT0)) != 0 {
		t.Error("a retired device retires again")
	}
	if _, err := d.AcquireLease(fulT0.Add(time.Hour), Actor{Kind: ActorUser, ID: "u"}, "lea_2", time.Minute); AsError(err).Code != CodeDeviceUnavailable {
		t.Errorf("leasing a retired device: %v; want device_unavailable (not found)", err)
	}
}
