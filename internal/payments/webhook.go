package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"
)

// WebhookTolerance is how far a webhook's signed timestamp may be from now
// (Stripe's default): an older (or, by clock skew, newer) delivery is
// refused as a possible replay.
const WebhookTolerance = 300 * time.Second

// Event types provisioning reacts to.
const (
	EventCheckoutCompleted             = "checkout.session.completed"
	EventCheckoutExpired               = "checkout.session.expired"
	EventCheckoutAsyncPaymentSucceeded = "checkout.session.async_payment_succeeded"
	EventCheckoutAsyncPaymentFailed    = "checkout.session.async_payment_failed"
	EventSubscriptionUpdated           = "customer.subscription.updated"
	EventSubscriptionDeleted           = "customer.subscription.deleted"
	EventInvoicePaid                   = "invoice.paid"
	EventInvoicePaymentFailed          = "invoice.payment_failed"
	EventPaymentIntentSucceeded        = "payment_intent.succeeded"
	EventPaymentIntentFailed           = "payment_intent.payment_failed"
	EventChargeRefunded                = "charge.refunded"
	EventDisputeCreated                = "charge.dispute.created"
	EventDisputeClosed                 = "charge.dispute.closed"
)

// Event is a verified provider webhook event.
type Event struct {
	// ID is the event id (evt_…); Stripe may deliver one event more than
	// once, so handlers deduplicate on it.
	ID   string
	Type string
	// Created is when the provider created the event.
	Created time.Time
	// Livemode is false for test-mode events.
	Livemode bool
	// APIVersion is the API version the object is rendered in.
	APIVersion string
	// Object is data.object, the object the event is about, as sent.
	Object json.RawMessage
	// PreviousAttributes is data.previous_attributes on *.updated events.
	PreviousAttributes json.RawMessage
}

// VerifyWebhook checks the Stripe-Signature header of a webhook delivery
// against secret (HMAC-SHA256 over "timestamp.payload", any v1 signature
// of the header may match, as during a secret roll) and that its timestamp
// is within WebhookTolerance of now, then reads the event.
// ErrInvalidSignature when the header is missing or malformed, no signature
// matches, or the timestamp is out of tolerance; ErrInvalidEvent when a
// correctly signed body is not a readable event. An event rendered in
// another API version than stripe-go's is accepted: the fields read here
// are stable across versions.
func VerifyWebhook(payload []byte, sigHeader, secret string, now time.Time) (Event, error) {
	if secret == "" {
		return Event{}, fmt.Errorf("%w: no webhook secret configured", ErrInvalidSignature)
	}
	// The tolerance is checked below against the injected now, because
	// stripe-go checks it against the wall clock.
	se, err := webhook.ConstructEventWithOptions(payload, sigHeader, secret, webhook.ConstructEventOptions{
		IgnoreTolerance:          true,
		IgnoreAPIVersionMismatch: true,
	})
	sigErr := errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrInvalidHeader) ||
		errors.Is(err, webhook.ErrNoValidSignature) || errors.Is(err, webhook.ErrTooOld)
	if sigErr {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalidSignature, err)
	}
	signedAt, ok := signedTimestamp(sigHeader)
	if !ok {
		return Event{}, fmt.Errorf("%w: no timestamp in the signature header", ErrInvalidSignature)
	}
	if d := now.Sub(signedAt); d > WebhookTolerance || d < -WebhookTolerance {
		return Event{}, fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)", ErrInvalidSignature,
			signedAt.UTC().Format(time.RFC3339), d.Round(time.Second), WebhookTolerance)
	}
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if se.ID == "" || se.Type == "" || se.Data == nil || !isJSONObject(se.Data.Raw) {
		return Event{}, fmt.Errorf("%w: no id, type or data.object", ErrInvalidEvent)
	}
	ev := Event{ID: se.ID, Type: string(se.Type), Created: unix(se.Created), Livemode: se.Livemode, APIVersion: se.APIVersion,
		Object: se.Data.Raw}
	if len(se.Data.PreviousAttributes) > 0 {
		prev, err := json.Marshal(se.Data.PreviousAttributes)
		if err != nil {
			return Event{}, fmt.Errorf("%w: previous_attributes: %v", ErrInvalidEvent, err)
		}
		ev.PreviousAttributes = prev
	}
	return ev, nil
}

// signedTimestamp reads the t= of a Stripe-Signature header the way
// stripe-go does (the last one wins), so the time checked is the time the
// signature was verified with.
func signedTimestamp(header string) (time.Time, bool) {
	var at time.Time
	found := false
	for _, pair := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k != "t" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		at, found = time.Unix(sec, 0), true
	}
	return at, found
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 1 && raw[0] == '{'
}

// SignWebhookForTest returns a Stripe-Signature header for payload signed
// with secret at t, exactly as Stripe signs deliveries (t=…,v1=…), for
// tests and for development tools that post events to the webhook.
func SignWebhookForTest(payload []byte, secret string, t time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: t}).Header
}

// objectHead is what every Stripe object has.
type objectHead struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Metadata map[string]string `json:"metadata"`
}

func (e Event) head() objectHead {
	var h objectHead
	_ = json.Unmarshal(e.Object, &h) // VerifyWebhook made sure it is an object
	return h
}

// ObjectType is the kind of the event's object: "checkout.session",
// "subscription", "invoice", "payment_intent", "charge", "dispute",
// "refund", …
func (e Event) ObjectType() string { return e.head().Object }

// ObjectID is the id of the event's object.
func (e Event) ObjectID() string { return e.head().ID }

// ObjectMetadata is the metadata of the event's object (nil when it has
// none). Ours carry MetaOrgID and MetaOrderID.
func (e Event) ObjectMetadata() map[string]string { return e.head().Metadata }

// decode reads the event's object as a stripe-go type after checking its
// kind; ErrInvalidEvent when it is another kind or unreadable.
func decode[T any](e Event, kind string) (*T, error) {
	if got := e.ObjectType(); got != kind {
		return nil, fmt.Errorf("%w: event %s (%s) is about a %q, not a %q", ErrInvalidEvent, e.ID, e.Type, got, kind)
	}
	v := new(T)
	if err := json.Unmarshal(e.Object, v); err != nil {
		return nil, fmt.Errorf("%w: event %s: %s object: %v", ErrInvalidEvent, e.ID, kind, err)
	}
	return v, nil
}

// CheckoutSession reads a checkout.session.* event's session.
func (e Event) CheckoutSession() (CheckoutSession, error) {
	v, err := decode[stripe.CheckoutSession](e, "checkout.session")
	if err != nil {
		return CheckoutSession{}, err
	}
	return checkoutSession(v), nil
}

// Subscription reads a customer.subscription.* event's subscription.
func (e Event) Subscription() (Subscription, error) {
	v, err := decode[stripe.Subscription](e, "subscription")
	if err != nil {
		return Subscription{}, err
	}
	return subscription(v), nil
}

// Invoice reads an invoice.* event's invoice.
func (e Event) Invoice() (Invoice, error) {
	v, err := decode[stripe.Invoice](e, "invoice")
	if err != nil {
		return Invoice{}, err
	}
	return invoice(v), nil
}

// Payment reads a payment_intent.* event's payment intent.
func (e Event) Payment() (Payment, error) {
	v, err := decode[stripe.PaymentIntent](e, "payment_intent")
	if err != nil {
		return Payment{}, err
	}
	return payment(v), nil
}

// Charge reads a charge.* event's charge (charge.refunded and friends;
// not charge.dispute.*, whose object is a dispute).
func (e Event) Charge() (Charge, error) {
	v, err := decode[stripe.Charge](e, "charge")
	if err != nil {
		return Charge{}, err
	}
	return charge(v), nil
}

// Dispute reads a charge.dispute.* event's dispute.
func (e Event) Dispute() (Dispute, error) {
	v, err := decode[stripe.Dispute](e, "dispute")
	if err != nil {
		return Dispute{}, err
	}
	return dispute(v), nil
}

// Refund reads a refund.* (or charge.refund.updated) event's refund.
func (e Event) Refund() (Refund, error) {
	v, err := decode[stripe.Refund](e, "refund")
	if err != nil {
		return Refund{}, err
	}
	return refund(v), nil
}
