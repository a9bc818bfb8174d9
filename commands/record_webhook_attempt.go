package commands

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

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
var ErrAttemptRecorded = errors.New("webhook attempt already recorded")

// RecordedWebhookAttempt is the outcome of recording one attempt.
type RecordedWebhookAttempt struct {
	Event domain.WebhookDeliveryAttempted
	// Appended is what was written; zero when Err is not nil.
	Appended eventstore.Appended
	// Err is ErrAttemptRecorded when that attempt was recorded already.
	Err error
}

// Handle appends the attempt to the delivery's stream at the version
// attempt−1 (so one attempt number is recorded at most once) and, in the
// same transaction, marks the dispatcher's claim recorded. It returns what
// it appended and the event.
func (h RecordWebhookAttemptHandler) Handle(ctx context.Context, cmd RecordWebhookAttempt) (eventstore.Appended, domain.WebhookDeliveryAttempted, error) {
	r := h.HandleAll(ctx, []RecordWebhookAttempt{cmd})[0]
	return r.Appended, r.Event, r.Err
}

// HandleAll records several attempts as Handle does, all in one
// transaction (one commit, which is most of the cost of recording). If one
// of them was recorded already, the transaction is abandoned and each is
// recorded on its own, so that one does not undo the others.
func (h RecordWebhookAttemptHandler) HandleAll(ctx context.Context, cmds []RecordWebhookAttempt) []RecordedWebhookAttempt {
	out := make([]RecordedWebhookAttempt, len(cmds))
	news := make([][]eventstore.NewEvent, len(cmds))
	for i, cmd := range cmds {
		ev := domain.DecideWebhookAttempt(cmd.DeliveryID, cmd.WebhookID, cmd.Attempt, cmd.At, cmd.ResponseStatus, cmd.Error)
		out[i].Event = ev
		news[i], out[i].Err = encodeWebhookEvents(cmd.OrgID, eventstore.Metadata{ActorKind: "system", ActorID: "webhook-dispatcher:" + cmd.DispatcherID},
			ev.AttemptedAt, []domain.Event{ev})
	}
	ids := make([]string, 0, len(cmds))
	attempts := make([]int32, 0, len(cmds))
	err := h.Store.InTx(ctx, func(tx pgx.Tx) error {
		for i, cmd := range cmds {
			if out[i].Err != nil {
				continue
			}
			a, err := h.Store.AppendTx(ctx, tx, domain.DeliveryStream(cmd.DeliveryID), int64(cmd.Attempt-1), news[i]...)
			if err != nil {
				return err
			}
			out[i].Appended = a
			ids, attempts = append(ids, cmd.DeliveryID), append(attempts, int32(cmd.Attempt))
		}
		_, err := tx.Exec(ctx, `UPDATE webhook_delivery_claims c SET recorded = true, leased_until = '-infinity'
			FROM unnest($1::text[], $2::int[]) AS r(delivery_id, attempt)
			WHERE c.delivery_id = r.delivery_id AND c.attempt = r.attempt`, ids, attempts)
		return err
	})
	switch {
	case err == nil:
		return out
	case errors.Is(err, eventstore.ErrConflict) && len(cmds) > 1:
		for i, cmd := range cmds {
			out[i] = h.HandleAll(ctx, []RecordWebhookAttempt{cmd})[0]
		}
		return out
	case errors.Is(err, eventstore.ErrConflict):
		err = ErrAttemptRecorded
	}
	for i := range out {
		out[i].Appended = eventstore.Appended{}
		if out[i].Err == nil {
			out[i].Err = err
		}
	}
	return out
}
