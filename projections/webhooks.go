package projections

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// WebhooksName is the stable name of the Webhooks projection.
const WebhooksName = "webhooks"

// Webhooks is the read side of webhooks: the subscriptions, the outbox and
// the delivery rows, in one projection so that the outbox sees each
// subscription exactly as it stood at each event's place in the feed.
//
// It consumes the webhook.* events and every domain event listed in
// domain.WebhookSourceFor, and emits none:
//   - webhook_subscriptions: one row per live subscription (webhook.subscribed,
//     .enabled, .disabled, .secret_rotated, .deleted);
//   - webhook_deliveries, the outbox: a mapped domain event × each enabled
//     subscription of its organisation that names its webhook event (or the
//     one subscription a test targets) becomes a pending row whose id is
//     domain.DeliveryID(subscription, event id) and whose payload is the exact
//     body to send. webhook.delivery_attempted moves the row through
//     pending → delivered | failed; webhook.disabled abandons the rows still
//     pending; webhook.deleted removes the subscription's rows.
//
// It never sends anything: the dispatcher (workers.WebhookDispatcher) reads
// the rows. Because ids derive from event ids and attempt outcomes are
// events, a rebuild reproduces the same rows, delivered ones included, and
// nothing is sent twice.
type Webhooks struct{}

// Name implements Projection.
func (Webhooks) Name() string { return WebhooksName }

// Tables implements Projection.
func (Webhooks) Tables() []string { return []string{"webhook_subscriptions", "webhook_deliveries"} }

// Setup implements Projection.
func (Webhooks) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE `+schema+`.webhook_subscriptions (
		webhook_id            text PRIMARY KEY,
		org_id                text NOT NULL,
		url                   text NOT NULL,
		events                text[] NOT NULL,
		enabled               boolean NOT NULL,
		disabled_reason       text,
		sealed_secret         bytea NOT NULL,
		secret_hint           text NOT NULL,
		created_at            timestamptz NOT NULL,
		secret_rotated_at     timestamptz,
		created_by_kind       text NOT NULL,
		created_by_user_id    text,
		created_by_api_key_id text,
		created_by_client_id  text
	);
	CREATE INDEX ON `+schema+`.webhook_subscriptions (org_id, created_at, webhook_id);
	CREATE TABLE `+schema+`.webhook_deliveries (
		delivery_id      text PRIMARY KEY,
		webhook_id       text NOT NULL,
		org_id           text NOT NULL,
		event_id         uuid NOT NULL,
		event            text NOT NULL,
		payload          bytea NOT NULL,
		created_at       timestamptz NOT NULL,
		status           text NOT NULL,
		attempts         integer NOT NULL DEFAULT 0,
		response_status  integer,
		error            text,
		last_attempt_at  timestamptz,
		next_attempt_at  timestamptz,
		abandoned        boolean NOT NULL DEFAULT false
	);
	CREATE INDEX ON `+schema+`.webhook_deliveries (webhook_id, created_at DESC, delivery_id DESC);
	CREATE INDEX ON `+schema+`.webhook_deliveries (next_attempt_at, delivery_id) WHERE status = 'pending';`)
	return err
}

// Apply implements Projection. Runs of attempt events are applied with
// one statement (attempts are most of the feed at load); any other event
// first flushes the run, so feed order is kept.
func (w Webhooks) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	attempts := attemptRun{}
	for i := range events {
		e := &events[i]
		src, mapped := domain.WebhookSourceFor(e.Type)
		if !mapped && !strings.HasPrefix(e.Type, "webhook.") {
			continue
		}
		de, err := decodeEvent(ctx, *e)
		if err != nil {
			return fmt.Errorf("webhooks: event %d: %w", e.Position, err)
		}
		if a, ok := de.(domain.WebhookDeliveryAttempted); ok {
			attempts.add(a)
			continue
		}
		if err := attempts.flush(ctx, tx, schema); err != nil {
			return fmt.Errorf("webhooks: attempts before %d: %w", e.Position, err)
		}
		if err := w.apply(ctx, tx, schema, e, de); err != nil {
			return fmt.Errorf("webhooks: %s at %d: %w", e.Type, e.Position, err)
		}
		if mapped {
			if err := w.outbox(ctx, tx, schema, e, de, src); err != nil {
				return fmt.Errorf("webhooks: outbox of %s at %d: %w", e.Type, e.Position, err)
			}
		}
	}
	if err := attempts.flush(ctx, tx, schema); err != nil {
		return fmt.Errorf("webhooks: attempts: %w", err)
	}
	return nil
}

// attemptRun collects consecutive attempt events, keeping the latest
// attempt of each delivery (it carries the row's whole new state).
type attemptRun map[string]domain.WebhookDeliveryAttempted

func (r attemptRun) add(a domain.WebhookDeliveryAttempted) {
	if prev, ok := r[a.DeliveryID]; !ok || a.Attempt > prev.Attempt {
		r[a.DeliveryID] = a
	}
}

// flush applies the run in one statement, which finds its rows by delivery
// id however large the table (queueCustomPlanned). attempts < the attempt
// keeps rows monotonic; an attempt on a deleted subscription's delivery
// finds no row. An abandoned delivery stays failed unless the attempt (sent
// before the switch-off) delivered it.
func (r attemptRun) flush(ctx context.Context, tx pgx.Tx, schema string) error {
	if len(r) == 0 {
		return nil
	}
	n := len(r)
	ids, errs, outcomes := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	nums, statuses := make([]int32, 0, n), make([]*int32, 0, n)
	ats, nexts := make([]time.Time, 0, n), make([]*time.Time, 0, n)
	for id, a := range r {
		ids, errs, outcomes = append(ids, id), append(errs, a.Error), append(outcomes, a.Outcome)
		nums, ats = append(nums, int32(a.Attempt)), append(ats, a.AttemptedAt)
		var st *int32
		if a.ResponseStatus != nil {
			v := int32(*a.ResponseStatus)
			st = &v
		}
		statuses = append(statuses, st)
		var next *time.Time
		if a.Outcome == domain.WebhookRetrying {
			next = a.NextAttemptAt
		}
		nexts = append(nexts, next)
	}
	clear(r)
	b := &pgx.Batch{}
	queueCustomPlanned(b, `UPDATE `+schema+`.webhook_deliveries d SET attempts = u.attempt, response_status = u.status,
		error = nullif(u.err, ''), last_attempt_at = u.at,
		status = CASE WHEN u.outcome = 'delivered' THEN 'delivered' WHEN d.abandoned OR u.outcome = 'gave_up' THEN 'failed' ELSE 'pending' END,
		next_attempt_at = CASE WHEN d.abandoned THEN NULL ELSE u.next END
		FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::timestamptz[], $6::text[], $7::timestamptz[])
		     AS u(id, attempt, status, err, at, outcome, next)
		WHERE d.delivery_id = u.id AND d.attempts < u.attempt`, ids, nums, statuses, errs, ats, outcomes, nexts)
	return tx.SendBatch(ctx, b).Close()
}

// apply applies one webhook.* event to the subscriptions and delivery rows.
func (Webhooks) apply(ctx context.Context, tx pgx.Tx, schema string, e *eventstore.Event, de domain.Event) error {
	subs, dels := schema+".webhook_subscriptions", schema+".webhook_deliveries"
	var err error
	switch ev := de.(type) {
	case domain.WebhookSubscribed:
		_, err = tx.Exec(ctx, `INSERT INTO `+subs+` (webhook_id, org_id, url, events, enabled, sealed_secret, secret_hint, created_at,
			created_by_kind, created_by_user_id, created_by_api_key_id, created_by_client_id)
			VALUES ($1, $2, $3, $4, true, $5, $6, $7, $8, nullif($9, ''), nullif($10, ''), nullif($11, '')) ON CONFLICT DO NOTHING`,
			ev.WebhookID, e.OrgID, ev.URL, ev.Events, ev.SealedSecret, ev.SecretHint, e.OccurredAt,
			string(ev.CreatedBy.Kind), ev.CreatedBy.UserID, ev.CreatedBy.APIKeyID, ev.CreatedBy.ClientID)
	case domain.WebhookEnabled:
		_, err = tx.Exec(ctx, `UPDATE `+subs+` SET enabled = true, disabled_reason = NULL WHERE webhook_id = $1`, ev.WebhookID)
	case domain.WebhookDisabled:
		if _, err = tx.Exec(ctx, `UPDATE `+subs+` SET enabled = false, disabled_reason = $2 WHERE webhook_id = $1`, ev.WebhookID, ev.Reason); err == nil {
			// Spec 3.2: queued deliveries of a disabled webhook are not retried.
			_, err = tx.Exec(ctx, `UPDATE `+dels+` SET status = 'failed', abandoned = true, next_attempt_at = NULL
				WHERE webhook_id = $1 AND status = 'pending'`, ev.WebhookID)
		}
	case domain.WebhookSecretRotated:
		_, err = tx.Exec(ctx, `UPDATE `+subs+` SET sealed_secret = $2, secret_hint = $3, secret_rotated_at = $4 WHERE webhook_id = $1`,
			ev.WebhookID, ev.SealedSecret, ev.SecretHint, e.OccurredAt)
	case domain.WebhookDeleted:
		if _, err = tx.Exec(ctx, `DELETE FROM `+dels+` WHERE webhook_id = $1`, ev.WebhookID); err == nil {
			_, err = tx.Exec(ctx, `DELETE FROM `+subs+` WHERE webhook_id = $1`, ev.WebhookID)
		}
	}
	return err
}

// outbox records the deliveries one mapped domain event causes.
func (Webhooks) outbox(ctx context.Context, tx pgx.Tx, schema string, e *eventstore.Event, de domain.Event, src domain.WebhookSource) error {
	data, target, ok := src.Build(de)
	if !ok {
		return nil
	}
	subs := schema + ".webhook_subscriptions"
	var rows pgx.Rows
	var err error
	if target != "" {
		rows, err = tx.Query(ctx, `SELECT webhook_id FROM `+subs+` WHERE webhook_id = $1 AND org_id = $2 AND enabled`, target, e.OrgID)
	} else {
		rows, err = tx.Query(ctx, `SELECT webhook_id FROM `+subs+` WHERE org_id = $1 AND enabled AND $2 = ANY(events) ORDER BY webhook_id`, e.OrgID, src.Event)
	}
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, webhookID := range ids {
		id := domain.DeliveryID(webhookID, e.ID)
		body, err := domain.EncodeWebhookBody(id, src.Event, e.OccurredAt, data)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.webhook_deliveries
			(delivery_id, webhook_id, org_id, event_id, event, payload, created_at, status, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $7) ON CONFLICT DO NOTHING`,
			id, webhookID, e.OrgID, [16]byte(e.ID), src.Event, body, e.OccurredAt); err != nil {
			return err
		}
	}
	return nil
}
