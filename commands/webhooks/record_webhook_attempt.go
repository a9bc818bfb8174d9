package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
)

// DeliveryReaction names the webhook delivery reaction (workers'
// webhook dispatcher) in the claims table and as the actor of the attempts
// it records. It is stable: renaming it forgets the claims held.
const DeliveryReaction = "webhook-dispatcher"

// RecordWebhookAttempt records one delivery attempt and its outcome.
type RecordWebhookAttempt struct {
	OrgID      string
	DeliveryID string
	WebhookID  string
	// Attempt is the 1-based attempt number the dispatcher claimed.
	Attempt int
	At      time.Time
	// ResponseStatus is the HTTP status answered, 0 when none came.
	ResponseStatus int
	// Error says why no answer came (domain.WebhookError…).
	Error string
	// DispatcherID names the dispatcher that made the attempt.
	DispatcherID string
}

// RecordWebhookAttemptHandler handles RecordWebhookAttempt.
type RecordWebhookAttemptHandler struct {
	Store *eventstore.Store
}

// ErrAttemptRecorded is returned when that attempt number of the delivery
// is already recorded (by a dispatcher that took over an expired claim).
// The error also matches eventstore.ErrConflict, which is how a reactor
// (workers.Reactor) tells an attempt on record from a failure to record.
var ErrAttemptRecorded = errors.New("webhook attempt already recorded")

// Event returns the event that records cmd: the domain's decision on the
// attempt (delivered, retrying with its next attempt time, or given up).
func (cmd RecordWebhookAttempt) Event() domain.WebhookDeliveryAttempted {
	return domain.DecideWebhookAttempt(cmd.DeliveryID, cmd.WebhookID, cmd.Attempt, cmd.At, cmd.ResponseStatus, cmd.Error)
}

// RecordedWebhookAttempt is what recording an attempt appended, and the
// event that records it.
type RecordedWebhookAttempt struct {
	Appended eventstore.Appended
	Event    domain.WebhookDeliveryAttempted
}

// Handle appends the attempt to the delivery's stream at the version
// attempt−1 (so one attempt number is recorded at most once) and, in the
// same unit, marks the dispatcher's claim recorded. Attempts recorded
// concurrently share one commit (the store's group commit). It returns
// what it appended and the event; ErrAttemptRecorded when that attempt
// was recorded already.
func (h RecordWebhookAttemptHandler) Handle(ctx context.Context, cmd RecordWebhookAttempt) (RecordedWebhookAttempt, error) {
	ev := cmd.Event()
	out := RecordedWebhookAttempt{Event: ev}
	news, err := eventstore.Encode(domain.Events, cmd.OrgID, domain.Event(ev))
	if err != nil {
		return out, err
	}
	news[0].OccurredAt = ev.AttemptedAt
	c, err := h.Store.Commit(ctx, claims.Recorded((&eventstore.Unit{}).
		Append(domain.DeliveryStream(cmd.DeliveryID), int64(cmd.Attempt-1), news...),
		DeliveryReaction, cmd.DeliveryID, cmd.Attempt))
	if errors.Is(err, eventstore.ErrConflict) {
		return out, fmt.Errorf("%w: %w", ErrAttemptRecorded, err)
	}
	if err != nil {
		return out, err
	}
	out.Appended = c.Appends[0]
	return out, nil
}
