// Package payments is the one place that talks to the payment provider
// (Stripe, through stripe-go v79). Provisioning codes against the Provider
// port and the plain structs here; nothing outside this package imports
// stripe-go.
//
// Every Stripe instance has its own API backend (its own base URL, HTTP
// client and key), so several instances, and tests against separate
// stripe-mock processes, never share stripe-go's package-level state.
//
// # Errors
//
// A provider that does not answer, answers 5xx, answers something that is
// not a Stripe response, or rate-limits the call returns an error for which
// errors.Is(err, ErrUnavailable) holds: the caller answers 503
// checkout_unavailable (retryable). A provider that answers but refuses the
// request (4xx: bad key, bad parameter, missing object) returns a
// *RefusedError, which is not ErrUnavailable: retrying the same request does
// not help. ExpireCheckoutSession answers ErrNotExpirable for a session that
// can no longer be made unpayable, UpcomingInvoice ErrNoUpcomingInvoice
// when the customer has nothing to be billed. Webhook verification answers
// ErrInvalidSignature or ErrInvalidEvent.
package payments

import (
	"context"
	"errors"
	"fmt"
	"phonefleet/domain"
	"time"
)

// Provider is what provisioning needs from the payment provider.
type Provider interface {
	// CreateCheckoutSession opens a hosted payment page. Mode is
	// ModeSubscription (billing subscription), ModePayment (billing day /
	// prepaid) or ModeSetup (payg: save a card for metered use). The
	// session, and the subscription or payment intent it creates, carry the
	// metadata org_id and order_id (plus r.Metadata). r.IdempotencyKey, when
	// set, is sent as Stripe's Idempotency-Key: the same key with the same
	// request answers the same session. Errors: ErrUnavailable,
	// *RefusedError.
	CreateCheckoutSession(ctx context.Context, r CheckoutRequest) (CheckoutSession, error)
	// ExpireCheckoutSession makes an open session unpayable. ErrNotExpirable
	// when it is already complete or otherwise cannot be expired (the
	// caller answers checkout_in_progress); ErrUnavailable.
	ExpireCheckoutSession(ctx context.Context, sessionID string) error
	// CheckoutSession reads a session as the provider holds it now: its
	// status ("open", "complete", "expired") and payment status, so a
	// session that cannot be expired is told paid from gone. Errors:
	// ErrUnavailable, *RefusedError (also a session it does not know).
	CheckoutSession(ctx context.Context, sessionID string) (CheckoutSession, error)
	// EnsureCustomer returns the provider customer of an organisation,
	// creating it once (metadata org_id) when existingID is empty; the
	// caller records the id. Creation carries an idempotency key derived
	// from the organisation, so two concurrent first checkouts of one
	// organisation get one customer. Errors: ErrUnavailable, *RefusedError.
	EnsureCustomer(ctx context.Context, orgID, existingID string) (string, error)
	// CustomerBalance is the customer's balance in the smallest currency
	// unit (non-zero blocks checkout). Errors: ErrUnavailable,
	// *RefusedError.
	CustomerBalance(ctx context.Context, customerID string) (int64, error)
	// CreatePortalSession returns the URL of a billing-portal session for
	// the customer that sends the browser back to returnURL. Errors:
	// ErrUnavailable, *RefusedError (also when the portal is not set up).
	CreatePortalSession(ctx context.Context, customerID, returnURL string) (string, error)
	// UpcomingInvoice previews the customer's next invoice.
	// ErrNoUpcomingInvoice when there is none; ErrUnavailable,
	// *RefusedError.
	UpcomingInvoice(ctx context.Context, customerID string) (Invoice, error)
	// ListSubscriptions returns every subscription, whatever its status,
	// for reconciliation. Errors: ErrUnavailable, *RefusedError.
	ListSubscriptions(ctx context.Context) ([]Subscription, error)
	// ListPayments returns every payment intent, for reconciliation.
	// Errors: ErrUnavailable, *RefusedError.
	ListPayments(ctx context.Context) ([]Payment, error)
	// ListRefunds returns every refund, for reconciliation. Errors:
	// ErrUnavailable, *RefusedError.
	ListRefunds(ctx context.Context) ([]Refund, error)
	// ListDisputes returns every dispute, whatever its status, for
	// reconciliation. Errors: ErrUnavailable, *RefusedError.
	ListDisputes(ctx context.Context) ([]Dispute, error)
	// CancelSubscription stops a subscription: at once (Stripe's
	// subscription cancel) or, with atPeriodEnd, at the end of the period
	// already paid (cancel_at_period_end=true). idempotencyKey is sent as
	// Stripe's Idempotency-Key, so a repeat of the same follow-up performs
	// it once. Errors: ErrUnavailable, *RefusedError.
	CancelSubscription(ctx context.Context, subscriptionID string, atPeriodEnd bool, idempotencyKey string) error
	// ResumeSubscription withdraws a cancellation scheduled at the period's
	// end (cancel_at_period_end=false): the subscription renews again.
	// idempotencyKey is sent as Stripe's Idempotency-Key. Errors:
	// ErrUnavailable, *RefusedError.
	ResumeSubscription(ctx context.Context, subscriptionID, idempotencyKey string) error
	// Refund refunds amount (the smallest currency unit; 0 is the whole
	// payment) of a payment intent and returns the refund's id.
	// idempotencyKey is sent as Stripe's Idempotency-Key. Errors:
	// ErrUnavailable, *RefusedError.
	Refund(ctx context.Context, paymentIntentID string, amount int64, idempotencyKey string) (string, error)
	// SetSubscriptionQuantity sets the quantity of the one item a
	// subscription bills, with Stripe's proration_behavior proration
	// ("create_prorations", "none"), and returns the quantity the provider
	// answered. idempotencyKey is sent as Stripe's Idempotency-Key on the
	// update. Errors: ErrUnavailable, *RefusedError (also a subscription
	// that does not bill exactly one item).
	SetSubscriptionQuantity(ctx context.Context, subscriptionID string, quantity int64, proration, idempotencyKey string) (int64, error)
	// RefundSubscriptionShare refunds up to amount (the smallest currency
	// unit, more than 0) of the subscription's paid invoice of the period
	// a phone ended in at endedAt: the newest paid invoice created at or
	// before endedAt. One unit's share of the period it paid, never more
	// than its charge has left unrefunded. It returns the refund's id and
	// the amount refunded ("" and 0 when nothing is left to refund).
	// idempotencyKey is sent as Stripe's Idempotency-Key of the refund.
	// Errors: ErrUnavailable, *RefusedError (also a subscription with no
	// such paid invoice that has a charge).
	RefundSubscriptionShare(ctx context.Context, subscriptionID string, amount int64, endedAt time.Time,
		idempotencyKey string) (string, int64, error)
	// SubscriptionOfCharge reads which subscription a charge paid: the
	// charge's invoice's subscription ("" for a charge of no invoice, or an
	// invoice of no subscription). A subscription's charges carry none of
	// the subscription's metadata, so this is how a refund or a dispute of
	// one is traced back to an order. Errors: ErrUnavailable,
	// *RefusedError (also a charge the provider does not know).
	SubscriptionOfCharge(ctx context.Context, chargeID string) (string, error)
	// OriginOfCharge reads what a charge paid: its invoice, the invoice's
	// subscription and the subscription's metadata as the invoice
	// recorded it (all empty for a charge of no invoice), in one call. A
	// refund or a dispute of a subscription's invoice (a renewal's) is
	// traced to its order through it. Errors: ErrUnavailable,
	// *RefusedError (also a charge the provider does not know).
	OriginOfCharge(ctx context.Context, chargeID string) (ChargeOrigin, error)
}

// ChargeOrigin is what a charge paid.
type ChargeOrigin struct {
	// InvoiceID is the invoice the charge paid ("" for none);
	// SubscriptionID that invoice's subscription ("" for none).
	InvoiceID, SubscriptionID string
	// SubscriptionMetadata is the subscription's metadata as it was when
	// the invoice was finalized (Stripe's subscription_details.metadata:
	// MetaOrgID and MetaOrderID for ours).
	SubscriptionMetadata map[string]string
}

// Checkout modes (Stripe's Checkout Session mode).
const (
	// ModeSubscription bills a recurring price (the billing subscription).
	ModeSubscription = "subscription"
	// ModePayment charges once (a billing day, a prepaid plan).
	ModePayment = "payment"
	// ModeSetup saves a card for later metered charges (pay-as-you-go); it
	// has no line item and charges nothing.
	ModeSetup = "setup"
)

// Metadata keys the checkout sets on the session and on the subscription
// or payment intent, so that reconciliation and the webhook can map a
// provider record back to an order.
const (
	MetaOrgID   = "org_id"
	MetaOrderID = "order_id"
)

// CheckoutRequest is one hosted payment page to open.
type CheckoutRequest struct {
	// OrgID and OrderID are written to the metadata of the session and of
	// the subscription or payment intent (MetaOrgID, MetaOrderID) and the
	// order id is the session's client_reference_id.
	OrgID, OrderID string
	// CustomerID is the organisation's provider customer (EnsureCustomer).
	CustomerID string
	// Mode is ModeSubscription, ModePayment or ModeSetup.
	Mode string
	// Currency is the ISO code in lower case ("eur"); required in every
	// mode (setup included: it picks the payment methods offered).
	Currency string
	// UnitAmount is the price of one unit in the smallest currency unit;
	// unused in setup mode.
	UnitAmount int64
	// Quantity is the number of units (at least 1); unused in setup mode.
	Quantity int
	// Interval is the billing interval of a subscription ("day", "week",
	// "month", "year"); empty means "month". Unused in other modes.
	Interval string
	// ProductName is what the payment page shows for the line item.
	ProductName string
	// SuccessURL and CancelURL are where the browser goes afterwards.
	SuccessURL, CancelURL string
	// ExpiresAt, when set, is when the session stops being payable (Stripe
	// accepts 30 minutes to 24 hours from now); zero leaves Stripe's 24 h.
	ExpiresAt time.Time
	// IdempotencyKey, when set, is sent as Stripe's Idempotency-Key (at
	// most 255 characters).
	IdempotencyKey string
	// Metadata is added to the session's and the subscription's or payment
	// intent's metadata; org_id and order_id always win.
	Metadata map[string]string
}

// CheckoutSession is a hosted payment page: the one just opened, or the
// object of a checkout.session.* webhook event.
type CheckoutSession struct {
	ID string
	// URL is where to send the browser (empty once it is no longer open).
	URL string
	// Mode is ModeSubscription, ModePayment or ModeSetup.
	Mode string
	// Status is "open", "complete" or "expired".
	Status string
	// PaymentStatus is "paid", "unpaid" (an asynchronous payment method
	// still pending) or "no_payment_required" (setup mode).
	PaymentStatus string
	ExpiresAt     time.Time
	// PaymentIntentID, SubscriptionID and SetupIntentID are set when the
	// provider has created them (a payment-mode session usually creates its
	// payment intent only when paid).
	PaymentIntentID string
	SubscriptionID  string
	SetupIntentID   string
	CustomerID      string
	// ClientReferenceID is the order id the checkout was opened for.
	ClientReferenceID string
	// AmountTotal is the session's total in the smallest currency unit.
	AmountTotal int64
	Currency    string
	// Metadata holds MetaOrgID and MetaOrderID.
	Metadata map[string]string
}

// Invoice is a preview of the customer's next invoice (UpcomingInvoice),
// or the object of an invoice.* webhook event.
type Invoice struct {
	// ID is empty for a preview.
	ID string
	// Status is "draft", "open", "paid", "uncollectible" or "void" (empty
	// for a preview).
	Status     string
	CustomerID string
	// BillingReason is Stripe's: "subscription_create",
	// "subscription_cycle" (a renewal), "manual", …
	BillingReason string
	// AmountDue is what will be charged, in the smallest currency unit;
	// AmountPaid what was collected.
	AmountDue  int64
	AmountPaid int64
	// Total is the invoice total before the customer balance is applied.
	Total       int64
	Currency    string
	PeriodStart time.Time
	PeriodEnd   time.Time
	// NextPaymentAttempt is when the provider will try to charge it (zero
	// when it will not).
	NextPaymentAttempt time.Time
	SubscriptionID     string
	// SubscriptionMetadata is the metadata the subscription had when the
	// invoice was finalized (MetaOrgID, MetaOrderID for ours).
	SubscriptionMetadata map[string]string
	Metadata             map[string]string
	Lines                []InvoiceLine
}

// InvoiceLine is one line of an invoice.
type InvoiceLine struct {
	Description string
	// Amount is the line's amount in the smallest currency unit.
	Amount      int64
	Currency    string
	Quantity    int64
	PeriodStart time.Time
	PeriodEnd   time.Time
	// SubscriptionID is the subscription the line bills, if any.
	SubscriptionID string
	// Metadata is the line's metadata (for a subscription line, the
	// subscription's).
	Metadata map[string]string
}

// Subscription is a provider subscription, for reconciliation.
// SubscriptionItem is one line a subscription bills each period: its
// quantity and the price of one.
type SubscriptionItem struct {
	ID         string
	Quantity   int64
	UnitAmount int64
	Currency   string
}

type Subscription struct {
	ID string
	// Status is Stripe's: "active", "past_due", "unpaid", "canceled",
	// "incomplete", "incomplete_expired", "trialing", "paused".
	Status             string
	CustomerID         string
	Metadata           map[string]string
	Created            time.Time
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	// CancelAtPeriodEnd is set when the renewal was cancelled.
	CancelAtPeriodEnd bool
	// CanceledAt is zero unless the subscription was cancelled.
	CanceledAt time.Time
	// EndedAt is zero unless the subscription has ended.
	EndedAt time.Time
	// Items are what the subscription bills each period (empty when the
	// provider's answer carried none).
	Items []SubscriptionItem
}

// Payment is a provider payment intent, for reconciliation.
type Payment struct {
	ID string
	// Status is Stripe's payment intent status: "succeeded",
	// "processing", "requires_payment_method", "requires_action",
	// "requires_confirmation", "requires_capture", "canceled".
	Status string
	// Amount is what was asked, AmountReceived what was collected, in the
	// smallest currency unit.
	Amount         int64
	AmountReceived int64
	Currency       string
	CustomerID     string
	// ChargeID is the latest charge, if any.
	ChargeID string
	Metadata map[string]string
	Created  time.Time
}

// Refund is a provider refund, for reconciliation.
type Refund struct {
	ID string
	// PaymentID is the refunded payment intent; ChargeID the refunded
	// charge.
	PaymentID string
	ChargeID  string
	Amount    int64
	Currency  string
	// Status is "pending", "requires_action", "succeeded", "failed" or
	// "canceled".
	Status   string
	Metadata map[string]string
	Created  time.Time
}

// Charge is the object of a charge.* webhook event (a refund or a
// dispute shows there first).
type Charge struct {
	ID              string
	PaymentIntentID string
	CustomerID      string
	// InvoiceID is the invoice the charge paid ("" for none): a
	// subscription's charges are its invoices'.
	InvoiceID string
	// Amount is what was charged, AmountRefunded what was refunded so far,
	// in the smallest currency unit.
	Amount         int64
	AmountRefunded int64
	Currency       string
	// Status is "succeeded", "pending" or "failed".
	Status   string
	Refunded bool
	Disputed bool
	Metadata map[string]string
	Created  time.Time
}

// Dispute is the object of a charge.dispute.* webhook event.
type Dispute struct {
	ID              string
	ChargeID        string
	PaymentIntentID string
	Amount          int64
	Currency        string
	// Status is Stripe's: "needs_response", "under_review", "won", "lost",
	// "warning_needs_response", "warning_under_review", "warning_closed".
	Status string
	// Reason is Stripe's: "fraudulent", "product_not_received", …
	Reason   string
	Metadata map[string]string
	Created  time.Time
}

var (
	// ErrUnavailable means the provider did not answer, answered 5xx or
	// something that is not a Stripe response, or rate-limited the call:
	// the caller answers 503 checkout_unavailable, retryable. Nothing is
	// known to have changed at the provider (a write may still have
	// happened; repeat it with the same idempotency key).
	ErrUnavailable = errors.New("payments: provider unavailable")
	// ErrNotExpirable means the checkout session cannot be made unpayable
	// any more (complete, already expired, or not found): the caller
	// answers 409 checkout_in_progress.
	ErrNotExpirable = errors.New("payments: checkout session cannot be expired")
	// ErrNoUpcomingInvoice means the customer has no upcoming invoice.
	ErrNoUpcomingInvoice = errors.New("payments: no upcoming invoice")
	// ErrInvalidSignature means a webhook's Stripe-Signature does not
	// verify (wrong secret, altered body, stale or missing timestamp): the
	// webhook answers 400 invalid_signature.
	ErrInvalidSignature = errors.New("payments: webhook signature does not verify")
	// ErrInvalidEvent means a correctly signed webhook body is not a
	// readable event: the webhook answers 400 invalid_event.
	ErrInvalidEvent = errors.New("payments: webhook event cannot be read")
)

// RefusedError is the provider's answer to a request it refused (HTTP 4xx
// other than 429): retrying the same request does not help.
type RefusedError struct {
	// Status is the HTTP status.
	Status int
	// Type and Code are Stripe's error type ("invalid_request_error", …)
	// and code ("resource_missing", …); Param the parameter it names.
	Type, Code, Param string
	Message           string
	// RequestID is Stripe's request id, for support.
	RequestID string
}

// Error describes the refusal.
func (e *RefusedError) Error() string {
	s := fmt.Sprintf("payments: provider refused the request (%d %s", e.Status, e.Type)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Param != "" {
		s += " param " + e.Param
	}
	s += ")"
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " [" + e.RequestID + "]"
	}
	return s
}

// Refusal is the answer to a provider error when opening a payment:
// 503 checkout_unavailable, retryable when the provider did not answer
// (ErrUnavailable), not when it refused (a configuration problem; nothing
// changed).
func Refusal(err error) *domain.Error {
	if errors.Is(err, ErrUnavailable) {
		return domain.Errorf(domain.CodeCheckoutUnavailable, "the payment provider did not answer; nothing was charged, try again").
			WithRetryable(true).Wrap(err)
	}
	return domain.Errorf(domain.CodeCheckoutUnavailable, "the payment provider refused to open a checkout; nothing was charged").
		WithRetryable(false).Wrap(err)
}
