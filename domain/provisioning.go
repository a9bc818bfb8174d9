package domain

import (
	"slices"
	"time"
)

// Account is the aggregate of an organisation's billing account
// (AccountStream): its provider customer, and every checkout attempt and
// order, in the order they were made. One stream per organisation makes
// "is another checkout open, paid, or running under this key?" one decision
// at one version, so two concurrent checkouts cannot both open a page.
// Command methods live beside the commands that use them (checkout.go);
// Apply is the only place its state changes.
type Account struct {
	OrgID      string
	CustomerID string
	// Orders are the attempts and orders, oldest first.
	Orders []Order
	// Version is the stream version of the last applied event.
	Version int64
}

// Order states. An attempt is running until its page is opened or it
// fails; an open page expires, or is paid (perhaps pending confirmation
// first); a paid order may end.
const (
	OrderRunning      = "running"
	OrderOpen         = "open"
	OrderFailed       = "failed"
	OrderExpired      = "expired"
	OrderPendingState = "payment_pending"
	OrderPaidState    = "paid"
	OrderEndedState   = "ended"
)

// Order is one checkout attempt of an Account and, once paid, the order.
type Order struct {
	CheckoutStarted
	State       string
	SessionID   string
	CheckoutURL string
	ExpiresAt   time.Time
	// FailedCode and FailedMessage are the refusal of a failed attempt;
	// FailedFinal says it is its key's answer (CheckoutFailed.Final).
	FailedCode      Code
	FailedMessage   string
	FailedFinal     bool
	SubscriptionID  string
	PaymentIntentID string
	PaidAt          time.Time
	EndedReason     string
}

// Order returns the order with id, if the account holds it.
func (a *Account) Order(id string) (*Order, bool) {
	for i := range a.Orders {
		if a.Orders[i].OrderID == id {
			return &a.Orders[i], true
		}
	}
	return nil, false
}

// Apply changes state by one recorded event at stream version version.
func (a *Account) Apply(e Event, version int64) {
	a.Version = version
	switch e := e.(type) {
	case BillingCustomerRecorded:
		a.OrgID, a.CustomerID = e.OrgID, e.CustomerID
	case CheckoutStarted:
		a.OrgID = e.OrgID
		a.Orders = append(a.Orders, Order{CheckoutStarted: e, State: OrderRunning})
	case CheckoutOpened:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.SessionID, o.CheckoutURL, o.ExpiresAt = OrderOpen, e.SessionID, e.CheckoutURL, e.ExpiresAt
			if e.CustomerID != "" {
				a.CustomerID = e.CustomerID
			}
		}
	case CheckoutFailed:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.FailedCode, o.FailedMessage, o.FailedFinal = OrderFailed, e.Code, e.Message, e.Final
		}
	case CheckoutExpired:
		if o, ok := a.Order(e.OrderID); ok && (o.State == OrderOpen || o.State == OrderPendingState) {
			o.State = OrderExpired
		}
	case OrderPaymentPending:
		if o, ok := a.Order(e.OrderID); ok && slices.Contains([]string{OrderOpen, OrderExpired}, o.State) {
			o.State = OrderPendingState
		}
	case OrderPaid:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.SubscriptionID, o.PaymentIntentID, o.PaidAt = OrderPaidState, e.SubscriptionID, e.PaymentIntentID, e.PaidAt
			if e.CustomerID != "" && a.CustomerID == "" {
				a.CustomerID = e.CustomerID
			}
		}
	case OrderEnded:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.EndedReason = OrderEndedState, e.Reason
		}
	}
}

// PaygActive reports whether the organisation has pay-as-you-go access: a
// paid payg order that has not ended.
func (a *Account) PaygActive() bool {
	for _, o := range a.Orders {
		if o.Choice.Billing == BillingPayg && o.State == OrderPaidState {
			return true
		}
	}
	return false
}

// Fulfilment is the aggregate of one phone bought (FulfilmentStream).
type Fulfilment struct {
	FulfilmentCreated
	State    string
	DeviceID string
	// EstimatedBy is the promised delivery while awaiting provisioning.
	EstimatedBy time.Time
	// ProvisionedAt is when the phone was first delivered.
	ProvisionedAt time.Time
	// RenewalCancelled and EndsAt: a subscription phone that will not
	// renew, and when it ends.
	RenewalCancelled bool
	EndsAt           time.Time
	CancelledReason  string
	CancelledAt      time.Time
	Version          int64
	// Period is the paid period the payment provider last reported for a
	// subscription phone (zero before any report: fulfilments recorded
	// before the provider's periods were read).
	Period FulfilmentPeriodRecorded
}

// Exists reports whether the stream holds a fulfilment.
func (f *Fulfilment) Exists() bool { return f.FulfilmentID != "" }

// Apply changes state by one recorded event at stream version version.
func (f *Fulfilment) Apply(e Event, version int64) {
	f.Version = version
	switch e := e.(type) {
	case FulfilmentCreated:
		f.FulfilmentCreated = e
	case FulfilmentProvisioned:
		f.State, f.DeviceID, f.EstimatedBy = FulfilmentProvisionedState, e.DeviceID, time.Time{}
		if f.ProvisionedAt.IsZero() {
			f.ProvisionedAt = e.At
		}
	case FulfilmentAwaitingProvisioning:
		f.State, f.EstimatedBy = FulfilmentAwaitingState, e.EstimatedBy
	case FulfilmentEstimateChanged:
		f.EstimatedBy = e.EstimatedBy
	case FulfilmentRenewalCancelled:
		f.RenewalCancelled, f.EndsAt = true, e.EndsAt
	case FulfilmentPeriodRecorded:
		f.Period = e
		if f.RenewalCancelled {
			// A phone that does not renew ends with the period the
			// provider says is paid.
			f.EndsAt = e.PeriodEnd
		}
	case FulfilmentCancelled:
		f.State, f.DeviceID, f.CancelledReason, f.CancelledAt = FulfilmentCancelledState, "", e.Reason, e.At
	}
}

// ErrFulfilmentNotFound is the one answer for a fulfilment that does not
// exist or is another organisation's.
func ErrFulfilmentNotFound() *Error { return NotFound("no fulfilment with that id") }
