package domain

import "time"

// provisioningEvents are the events of purchases: an organisation's billing
// account (one stream per organisation, AccountStream, holding its checkout
// attempts and orders, so that one decision sees every open attempt), each
// fulfilment (one stream per phone bought, FulfilmentStream), and the
// payment provider's events applied (one stream per provider event id,
// ProviderEventStream, so each is applied once).
var provisioningEvents = []EventDef{
	Def[CheckoutStarted](1, nil),
	Def[CheckoutOpened](1, nil),
	Def[CheckoutFailed](1, nil),
	Def[CheckoutExpired](1, nil),
	Def[BillingCustomerRecorded](1, nil),
	Def[OrderPaymentPending](1, nil),
	Def[OrderPaid](1, nil),
	Def[OrderEnded](1, nil),
	Def[FulfilmentCreated](1, nil),
	Def[FulfilmentProvisioned](1, nil),
	Def[FulfilmentAwaitingProvisioning](1, nil),
	Def[FulfilmentEstimateChanged](1, nil),
	Def[FulfilmentCancelled](1, nil),
	Def[FulfilmentRenewalCancelled](1, nil),
	Def[FulfilmentPeriodRecorded](1, nil),
	Def[ProviderEventApplied](1, nil),
}

// AccountStream is the stream of an organisation's billing account.
func AccountStream(orgID string) string { return "billing-" + orgID }

// FulfilmentStream is the stream of one fulfilment (one phone bought).
func FulfilmentStream(fulfilmentID string) string { return "fulfilment-" + fulfilmentID }

// ProviderEventStream is the marker stream of one payment-provider event:
// its first (and only) event, appended at NoStream in the same unit as the
// event's effects, makes a redelivered event change nothing.
func ProviderEventStream(providerEventID string) string { return "provider-event-" + providerEventID }

// PurchaseChoice is what a checkout buys (spec 2.1), resolved against the
// price list: Model and Region are filled in (the default region when the
// body named none), Quantity is at least 1, and AddOns are the intents
// recorded on the order (they never change the charge).
type PurchaseChoice struct {
	Sku      string `json:"sku"`
	Billing  string `json:"billing"`
	Model    string `json:"model,omitempty"`
	Region   string `json:"region,omitempty"`
	Quantity int    `json:"quantity"`
	AddOns   AddOns `json:"addOns"`
}

// AddOns are the add-on intents of a cloud phone purchase.
type AddOns struct {
	USFixedIP      bool `json:"usFixedIp"`
	PreinstallApps bool `json:"preinstallApps"`
}

// Slot is where the purchase's units come from (see Slot).
func (c PurchaseChoice) Slot() string { return Slot(c.Sku, c.Model, c.Region) }

// CheckoutStarted records a checkout attempt before the payment provider is
// asked for a hosted page: the order id, the per-phone fulfilment ids it
// will commit once paid, the price charged, and the idempotency key (as a
// digest) with a digest of the request, so a repeat is told apart from a
// different purchase. While no CheckoutOpened or CheckoutFailed follows,
// the attempt is running.
type CheckoutStarted struct {
	OrgID          string         `json:"orgId"`
	OrderID        string         `json:"orderId"`
	FulfilmentIDs  []string       `json:"fulfilmentIds"`
	Choice         PurchaseChoice `json:"choice"`
	Currency       string         `json:"currency"`
	UnitAmount     int64          `json:"unitAmount"`
	QuoteID        string         `json:"quoteId"`
	IdempotencyKey string         `json:"idempotencyKey,omitempty"` // SHA-256 hex of the Idempotency-Key header
	RequestDigest  string         `json:"requestDigest"`
	By             Actor          `json:"by"`
	At             time.Time      `json:"at"`
	// Claim is the attempt's claim, held by the process running it
	// (AttemptClaim); empty on attempts recorded before claims were taken.
	Claim string `json:"claim,omitempty"`
}

// EventName implements Event.
func (CheckoutStarted) EventName() string { return "checkout.started" }

// CheckoutOpened records the hosted payment page the provider made for an
// attempt: the answer every repeat of the attempt's key replays.
type CheckoutOpened struct {
	OrderID     string    `json:"orderId"`
	SessionID   string    `json:"sessionId"`
	CheckoutURL string    `json:"checkoutUrl"`
	ExpiresAt   time.Time `json:"expiresAt"`
	CustomerID  string    `json:"customerId,omitempty"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (CheckoutOpened) EventName() string { return "checkout.opened" }

// CheckoutFailed records an attempt that made no payment page (the provider
// did not answer, or refused; an earlier page could not be closed):
// nothing is payable. A final failure (its answer was not retryable:
// repeating the request unchanged does not help) is its idempotency key's
// answer, replayed for the key's window; any other failure frees the key
// (events recorded before the field existed have Final false, as they
// did).
type CheckoutFailed struct {
	OrderID string    `json:"orderId"`
	Code    Code      `json:"code"`
	Message string    `json:"message"`
	Final   bool      `json:"final,omitempty"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (CheckoutFailed) EventName() string { return "checkout.failed" }

// Reasons a checkout's page stopped being payable.
const (
	CheckoutRestarted = "restarted" // a repeat without a key expired it and minted another
	CheckoutTimedOut  = "expired"   // its expiresAt passed (or the provider said so)
)

// CheckoutExpired records that an attempt's page can no longer be paid.
type CheckoutExpired struct {
	OrderID string    `json:"orderId"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (CheckoutExpired) EventName() string { return "checkout.expired" }

// BillingCustomerRecorded records the organisation's customer at the
// payment provider.
type BillingCustomerRecorded struct {
	OrgID      string    `json:"orgId"`
	CustomerID string    `json:"customerId"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (BillingCustomerRecorded) EventName() string { return "billing.customer_recorded" }

// OrderPaymentPending records a checkout completed at the provider whose
// payment is still being confirmed (an asynchronous payment method): a new
// checkout answers payment_in_progress meanwhile.
type OrderPaymentPending struct {
	OrderID         string    `json:"orderId"`
	ProviderEventID string    `json:"providerEventId"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (OrderPaymentPending) EventName() string { return "order.payment_pending" }

// OrderPaid records a verified payment: the order's fulfilments are created
// in the same unit.
type OrderPaid struct {
	OrderID         string    `json:"orderId"`
	ProviderEventID string    `json:"providerEventId"`
	CustomerID      string    `json:"customerId,omitempty"`
	SubscriptionID  string    `json:"subscriptionId,omitempty"`
	PaymentIntentID string    `json:"paymentIntentId,omitempty"`
	PaidAt          time.Time `json:"paidAt"`
}

// EventName implements Event.
func (OrderPaid) EventName() string { return "order.paid" }

// Reasons an order or fulfilment ended.
const (
	EndSubscriptionEnded = "subscription_ended" // the provider ended the subscription
	EndRefunded          = "refunded"           // the provider refunded the payment
	EndDisputed          = "disputed"           // the payment was disputed
	EndCustomerCancel    = "customer_cancel"    // the customer pressed Cancel
	EndCustomerReturn    = "customer_return"    // the customer pressed Return
	EndOwnerRefund       = "owner_refund"       // the deployment's owner refunded it
	EndUndelivered       = "undelivered"        // the undelivered-order sweep gave up on it
	EndDayPassExpired    = "day_pass_expired"   // a day pass ran out
	EndCloudUndelivered  = "cloud_undelivered"  // a cloud phone cancelled before delivery
)

// NotifiedEnd reports whether a fulfilment cancelled for reason sends
// fulfilment.changed (spec 3.2): the provider's end, refund or dispute and
// the customer's Return or Cancel do; an owner refund, the undelivered-order
// sweep, a day pass expiring and a cloud undelivered cancel do not.
func NotifiedEnd(reason string) bool {
	switch reason {
	case EndSubscriptionEnded, EndRefunded, EndDisputed, EndCustomerCancel, EndCustomerReturn:
		return true
	}
	return false
}

// OrderEnded records that the provider ended a paid order as a whole (its
// subscription ended, its payment was refunded or disputed): its
// fulfilments are cancelled in the same unit.
type OrderEnded struct {
	OrderID         string    `json:"orderId"`
	Reason          string    `json:"reason"`
	ProviderEventID string    `json:"providerEventId,omitempty"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (OrderEnded) EventName() string { return "order.ended" }

// FulfilmentCreated is the first event of a fulfilment's stream: one phone
// of a paid order. Provisioned or AwaitingProvisioning follows in the same
// unit.
type FulfilmentCreated struct {
	FulfilmentID string         `json:"fulfilmentId"`
	OrgID        string         `json:"orgId"`
	OrderID      string         `json:"orderId"`
	Choice       PurchaseChoice `json:"choice"`
	Currency     string         `json:"currency"`
	UnitAmount   int64          `json:"unitAmount"`
	// SubscriptionID is the provider subscription that renews it (billing
	// subscription), PaymentIntentID the payment (billing day).
	SubscriptionID  string    `json:"subscriptionId,omitempty"`
	PaymentIntentID string    `json:"paymentIntentId,omitempty"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentCreated) EventName() string { return "fulfilment.created" }

// Fulfilment states (spec 3.1).
const (
	FulfilmentProvisionedState = "provisioned"
	FulfilmentAwaitingState    = "awaiting_provisioning"
	FulfilmentCancelledState   = "cancelled"
)

// FulfilmentProvisioned records that the phone is the organisation's:
// DeviceID is registered for it. Sends fulfilment.changed.
type FulfilmentProvisioned struct {
	FulfilmentID string    `json:"fulfilmentId"`
	DeviceID     string    `json:"deviceId"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentProvisioned) EventName() string { return "fulfilment.provisioned" }

// FulfilmentAwaitingProvisioning records a paid phone with no unit free:
// it is promised by EstimatedBy (about 24 hours by default). Sends
// fulfilment.changed.
type FulfilmentAwaitingProvisioning struct {
	FulfilmentID string    `json:"fulfilmentId"`
	EstimatedBy  time.Time `json:"estimatedBy"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentAwaitingProvisioning) EventName() string { return "fulfilment.awaiting_provisioning" }

// FulfilmentEstimateChanged records a new delivery estimate for a phone
// still awaiting provisioning (its estimate history).
type FulfilmentEstimateChanged struct {
	FulfilmentID string    `json:"fulfilmentId"`
	EstimatedBy  time.Time `json:"estimatedBy"`
	Reason       string    `json:"reason"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentEstimateChanged) EventName() string { return "fulfilment.estimate_changed" }

// FulfilmentCancelled records the end of a fulfilment: its device (if it
// had one) leaves the organisation. Notify says whether fulfilment.changed
// is sent (NotifiedEnd of Reason, spec 3.2).
type FulfilmentCancelled struct {
	FulfilmentID    string    `json:"fulfilmentId"`
	Reason          string    `json:"reason"`
	Notify          bool      `json:"notify"`
	DeviceID        string    `json:"deviceId,omitempty"` // the device it had, now gone
	ProviderEventID string    `json:"providerEventId,omitempty"`
	By              *Actor    `json:"by,omitempty"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentCancelled) EventName() string { return "fulfilment.cancelled" }

// FulfilmentRenewalCancelled records that a subscription phone will not
// renew: it stays provisioned until EndsAt.
type FulfilmentRenewalCancelled struct {
	FulfilmentID string    `json:"fulfilmentId"`
	EndsAt       time.Time `json:"endsAt"`
	By           Actor     `json:"by"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentRenewalCancelled) EventName() string { return "fulfilment.renewal_cancelled" }

// FulfilmentPeriodRecorded records the paid period of a subscription
// phone as the payment provider reports it: the period of the
// subscription's line on a paid invoice (invoice.paid: the first one, a
// trial's end, each renewal) or the subscription's current period
// (customer.subscription.updated: a billing cycle anchor moved, say).
// AsOf is when the provider made the report (its event's creation time),
// so a report delivered late never replaces a newer one. The renewal is
// the end of the period recorded (Fulfilment.PeriodEnd).
type FulfilmentPeriodRecorded struct {
	FulfilmentID   string    `json:"fulfilmentId"`
	SubscriptionID string    `json:"subscriptionId"`
	PeriodStart    time.Time `json:"periodStart"`
	PeriodEnd      time.Time `json:"periodEnd"`
	AsOf           time.Time `json:"asOf"`
	// Source is the provider event type that reported it.
	Source          string    `json:"source"`
	ProviderEventID string    `json:"providerEventId,omitempty"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (FulfilmentPeriodRecorded) EventName() string { return "fulfilment.period_recorded" }

// ProviderEventApplied marks a payment-provider event as applied.
type ProviderEventApplied struct {
	ProviderEventID string    `json:"providerEventId"`
	Type            string    `json:"type"`
	OrgID           string    `json:"orgId,omitempty"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (ProviderEventApplied) EventName() string { return "payment.provider_event_applied" }
