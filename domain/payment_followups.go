package domain

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Payment follow-ups: telling the payment provider that a fulfilment ended
// or stopped renewing by our decision (the customer's Cancel or Return,
// cancel-renewal, the owner's refund, an undelivered phone given up on).
// Each follow-up is derived from the event that triggered it
// (PaymentFollowupID), carried out by a reactor (workers.PaymentFollowups)
// with an idempotency key derived from the same event, and each attempt is
// recorded as payment.followup_attempted in the follow-up's own stream.
// Ends the provider initiated are not followed up with a refund (the
// provider knows already), but a refund or a dispute of a subscription's
// invoice does not stop the subscription: its last phone to end cancels it
// (PlanPaymentFollowup).
var paymentFollowupEvents = []EventDef{
	Def[PaymentFollowupAttempted](1, nil),
	Def[PaymentFollowupRetried](1, nil),
	Def[PaymentFollowupSettled](1, nil),
}

// What a follow-up asks of the provider.
const (
	// FollowupCancelSubscription cancels the subscription now.
	FollowupCancelSubscription = "cancel_subscription"
	// FollowupCancelAtPeriodEnd sets cancel_at_period_end: the paid period
	// runs out, nothing more is billed.
	FollowupCancelAtPeriodEnd = "cancel_subscription_at_period_end"
	// FollowupRefund refunds the unit's payment (its UnitAmount of the
	// order's payment intent).
	FollowupRefund = "refund"
	// FollowupSetQuantity sets the quantity the subscription bills to the
	// phones of it that still renew (Quantity), with the provider's
	// proration (Proration): one phone of several stopped.
	FollowupSetQuantity = "set_subscription_quantity"
	// FollowupNone asks nothing (Note says why); the attempt is recorded
	// as skipped, so the decision is on record.
	FollowupNone = "none"
)

// Why a follow-up asks nothing, or what it leaves undone (Note).
const (
	// FollowupNoteShared: another live phone of the order still renews on
	// the same subscription; the last one to stop renewing cancels it.
	// Recorded before issue 26 lowered the quantity per phone; no plan
	// makes it any more.
	FollowupNoteShared = "subscription_shared"
	// FollowupNoteNoSubscription / FollowupNoteNoPayment: the fulfilment
	// names no provider subscription / payment intent.
	FollowupNoteNoSubscription = "no_subscription"
	FollowupNoteNoPayment      = "no_payment_intent"
	// FollowupNoteNothingPaid: the unit cost nothing.
	FollowupNoteNothingPaid = "nothing_paid"
	// FollowupNoteInvoiceNotRefunded: a subscription phone returned or
	// refunded had its subscription cancelled, but the invoice already paid
	// was not refunded automatically; the owner refunded it from the
	// dashboard if owed. Recorded before issue 26 refunded the unit's share
	// (PaymentFollowup.RefundShare); no plan makes it any more.
	FollowupNoteInvoiceNotRefunded = "invoice_not_refunded"
)

// Attempt outcomes (PaymentFollowupAttempted.Outcome).
const (
	FollowupDone     = "done"
	FollowupSkipped  = "skipped"
	FollowupRetrying = "retrying"
	// FollowupGaveUp: the provider stayed unavailable for every attempt.
	FollowupGaveUp = "gave_up"
	// FollowupRefused: the provider refused the request (4xx); repeating it
	// does not help, so it is not retried.
	FollowupRefused = "refused"
)

// The retry schedule: gaps after attempts 1 to 8 while the provider is
// unavailable, about 15 h 42 min in all, within the 24 hours Stripe keeps
// an idempotency key (so a late retry of a write that did happen is still
// recognised).
var FollowupRetryGaps = [...]time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour}

// FollowupMaxAttempts is how many attempts a follow-up gets in all.
const FollowupMaxAttempts = len(FollowupRetryGaps) + 1

// FollowupAttemptTimeout bounds one attempt's provider call.
const FollowupAttemptTimeout = 45 * time.Second

// followupNamespace is the UUIDv5 namespace of follow-up ids. Never change
// it: every recorded follow-up id depends on it.
var followupNamespace = uuid.MustParse("b7a4f1de-2c55-4d0e-8f7b-3e9a61c0d2a8")

// PaymentFollowupID derives the id of the follow-up of the triggering
// event eventID: pfu_ and the hex of a UUIDv5, so a rebuilt read model
// finds the same follow-ups and never acts twice.
func PaymentFollowupID(eventID uuid.UUID) string {
	u := uuid.NewSHA1(followupNamespace, []byte(eventID.String()))
	return "pfu_" + hex.EncodeToString(u[:])
}

// PaymentFollowupStream is the stream of one follow-up's attempts; its
// version is the number of attempts recorded.
func PaymentFollowupStream(followupID string) string { return "payment-followup-" + followupID }

// PaymentFollowupKey is the Idempotency-Key of every provider call of a
// follow-up: the same on every attempt, so the provider performs it once.
func PaymentFollowupKey(followupID string) string { return "phonefleet-followup-" + followupID }

// FollowupTrigger is what decides a follow-up: the triggering event and
// the fulfilment as it was, with the other fulfilments on the same
// subscription at that point of the log.
type FollowupTrigger struct {
	// Event is fulfilment.cancelled or fulfilment.renewal_cancelled;
	// Reason the cancellation's reason.
	Event, Reason   string
	Billing         string
	SubscriptionID  string
	PaymentIntentID string
	UnitAmount      int64
	// OthersLive counts the other live fulfilments of the subscription,
	// OthersRenewing those of them whose renewal is not cancelled.
	OthersLive, OthersRenewing int
}

// Proration behaviours of a quantity change (Stripe's proration_behavior).
const (
	// ProrationCreate: the provider credits the unused rest of the period
	// of the phone that stopped, on the subscription's next invoice.
	ProrationCreate = "create_prorations"
	// ProrationNone: no credit; the quantity bills from the next period
	// (the phone's paid period is honoured, or refunded otherwise).
	ProrationNone = "none"
)

// FollowupPlan is what a follow-up asks of the provider.
type FollowupPlan struct {
	Action string
	Note   string
	// Quantity and Proration are a FollowupSetQuantity's.
	Quantity  int64
	Proration string
	// RefundShare, on a subscription action, also refunds the phone's
	// UnitAmount of the subscription's latest paid invoice (its share of
	// the period paid).
	RefundShare bool
}

// PlanPaymentFollowup decides the follow-up of a trigger; false means
// none is owed:
//   - ends the provider initiated (subscription_ended, refunded, disputed)
//     and a day pass running out: the provider knows, or nothing is owed;
//     but a subscription whose invoice the provider refunded or the
//     cardholder disputed would go on renewing the phones that ended, so
//     the last of them to end (no other live phone on it) cancels it now:
//     one cancel per subscription, however many phones the end took;
//   - a subscription phone (Cancel, Return, owner refund, undelivered, or
//     cancel-renewal): the subscription is one for the whole order, so
//     while another of its phones still renews its quantity is set to the
//     phones that still renew, prorated by the provider when the phone
//     ends now (the unused rest of its period credited on the next
//     invoice) and not when it only stopped renewing (its paid period runs
//     out); otherwise it is cancelled now, or at the period's end when
//     another of its phones is still live (its paid period is honoured) or
//     this phone only stopped renewing. A return or refund does not refund
//     the paid invoice (noted);
//   - a paid-once phone (day): Return, the owner's refund and an
//     undelivered phone (undelivered, cloud_undelivered) refund its
//     UnitAmount of the order's payment; the customer's Cancel of a
//     delivered day pass refunds nothing (Return is the refund).
func PlanPaymentFollowup(t FollowupTrigger) (FollowupPlan, bool) {
	renewal := t.Event == FulfilmentRenewalCancelled{}.EventName()
	if !renewal {
		switch t.Reason {
		case EndCustomerCancel, EndCustomerReturn, EndOwnerRefund, EndUndelivered, EndCloudUndelivered:
		case EndRefunded, EndDisputed:
			if t.Billing == BillingSubscription && t.SubscriptionID != "" && t.OthersLive == 0 {
				return FollowupPlan{Action: FollowupCancelSubscription}, true
			}
			return FollowupPlan{}, false
		default:
			return FollowupPlan{}, false
		}
	}
	if t.Billing == BillingSubscription {
		share := (t.Reason == EndCustomerReturn || t.Reason == EndOwnerRefund) && t.UnitAmount > 0
		switch {
		case t.SubscriptionID == "":
			return FollowupPlan{Action: FollowupNone, Note: FollowupNoteNoSubscription}, true
		case t.OthersRenewing > 0:
			proration := ProrationCreate
			if renewal || share {
				proration = ProrationNone
			}
			return FollowupPlan{Action: FollowupSetQuantity, Quantity: int64(t.OthersRenewing), Proration: proration,
				RefundShare: share}, true
		case renewal || t.OthersLive > 0:
			return FollowupPlan{Action: FollowupCancelAtPeriodEnd, RefundShare: share}, true
		}
		return FollowupPlan{Action: FollowupCancelSubscription, RefundShare: share}, true
	}
	if renewal || t.Reason == EndCustomerCancel {
		return FollowupPlan{}, false
	}
	switch {
	case t.PaymentIntentID == "":
		return FollowupPlan{Action: FollowupNone, Note: FollowupNoteNoPayment}, true
	case t.UnitAmount <= 0:
		return FollowupPlan{Action: FollowupNone, Note: FollowupNoteNothingPaid}, true
	}
	return FollowupPlan{Action: FollowupRefund}, true
}

// PaymentFollowup is one follow-up as the reactor carries it out.
type PaymentFollowup struct {
	// OrgID is the organisation (the event envelope's, not in the data).
	OrgID           string `json:"-"`
	FollowupID      string `json:"followupId"`
	FulfilmentID    string `json:"fulfilmentId"`
	Action          string `json:"action"`
	Note            string `json:"note,omitempty"`
	SubscriptionID  string `json:"subscriptionId,omitempty"`
	PaymentIntentID string `json:"paymentIntentId,omitempty"`
	// Amount is what a refund returns, in the smallest currency unit: of
	// the order's payment (FollowupRefund), or at most of the
	// subscription's latest paid invoice (a subscription action with
	// RefundShare).
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Quantity and Proration are what a FollowupSetQuantity asks.
	Quantity  int64  `json:"quantity,omitempty"`
	Proration string `json:"proration,omitempty"`
	// RefundShare: a subscription action also refunds Amount of the
	// subscription's paid invoice of the period the phone ended in, after
	// the subscription change.
	RefundShare bool `json:"refundShare,omitempty"`
	// TriggeredAt is when the triggering event happened (the phone ended):
	// which period's invoice a RefundShare refunds. Read from the read
	// model's row; the attempt events do not carry it (the trigger's time
	// is in the log already).
	TriggeredAt time.Time `json:"-"`
}

// PaymentFollowupRefundKey is the Idempotency-Key of a subscription
// follow-up's refund: its second provider call needs a key of its own
// (Stripe refuses one key on two different requests).
func PaymentFollowupRefundKey(followupID string) string {
	return PaymentFollowupKey(followupID) + "-refund"
}

// FollowupResult is what one attempt's provider call came to.
type FollowupResult struct {
	// Unavailable: the provider did not answer usefully (retry);
	// Refused: it refused the request (do not retry).
	Unavailable, Refused bool
	// Error describes a failure; RefundID is the refund made.
	Error    string
	RefundID string
	// ProviderQuantity is the quantity the provider answered a quantity
	// change with (what it bills from now on).
	ProviderQuantity int64
	// RefundedAmount is what the provider's refund came to.
	RefundedAmount int64
}

// PaymentFollowupAttempted records one attempt of a follow-up and the
// decision on it: done, skipped (nothing to ask), retrying (with its next
// attempt time), refused or gave up.
type PaymentFollowupAttempted struct {
	PaymentFollowup
	Attempt        int    `json:"attempt"`
	Outcome        string `json:"outcome"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	RefundID       string `json:"refundId,omitempty"`
	// ProviderQuantity is the quantity the provider answered a quantity
	// change with.
	ProviderQuantity int64 `json:"providerQuantity,omitempty"`
	// RefundedAmount is what a refund of a subscription's share came to
	// (the provider caps it at what the invoice's charge has left).
	RefundedAmount int64      `json:"refundedAmount,omitempty"`
	Error          string     `json:"error,omitempty"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt,omitempty"`
	At             time.Time  `json:"at"`
}

// EventName implements Event.
func (PaymentFollowupAttempted) EventName() string { return "payment.followup_attempted" }

// DecidePaymentFollowup records attempt number attempt (1-based) of f,
// made at at with result r.
func DecidePaymentFollowup(f PaymentFollowup, attempt int, at time.Time, r FollowupResult) PaymentFollowupAttempted {
	e := PaymentFollowupAttempted{PaymentFollowup: f, Attempt: attempt, At: at.UTC().Truncate(time.Microsecond),
		RefundID: r.RefundID, ProviderQuantity: r.ProviderQuantity, RefundedAmount: r.RefundedAmount, Error: r.Error}
	if f.Action != FollowupNone {
		e.IdempotencyKey = PaymentFollowupKey(f.FollowupID)
	}
	switch {
	case f.Action == FollowupNone:
		e.Outcome = FollowupSkipped
	case r.Refused:
		e.Outcome = FollowupRefused
	case r.Unavailable && attempt >= FollowupMaxAttempts:
		e.Outcome = FollowupGaveUp
	case r.Unavailable:
		e.Outcome = FollowupRetrying
		next := e.At.Add(FollowupRetryGaps[max(attempt, 1)-1])
		e.NextAttemptAt = &next
	default:
		e.Outcome = FollowupDone
	}
	return e
}

// The operator's hand on a follow-up that was refused or gave up
// (`phonefleet payments followups retry|settle`). Its events live in a
// stream of their own (PaymentFollowupOperatorStream), so the attempts'
// stream keeps its rule "version = attempts recorded", which records each
// attempt number once.

// PaymentFollowupOperatorStream is the stream of the operator's decisions
// on one follow-up.
func PaymentFollowupOperatorStream(followupID string) string {
	return "payment-followup-operator-" + followupID
}

// PaymentFollowupRetried records that the operator made a follow-up due
// again after attempt AfterAttempt ended it refused or given up. The next
// attempt carries the same idempotency key as every earlier one, so a
// provider that did act on a lost answer does not act twice.
type PaymentFollowupRetried struct {
	FollowupID   string    `json:"followupId"`
	AfterAttempt int       `json:"afterAttempt"`
	By           Actor     `json:"by"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (PaymentFollowupRetried) EventName() string { return "payment.followup_retried" }

// PaymentFollowupSettled records that the operator closed a refused or
// given-up follow-up by hand (the refund made in the provider's dashboard,
// the subscription found already ended), with the reason given.
type PaymentFollowupSettled struct {
	FollowupID   string    `json:"followupId"`
	AfterAttempt int       `json:"afterAttempt"`
	Reason       string    `json:"reason"`
	By           Actor     `json:"by"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (PaymentFollowupSettled) EventName() string { return "payment.followup_settled" }

// FollowupHistory is a follow-up's attempts and the operator's decisions
// on it, folded from its two streams: what retry and settle decide on.
type FollowupHistory struct {
	FollowupID string
	OrgID      string
	// Attempts recorded, and the outcome of the last one.
	Attempts int
	Outcome  string
	// RetriedAfter is the attempt after which the operator last asked for
	// a retry (0: never); Settled whether the operator closed it.
	RetriedAfter int
	Settled      bool
}

// Exists reports whether any attempt of the follow-up is recorded.
func (h *FollowupHistory) Exists() bool { return h.Attempts > 0 }

// Apply folds one event of either stream.
func (h *FollowupHistory) Apply(e Event) {
	switch e := e.(type) {
	case PaymentFollowupAttempted:
		h.FollowupID, h.Attempts, h.Outcome = e.FollowupID, e.Attempt, e.Outcome
	case PaymentFollowupRetried:
		h.RetriedAfter = e.AfterAttempt
	case PaymentFollowupSettled:
		h.Settled = true
	}
}

// ErrFollowupNotFound is the answer for a follow-up that has no attempt
// recorded (none, or none yet).
func ErrFollowupNotFound() *Error {
	return NotFound("no payment follow-up with that id has been attempted")
}

// Stuck reports whether the follow-up waits for the operator: its last
// attempt was refused or gave up, and nobody retried or settled it since.
func (h *FollowupHistory) Stuck() bool {
	return !h.Settled && (h.Outcome == FollowupRefused || h.Outcome == FollowupGaveUp) && h.RetriedAfter < h.Attempts
}

// stuckOr returns nil when the follow-up waits for the operator, else the
// wrong_state refusal naming its state.
func (h *FollowupHistory) stuckOr() error {
	if !h.Exists() {
		return ErrFollowupNotFound()
	}
	if h.Stuck() {
		return nil
	}
	state := h.Outcome
	switch {
	case h.Settled:
		state = "settled"
	case h.RetriedAfter >= h.Attempts:
		state = "retry_pending"
	}
	return Errorf(CodeWrongState, "the follow-up is %s: only one refused or given up can be retried or settled", state).
		With("state", state).WithRetryable(false)
}

// Retry decides the operator's retry: the follow-up is due again at at.
// Errors: not_found, wrong_state (not refused or given up, retried already
// and not attempted since, or settled).
func (h *FollowupHistory) Retry(by Actor, at time.Time) ([]Event, error) {
	if err := h.stuckOr(); err != nil {
		return nil, err
	}
	return []Event{PaymentFollowupRetried{FollowupID: h.FollowupID, AfterAttempt: h.Attempts, By: by,
		At: at.UTC().Truncate(time.Microsecond)}}, nil
}

// Settle decides the operator's closing of the follow-up by hand, for
// reason (required). Errors: invalid_argument (no reason), not_found,
// wrong_state (as Retry).
func (h *FollowupHistory) Settle(reason string, by Actor, at time.Time) ([]Event, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, Errorf(CodeInvalidArgument, "a reason is required to settle a follow-up by hand").With("field", "reason")
	}
	if err := h.stuckOr(); err != nil {
		return nil, err
	}
	return []Event{PaymentFollowupSettled{FollowupID: h.FollowupID, AfterAttempt: h.Attempts, Reason: strings.TrimSpace(reason),
		By: by, At: at.UTC().Truncate(time.Microsecond)}}, nil
}
