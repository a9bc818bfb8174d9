package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// PaymentFollowups is the read side of payment follow-ups (domain
// payment_followups.go): payment_followups holds one row per follow-up,
// keyed by domain.PaymentFollowupID of its triggering event
// (fulfilment.cancelled or fulfilment.renewal_cancelled), with the action
// decided by domain.PlanPaymentFollowup and its status moved by
// payment.followup_attempted (pending → done | skipped | refused | failed).
// payment_followup_fulfilments keeps, per fulfilment, its subscription and
// whether it is live and renews, so that the plan of a trigger sees the
// other phones of the same subscription exactly as they were at that point
// of the log: a rebuild from position 0 plans the same follow-ups.
// trigger_position (the trigger's position in the log) orders the
// follow-ups of one subscription: they are carried out one after the
// other in that order (workers.PaymentFollowups), so quantities set per
// phone land in the order the phones stopped.
type PaymentFollowups struct{}

// PaymentFollowupsName is the projection's stable name.
const PaymentFollowupsName = "payment_followups"

// Name implements Projection.
func (PaymentFollowups) Name() string { return PaymentFollowupsName }

// Tables implements Projection.
func (PaymentFollowups) Tables() []string {
	return []string{"payment_followups", "payment_followup_fulfilments"}
}

// EventTypes implements Selective.
func (PaymentFollowups) EventTypes() []string { return []string{"fulfilment.%", "payment.followup_%"} }

// Setup implements Projection.
func (PaymentFollowups) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.payment_followup_fulfilments (
		fulfilment_id     text PRIMARY KEY,
		billing           text NOT NULL,
		subscription_id   text NOT NULL,
		payment_intent_id text NOT NULL,
		unit_amount       bigint NOT NULL,
		currency          text NOT NULL,
		live              boolean NOT NULL,
		renews            boolean NOT NULL
	);
	CREATE INDEX ON `+schema+`.payment_followup_fulfilments (subscription_id) WHERE subscription_id <> '';
	CREATE TABLE `+schema+`.payment_followups (
		followup_id       text PRIMARY KEY,
		org_id            text NOT NULL,
		fulfilment_id     text NOT NULL,
		trigger_event     text NOT NULL,
		reason            text NOT NULL,
		action            text NOT NULL,
		note              text NOT NULL,
		subscription_id   text NOT NULL,
		payment_intent_id text NOT NULL,
		amount            bigint NOT NULL,
		currency          text NOT NULL,
		quantity          bigint NOT NULL DEFAULT 0,
		proration         text NOT NULL DEFAULT '',
		trigger_position  bigint NOT NULL DEFAULT 0,
		provider_quantity bigint NOT NULL DEFAULT 0,
		refund_share      boolean NOT NULL DEFAULT false,
		refunded_amount   bigint NOT NULL DEFAULT 0,
		status            text NOT NULL,
		attempts          integer NOT NULL DEFAULT 0,
		next_attempt_at   timestamptz NOT NULL,
		outcome           text NOT NULL DEFAULT '',
		refund_id         text NOT NULL DEFAULT '',
		last_error        text NOT NULL DEFAULT '',
		created_at        timestamptz NOT NULL,
		updated_at        timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.payment_followups (next_attempt_at, followup_id) WHERE status = 'pending';
	CREATE INDEX ON `+schema+`.payment_followups (fulfilment_id);
	CREATE INDEX ON `+schema+`.payment_followups (subscription_id, trigger_position) WHERE status = 'pending';`)
	return err
}

// Follow-up statuses (payment_followups.status).
const (
	FollowupPending = "pending"
	FollowupDone    = "done"
	FollowupSkipped = "skipped"
	FollowupRefused = "refused"
	FollowupFailed  = "failed"
	// FollowupSettled: the operator closed a refused or failed follow-up
	// by hand (payment.followup_settled).
	FollowupSettled = "settled"
)

var paymentFollowupEventTypes = typeSet(nameOf(domain.FulfilmentCreated{}), nameOf(domain.FulfilmentCancelled{}),
	nameOf(domain.FulfilmentRenewalCancelled{}), nameOf(domain.PaymentFollowupAttempted{}),
	nameOf(domain.PaymentFollowupRetried{}), nameOf(domain.PaymentFollowupSettled{}))

// Apply implements Projection. Events are applied one by one (not
// batched): a trigger's plan reads the fulfilment rows the events before
// it wrote.
func (PaymentFollowups) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	for _, e := range events {
		if !paymentFollowupEventTypes[e.Type] {
			continue
		}
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
		}
		if err := applyPaymentFollowup(ctx, tx, schema, e, ev); err != nil {
			return fmt.Errorf("%s at %d: %w", e.Type, e.Position, err)
		}
	}
	return nil
}

func applyPaymentFollowup(ctx context.Context, tx pgx.Tx, schema string, e eventstore.Event, ev domain.Event) error {
	ful, fu := schema+".payment_followup_fulfilments", schema+".payment_followups"
	switch ev := ev.(type) {
	case domain.FulfilmentCreated:
		_, err := tx.Exec(ctx, `INSERT INTO `+ful+` (fulfilment_id, billing, subscription_id, payment_intent_id,
				unit_amount, currency, live, renews)
			VALUES ($1, $2, $3, $4, $5, $6, true, $7) ON CONFLICT DO NOTHING`,
			ev.FulfilmentID, ev.Choice.Billing, ev.SubscriptionID, ev.PaymentIntentID, ev.UnitAmount, ev.Currency,
			ev.Choice.Billing == domain.BillingSubscription)
		return err
	case domain.FulfilmentCancelled:
		if _, err := tx.Exec(ctx, `UPDATE `+ful+` SET live = false, renews = false WHERE fulfilment_id = $1`, ev.FulfilmentID); err != nil {
			return err
		}
		return planFollowup(ctx, tx, schema, e, ev.FulfilmentID, ev.Reason, ev.At)
	case domain.FulfilmentRenewalCancelled:
		if _, err := tx.Exec(ctx, `UPDATE `+ful+` SET renews = false WHERE fulfilment_id = $1`, ev.FulfilmentID); err != nil {
			return err
		}
		return planFollowup(ctx, tx, schema, e, ev.FulfilmentID, "", ev.At)
	case domain.PaymentFollowupAttempted:
		status := FollowupPending
		switch ev.Outcome {
		case domain.FollowupDone:
			status = FollowupDone
		case domain.FollowupSkipped:
			status = FollowupSkipped
		case domain.FollowupRefused:
			status = FollowupRefused
		case domain.FollowupGaveUp:
			status = FollowupFailed
		}
		next := ev.At
		if ev.NextAttemptAt != nil {
			next = *ev.NextAttemptAt
		}
		// Attempts only move forward; a follow-up whose row is missing
		// (its trigger precedes a selective rebuild's window) is left alone.
		_, err := tx.Exec(ctx, `UPDATE `+fu+` SET attempts = $2, status = $3, outcome = $4, refund_id = $5,
				last_error = $6, next_attempt_at = $7, updated_at = $8, provider_quantity = $9, refunded_amount = $10
			WHERE followup_id = $1 AND attempts < $2`,
			ev.FollowupID, ev.Attempt, status, ev.Outcome, ev.RefundID, ev.Error, next, ev.At, ev.ProviderQuantity, ev.RefundedAmount)
		return err
	case domain.PaymentFollowupRetried:
		// Due again now, from the attempt it answers; the reactor claims
		// attempt AfterAttempt+1.
		_, err := tx.Exec(ctx, `UPDATE `+fu+` SET status = $3, next_attempt_at = $4, updated_at = $4
			WHERE followup_id = $1 AND attempts = $2 AND status IN ($5, $6)`,
			ev.FollowupID, ev.AfterAttempt, FollowupPending, ev.At, FollowupRefused, FollowupFailed)
		return err
	case domain.PaymentFollowupSettled:
		_, err := tx.Exec(ctx, `UPDATE `+fu+` SET status = $3, updated_at = $4
			WHERE followup_id = $1 AND attempts = $2 AND status IN ($5, $6)`,
			ev.FollowupID, ev.AfterAttempt, FollowupSettled, ev.At, FollowupRefused, FollowupFailed)
		return err
	}
	return nil
}

// planFollowup records the follow-up the trigger e owes, if any, due at
// the trigger's own time at (from its data, so a rebuild agrees), planned
// from the fulfilment's facts and the other fulfilments of its
// subscription as the log stands at e (this projection's own rows, never
// another read model, so the plan does not depend on projection lag).
func planFollowup(ctx context.Context, tx pgx.Tx, schema string, e eventstore.Event, fulfilmentID, reason string, at time.Time) error {
	ful := schema + ".payment_followup_fulfilments"
	t := domain.FollowupTrigger{Event: e.Type, Reason: reason}
	var currency string
	err := tx.QueryRow(ctx, `SELECT f.billing, f.subscription_id, f.payment_intent_id, f.unit_amount, f.currency,
			(SELECT count(*) FROM `+ful+` o WHERE f.subscription_id <> '' AND o.subscription_id = f.subscription_id
				AND o.fulfilment_id <> f.fulfilment_id AND o.live),
			(SELECT count(*) FROM `+ful+` o WHERE f.subscription_id <> '' AND o.subscription_id = f.subscription_id
				AND o.fulfilment_id <> f.fulfilment_id AND o.live AND o.renews)
		FROM `+ful+` f WHERE f.fulfilment_id = $1`, fulfilmentID).
		Scan(&t.Billing, &t.SubscriptionID, &t.PaymentIntentID, &t.UnitAmount, &currency, &t.OthersLive, &t.OthersRenewing)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // its creation precedes a selective rebuild's window: nothing is known to act on
	}
	if err != nil {
		return err
	}
	plan, owed := domain.PlanPaymentFollowup(t)
	if !owed {
		return nil
	}
	amount := int64(0)
	if plan.Action == domain.FollowupRefund || plan.RefundShare {
		amount = t.UnitAmount
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.payment_followups (followup_id, org_id, fulfilment_id, trigger_event,
			reason, action, note, subscription_id, payment_intent_id, amount, currency, status, next_attempt_at,
			created_at, updated_at, quantity, proration, trigger_position, refund_share)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $13, $14, $15, $16, $17) ON CONFLICT DO NOTHING`,
		domain.PaymentFollowupID(e.ID), e.OrgID, fulfilmentID, e.Type, reason, plan.Action, plan.Note, t.SubscriptionID,
		t.PaymentIntentID, amount, currency, FollowupPending, at, plan.Quantity, plan.Proration, e.Position, plan.RefundShare)
	return err
}

// FollowupView is a payment follow-up as the read model shows it.
type FollowupView struct {
	FollowupID, OrgID, FulfilmentID, TriggerEvent, Reason string
	Action, Note, SubscriptionID, PaymentIntentID         string
	Amount                                                int64
	Currency, Status, Outcome, RefundID, LastError        string
	Attempts                                              int
	UpdatedAt                                             time.Time
	// Quantity and Proration are a quantity change's; ProviderQuantity
	// what the provider answered it with.
	Quantity         int64
	Proration        string
	ProviderQuantity int64
	// RefundShare: a subscription action that also refunds the phone's
	// share of the paid invoice; RefundedAmount what that came to.
	RefundShare    bool
	RefundedAmount int64
}

// StuckFollowups returns the follow-ups that wait for the operator
// (refused, or failed after every attempt, and not retried or settled
// since), oldest change first.
func StuckFollowups(ctx context.Context, db DBTX) ([]FollowupView, error) {
	rows, err := db.Query(ctx, `SELECT followup_id, org_id, fulfilment_id, trigger_event, reason, action, note,
			subscription_id, payment_intent_id, amount, currency, status, outcome, refund_id, last_error, attempts, updated_at
		FROM public.payment_followups WHERE status IN ($1, $2) ORDER BY updated_at, followup_id`, FollowupRefused, FollowupFailed)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FollowupView, error) {
		var v FollowupView
		err := r.Scan(&v.FollowupID, &v.OrgID, &v.FulfilmentID, &v.TriggerEvent, &v.Reason, &v.Action, &v.Note,
			&v.SubscriptionID, &v.PaymentIntentID, &v.Amount, &v.Currency, &v.Status, &v.Outcome, &v.RefundID,
			&v.LastError, &v.Attempts, &v.UpdatedAt)
		return v, err
	})
}

// CountStuckFollowups counts what StuckFollowups lists (the health
// warning).
func CountStuckFollowups(ctx context.Context, db DBTX) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM public.payment_followups WHERE status IN ($1, $2)`,
		FollowupRefused, FollowupFailed).Scan(&n)
	return n, err
}

// PaymentFollowupsOf returns the follow-ups of a fulfilment, oldest first.
func PaymentFollowupsOf(ctx context.Context, db DBTX, fulfilmentID string) ([]FollowupView, error) {
	rows, err := db.Query(ctx, `SELECT followup_id, org_id, fulfilment_id, trigger_event, reason, action, note,
			subscription_id, payment_intent_id, amount, currency, status, outcome, refund_id, last_error, attempts,
			quantity, proration, provider_quantity, refund_share, refunded_amount
		FROM public.payment_followups WHERE fulfilment_id = $1 ORDER BY created_at, followup_id`, fulfilmentID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FollowupView, error) {
		var v FollowupView
		err := r.Scan(&v.FollowupID, &v.OrgID, &v.FulfilmentID, &v.TriggerEvent, &v.Reason, &v.Action, &v.Note,
			&v.SubscriptionID, &v.PaymentIntentID, &v.Amount, &v.Currency, &v.Status, &v.Outcome, &v.RefundID,
			&v.LastError, &v.Attempts, &v.Quantity, &v.Proration, &v.ProviderQuantity, &v.RefundShare, &v.RefundedAmount)
		return v, err
	})
}
