package provisioning

import (
	"context"
	"errors"
	"fmt"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
)

// FollowupReaction names the payment follow-up reaction (workers'
// PaymentFollowups) in the claims table and as the actor of the attempts
// it records. It is stable: renaming it forgets the claims held.
const FollowupReaction = "payment-followups"

// RecordPaymentFollowup records one attempt of a payment follow-up and the
// domain's decision on it (domain.DecidePaymentFollowup).
type RecordPaymentFollowup struct {
	OrgID string
	Event domain.PaymentFollowupAttempted
}

// RecordPaymentFollowupHandler handles RecordPaymentFollowup. It is a
// system command of the payment follow-up reactor, not on the application
// object.
type RecordPaymentFollowupHandler struct {
	Store *eventstore.Store
}

// ErrFollowupRecorded is returned when that attempt number of the
// follow-up is already recorded (by an instance that took over a lapsed
// claim); it also matches eventstore.ErrConflict, as workers.Reactor asks.
var ErrFollowupRecorded = errors.New("payment follow-up attempt already recorded")

// Handle appends the attempt to the follow-up's stream at version
// attempt−1 (one attempt number is recorded once) and, in the same unit,
// marks the claim recorded.
func (h RecordPaymentFollowupHandler) Handle(ctx context.Context, cmd RecordPaymentFollowup) (eventstore.Appended, error) {
	ev := cmd.Event
	news, err := eventstore.Encode(domain.Events, cmd.OrgID, domain.Event(ev))
	if err != nil {
		return eventstore.Appended{}, err
	}
	news[0].OccurredAt = ev.At
	c, err := h.Store.Commit(ctx, claims.Recorded((&eventstore.Unit{}).
		Append(domain.PaymentFollowupStream(ev.FollowupID), int64(ev.Attempt-1), news...),
		FollowupReaction, ev.FollowupID, ev.Attempt))
	if errors.Is(err, eventstore.ErrConflict) {
		return eventstore.Appended{}, fmt.Errorf("%w: %w", ErrFollowupRecorded, err)
	}
	if err != nil {
		return eventstore.Appended{}, err
	}
	return c.Appends[0], nil
}
