package domain

import "time"

// The decisions of fulfilments (one phone bought) and of an account's
// orders as the payment provider settles them (spec 3.1, 3.2). Each method
// checks the request against the current state and returns the events to
// append; Fulfilment.Apply and Account.Apply (provisioning.go) change the
// state.

// DayPassLength is how long a day pass runs, counted from its first
// provisioning.
const DayPassLength = 24 * time.Hour

// DefaultUndeliveredAfter is how long after payment a phone still awaiting
// provisioning is given up on by the undelivered-order sweep (cancelled
// undelivered, no event).
const DefaultUndeliveredAfter = 7 * 24 * time.Hour

// EstimateMissed is the reason of a new estimate given because the
// previous one passed with no unit free.
const EstimateMissed = "estimate_missed"

// Live reports whether the fulfilment holds a unit or awaits one.
func (f *Fulfilment) Live() bool {
	return f.State == FulfilmentProvisionedState || f.State == FulfilmentAwaitingState
}

// wrongState is the 409 of an order action its state does not allow; the
// body's state names the current state (spec 3.2).
func (f *Fulfilment) wrongState(format string, args ...any) *Error {
	return Errorf(CodeWrongState, format, args...).With("state", f.State).WithRetryable(false)
}

// Create returns the events of a newly paid phone: fulfilment.created,
// then fulfilment.provisioned with deviceID when a unit was free for it
// (deviceID not empty), else fulfilment.awaiting_provisioning promised by
// estimatedBy. A fulfilment that exists already returns nothing.
func (f *Fulfilment) Create(c FulfilmentCreated, deviceID string, estimatedBy time.Time) ([]Event, error) {
	if f.Exists() {
		return nil, nil
	}
	if c.FulfilmentID == "" || c.OrgID == "" || c.OrderID == "" {
		return nil, Errorf(CodeInternal, "a fulfilment needs its id, organisation and order")
	}
	if deviceID != "" {
		return []Event{c, FulfilmentProvisioned{FulfilmentID: c.FulfilmentID, DeviceID: deviceID, At: c.At}}, nil
	}
	return []Event{c, FulfilmentAwaitingProvisioning{FulfilmentID: c.FulfilmentID, EstimatedBy: estimatedBy, At: c.At}}, nil
}

// Provision returns fulfilment.provisioned for a phone awaiting
// provisioning that now has deviceID; any other state returns nothing (it
// was provisioned or cancelled meanwhile).
func (f *Fulfilment) Provision(deviceID string, now time.Time) ([]Event, error) {
	if f.State != FulfilmentAwaitingState {
		return nil, nil
	}
	if deviceID == "" {
		return nil, Errorf(CodeInternal, "provisioning needs a device")
	}
	return []Event{FulfilmentProvisioned{FulfilmentID: f.FulfilmentID, DeviceID: deviceID, At: now}}, nil
}

// ExtendEstimate returns fulfilment.estimate_changed when a phone awaiting
// provisioning gets a later estimate; otherwise nothing.
func (f *Fulfilment) ExtendEstimate(estimatedBy time.Time, reason string, now time.Time) ([]Event, error) {
	if f.State != FulfilmentAwaitingState || !estimatedBy.After(f.EstimatedBy) {
		return nil, nil
	}
	return []Event{FulfilmentEstimateChanged{FulfilmentID: f.FulfilmentID, EstimatedBy: estimatedBy, Reason: reason, At: now}}, nil
}

// End returns fulfilment.cancelled for a live phone, with Notify as spec
// 3.2 says for reason (NotifiedEnd) and the device it had; a cancelled one
// returns nothing (the first end stands).
func (f *Fulfilment) End(reason string, by *Actor, providerEventID string, now time.Time) ([]Event, error) {
	if !f.Live() {
		return nil, nil
	}
	return []Event{FulfilmentCancelled{FulfilmentID: f.FulfilmentID, Reason: reason, Notify: NotifiedEnd(reason),
		DeviceID: f.DeviceID, ProviderEventID: providerEventID, By: by, At: now}}, nil
}

// CustomerCancel is the customer's Cancel: a live phone is cancelled
// customer_cancel (notified), except a cloud phone never delivered, which
// is cancelled cloud_undelivered (no event). A cancelled one answers
// wrong_state.
func (f *Fulfilment) CustomerCancel(by Actor, now time.Time) ([]Event, error) {
	if !f.Live() {
		return nil, f.wrongState("fulfilment %s is %s and cannot be cancelled", f.FulfilmentID, f.State)
	}
	if f.State == FulfilmentAwaitingState && f.Choice.Sku == SkuCloudPhone && f.ProvisionedAt.IsZero() {
		return f.End(EndCloudUndelivered, &by, "", now)
	}
	return f.End(EndCustomerCancel, &by, "", now)
}

// CustomerReturn is the customer's Return: only a provisioned phone can be
// returned (customer_return, notified); one never delivered, or cancelled,
// answers wrong_state naming its state.
func (f *Fulfilment) CustomerReturn(by Actor, now time.Time) ([]Event, error) {
	if f.State != FulfilmentProvisionedState {
		return nil, f.wrongState("fulfilment %s is %s: only a provisioned phone can be returned", f.FulfilmentID, f.State)
	}
	return f.End(EndCustomerReturn, &by, "", now)
}

// OwnerRefund is the deployment owner's refund: a live phone is cancelled
// owner_refund (no event); a cancelled one answers wrong_state.
func (f *Fulfilment) OwnerRefund(by Actor, now time.Time) ([]Event, error) {
	if !f.Live() {
		return nil, f.wrongState("fulfilment %s is %s and cannot be refunded", f.FulfilmentID, f.State)
	}
	return f.End(EndOwnerRefund, &by, "", now)
}

// CancelRenewal stops a subscription phone from renewing: it stays as it
// is until the end of the paid period (PeriodEnd). Only a live
// subscription phone renews; anything else answers wrong_state. A renewal
// cancelled already returns nothing.
func (f *Fulfilment) CancelRenewal(by Actor, now time.Time) ([]Event, error) {
	if !f.Live() {
		return nil, f.wrongState("fulfilment %s is %s and does not renew", f.FulfilmentID, f.State)
	}
	if f.Choice.Billing != BillingSubscription {
		return nil, f.wrongState("fulfilment %s is a %s purchase: only a subscription renews", f.FulfilmentID, f.Choice.Billing)
	}
	if f.RenewalCancelled {
		return nil, nil
	}
	return []Event{FulfilmentRenewalCancelled{FulfilmentID: f.FulfilmentID, EndsAt: f.PeriodEnd(now), By: by, At: now}}, nil
}

// PeriodEnd is the end of a subscription phone's paid period current at
// now, as the payment provider reported it (Period): its end while it is
// ahead of now. A reported end that has passed with no report of the next
// period yet (its renewal's invoice.paid is on its way, or its payment is
// being retried) steps on by months from that end. A phone with no report
// (recorded before the provider's periods were read) falls back to the
// first monthly anniversary of its payment after now.
func (f *Fulfilment) PeriodEnd(now time.Time) time.Time {
	if !f.Period.PeriodEnd.IsZero() {
		return monthlyAfter(f.Period.PeriodEnd, 0, now)
	}
	return monthlyAfter(f.At, 1, now)
}

// monthlyAfter is the first of anchor plus k months (k from least on)
// after now.
func monthlyAfter(anchor time.Time, least int, now time.Time) time.Time {
	months := least
	if anchor.Before(now) {
		months = max(least, (now.Year()-anchor.Year())*12+int(now.Month())-int(anchor.Month()))
	}
	end := anchor.AddDate(0, months, 0)
	for !end.After(now) {
		months++
		end = anchor.AddDate(0, months, 0)
	}
	return end
}

// RecordPeriod returns fulfilment.period_recorded for a live subscription
// phone when the provider reports a period other than the one recorded
// (p, FulfilmentID filled in here). A report older than the recorded one
// (p.AsOf before its AsOf: delivered late), a period that is not one (its
// end not after its start), or a phone that is not a live subscription
// returns nothing.
func (f *Fulfilment) RecordPeriod(p FulfilmentPeriodRecorded) []Event {
	if !f.Live() || f.Choice.Billing != BillingSubscription || !p.PeriodEnd.After(p.PeriodStart) || p.AsOf.Before(f.Period.AsOf) {
		return nil
	}
	if p.PeriodStart.Equal(f.Period.PeriodStart) && p.PeriodEnd.Equal(f.Period.PeriodEnd) {
		return nil
	}
	p.FulfilmentID = f.FulfilmentID
	return []Event{p}
}

// EndsAtTime is when a live phone ends by itself (zero: it does not): a
// provisioned day pass DayPassLength after its first provisioning, a
// subscription whose renewal was cancelled at EndsAt.
func (f *Fulfilment) EndsAtTime() time.Time {
	switch {
	case f.Choice.Billing == BillingDay && !f.ProvisionedAt.IsZero():
		return f.ProvisionedAt.Add(DayPassLength)
	case f.RenewalCancelled:
		return f.EndsAt
	}
	return time.Time{}
}

// RenewalStatus says whether a phone renews and when.
type RenewalStatus struct {
	// Renews is true for a live subscription phone whose renewal is not
	// cancelled.
	Renews bool
	// NextRenewalAt is the next renewal while it renews.
	NextRenewalAt time.Time
	// EndsAt is when it ends by itself (a day pass, a cancelled renewal).
	EndsAt time.Time
}

// Renewal returns the phone's renewal status at now.
func (f *Fulfilment) Renewal(now time.Time) RenewalStatus {
	if !f.Live() {
		return RenewalStatus{}
	}
	if f.Choice.Billing == BillingSubscription && !f.RenewalCancelled {
		return RenewalStatus{Renews: true, NextRenewalAt: f.PeriodEnd(now)}
	}
	return RenewalStatus{EndsAt: f.EndsAtTime()}
}

// Expire ends a provisioned phone whose time is up at now: a day pass
// (day_pass_expired, no event), a subscription whose renewal was cancelled
// (subscription_ended: the subscription ends, notified). Otherwise it
// returns nothing.
func (f *Fulfilment) Expire(now time.Time) ([]Event, error) {
	end := f.EndsAtTime()
	if f.State != FulfilmentProvisionedState || end.IsZero() || now.Before(end) {
		return nil, nil
	}
	if f.Choice.Billing == BillingDay {
		return f.End(EndDayPassExpired, nil, "", now)
	}
	return f.End(EndSubscriptionEnded, nil, "", now)
}

// GiveUp is the undelivered-order sweep: a phone still awaiting
// provisioning when after has passed since its payment is cancelled
// undelivered (no event). Otherwise it returns nothing.
func (f *Fulfilment) GiveUp(after time.Duration, now time.Time) ([]Event, error) {
	if f.State != FulfilmentAwaitingState || now.Before(f.At.Add(after)) {
		return nil, nil
	}
	return f.End(EndUndelivered, nil, "", now)
}

// notSettled is the provider webhook's 503: the event cannot apply yet and
// the provider delivers it again.
func notSettled(format string, args ...any) *Error {
	return Errorf(CodeNotSettled, format, args...).WithRetryable(true)
}

// orderToSettle returns the order a provider event names; an order the
// account does not hold (yet) is not_settled.
func (a *Account) orderToSettle(orderID string) (*Order, error) {
	o, ok := a.Order(orderID)
	if !ok {
		return nil, notSettled("order %s is not recorded yet", orderID)
	}
	return o, nil
}

// SettlePaid records a verified payment of an order (the provider's
// checkout completed and paid, or its asynchronous payment succeeded). An
// order paid or ended already returns nothing; one whose checkout is still
// being started is not_settled.
func (a *Account) SettlePaid(p OrderPaid) ([]Event, error) {
	o, err := a.orderToSettle(p.OrderID)
	if err != nil {
		return nil, err
	}
	switch o.State {
	case OrderPaidState, OrderEndedState:
		return nil, nil
	case OrderRunning:
		return nil, notSettled("the checkout of order %s is still being opened", p.OrderID)
	}
	return []Event{p}, nil
}

// SettlePending records a checkout completed whose payment is still being
// confirmed. Only an open (or lapsed) page becomes pending; a paid, ended
// or already pending order returns nothing.
func (a *Account) SettlePending(orderID, providerEventID string, now time.Time) ([]Event, error) {
	o, err := a.orderToSettle(orderID)
	if err != nil {
		return nil, err
	}
	switch o.State {
	case OrderOpen, OrderExpired:
		return []Event{OrderPaymentPending{OrderID: orderID, ProviderEventID: providerEventID, At: now}}, nil
	case OrderRunning:
		return nil, notSettled("the checkout of order %s is still being opened", orderID)
	}
	return nil, nil
}

// SettleExpired records that an order's page can no longer be paid (the
// provider expired it, or its asynchronous payment failed). Only an open or
// pending order expires; anything else returns nothing.
func (a *Account) SettleExpired(orderID string, now time.Time) ([]Event, error) {
	o, err := a.orderToSettle(orderID)
	if err != nil {
		return nil, err
	}
	switch o.State {
	case OrderOpen, OrderPendingState:
		return []Event{CheckoutExpired{OrderID: orderID, Reason: CheckoutTimedOut, At: now}}, nil
	case OrderRunning:
		return nil, notSettled("the checkout of order %s is still being opened", orderID)
	}
	return nil, nil
}

// EndOrder records the provider ending a paid order (its subscription
// ended, its payment refunded or disputed). An order not paid yet is
// not_settled (the payment's event has not arrived); an ended one returns
// nothing.
func (a *Account) EndOrder(orderID, reason, providerEventID string, now time.Time) ([]Event, error) {
	o, err := a.orderToSettle(orderID)
	if err != nil {
		return nil, err
	}
	switch o.State {
	case OrderEndedState:
		return nil, nil
	case OrderPaidState:
		return []Event{OrderEnded{OrderID: orderID, Reason: reason, ProviderEventID: providerEventID, At: now}}, nil
	}
	return nil, notSettled("order %s is %s: it can end only once its payment is recorded", orderID, o.State)
}

// FulfilmentDeviceStream is the marker stream of the device registered for
// a fulfilment: its one event (fleet.seeded, naming the device) is
// appended with the device's registration, so a fulfilment gets exactly
// one device however often its provisioning is tried.
func FulfilmentDeviceStream(fulfilmentID string) string { return "fulfilment-device-" + fulfilmentID }

// fulfilmentChanged is the data of fulfilment.changed (spec 6): exactly
// fulfilmentId, state and deviceId, for a phone provisioned (its device),
// awaiting provisioning, or cancelled in a way spec 3.2 notifies (deviceId
// null). A cancellation that sends no event (Notify false) sends nothing.
func fulfilmentChanged(e Event) (map[string]any, string, bool) {
	switch f := e.(type) {
	case FulfilmentProvisioned:
		return map[string]any{"fulfilmentId": f.FulfilmentID, "state": FulfilmentProvisionedState, "deviceId": f.DeviceID}, "", true
	case FulfilmentAwaitingProvisioning:
		return map[string]any{"fulfilmentId": f.FulfilmentID, "state": FulfilmentAwaitingState, "deviceId": nil}, "", true
	case FulfilmentCancelled:
		if !f.Notify {
			return nil, "", false
		}
		return map[string]any{"fulfilmentId": f.FulfilmentID, "state": FulfilmentCancelledState, "deviceId": nil}, "", true
	}
	return nil, "", false
}
