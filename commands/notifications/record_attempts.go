package notifications

import (
	"context"
	"errors"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
)

// RecordNotificationsRaised records one attempt of a trigger's fan-out.
type RecordNotificationsRaised struct {
	OrgID string
	Event domain.NotificationsRaised
}

// RecordNotificationsRaisedHandler handles RecordNotificationsRaised.
type RecordNotificationsRaisedHandler struct{ c *Capability }

// Handle appends the attempt to the trigger's stream at version attempt−1
// and marks the reaction's claim recorded in the same unit; its error
// matches eventstore.ErrConflict when that attempt is on record already.
func (h RecordNotificationsRaisedHandler) Handle(ctx context.Context, cmd RecordNotificationsRaised) (eventstore.Appended, error) {
	return h.c.recordAttempt(ctx, cmd.OrgID, domain.NotificationTriggerStream(cmd.Event.TriggerKey), FanoutReaction,
		cmd.Event.TriggerKey, cmd.Event.Attempt, cmd.Event)
}

// RecordEmailAttempt records one e-mail attempt of a notification.
type RecordEmailAttempt struct {
	OrgID string
	Event domain.NotificationEmailAttempted
}

// RecordEmailAttemptHandler handles RecordEmailAttempt.
type RecordEmailAttemptHandler struct{ c *Capability }

// Handle appends the attempt to the notification's e-mail stream at
// version attempt−1 with the claim marked recorded, as above.
func (h RecordEmailAttemptHandler) Handle(ctx context.Context, cmd RecordEmailAttempt) (eventstore.Appended, error) {
	return h.c.recordAttempt(ctx, cmd.OrgID, domain.NotificationEmailStream(cmd.Event.NotificationID), EmailReaction,
		cmd.Event.NotificationID, cmd.Event.Attempt, cmd.Event)
}

func (c *Capability) recordAttempt(ctx context.Context, orgID, stream, reaction, key string, attempt int, ev domain.Event) (eventstore.Appended, error) {
	news, err := eventstore.Encode(domain.Events, orgID, ev)
	if err != nil {
		return eventstore.Appended{}, err
	}
	cm, err := c.Store.Commit(ctx, claims.Recorded((&eventstore.Unit{}).Append(stream, int64(attempt-1), news...), reaction, key, attempt))
	if err != nil {
		return eventstore.Appended{}, err
	}
	return cm.Appends[0], nil
}

// RaiseKeyExpiryNotice records that a key's minter is owed a notice.
type RaiseKeyExpiryNotice struct {
	OrgID string
	Event domain.APIKeyExpiryNoticeDue
}

// RaiseKeyExpiryNoticeHandler handles RaiseKeyExpiryNotice.
type RaiseKeyExpiryNoticeHandler struct{ c *Capability }

// Handle starts the notice's stream; it answers false when the notice was
// raised before (one per key, expiry and threshold).
func (h RaiseKeyExpiryNoticeHandler) Handle(ctx context.Context, cmd RaiseKeyExpiryNotice) (bool, error) {
	e := cmd.Event
	news, err := eventstore.Encode(domain.Events, cmd.OrgID, domain.Event(e))
	if err != nil {
		return false, err
	}
	_, err = h.c.Store.Commit(ctx, (&eventstore.Unit{}).Append(domain.APIKeyExpiryNoticeStream(e.KeyID, e.ExpiresAt, e.Threshold),
		eventstore.NoStream, news...))
	if errors.Is(err, eventstore.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}
