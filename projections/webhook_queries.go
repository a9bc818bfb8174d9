package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// WebhookView is one subscription as the read model holds it.
type WebhookView struct {
	ID     string
	OrgID  string
	URL    string
	Events []string
	// Enabled is false after PATCH enabled false, or when the person an
	// OAuth app made it for left (DisabledReason says which).
	Enabled         bool
	DisabledReason  string
	SecretHint      string
	CreatedAt       time.Time
	SecretRotatedAt *time.Time
}

// DeliveryView is one delivery row (spec 2.6).
type DeliveryView struct {
	ID        string
	WebhookID string
	Event     string
	// Status is pending, delivered or failed (domain.Delivery…).
	Status         string
	Attempts       int
	ResponseStatus *int
	Error          *string
	// Payload is the exact body sent on every attempt.
	Payload       []byte
	CreatedAt     time.Time
	LastAttemptAt *time.Time
	NextAttemptAt *time.Time
	// Abandoned is true when the subscription was switched off while the
	// delivery still waited; it is then failed and never retried.
	Abandoned bool
}

// DeliveryCursor is a place in a webhook's deliveries, newest first: the
// last row of a page.
type DeliveryCursor struct {
	CreatedAt  time.Time
	DeliveryID string
}

// WebhookQueries reads the Webhooks read model through its public views,
// always within the caller's organisation and, for an OAuth app, only the
// subscriptions that app made for the same person. Reads that name one
// subscription answer not_found for a missing one, another organisation's
// and one the caller may not see alike.
type WebhookQueries struct {
	DB eventstore.DB
}

const webhookColumns = `webhook_id, org_id, url, events, enabled, coalesce(disabled_reason, ''), secret_hint, created_at, secret_rotated_at`

// visibleTo is the SQL form of domain.WebhookSubscription.VisibleTo; $1 is
// the organisation, $2 the principal kind, $3 the client id, $4 the person.
const visibleTo = `org_id = $1 AND ($2 <> 'app' OR (created_by_kind = 'app' AND created_by_client_id = $3 AND created_by_user_id = $4))`

func visibilityArgs(a domain.Auth) []any {
	return []any{a.OrgID, string(a.Kind), a.ClientID, a.UserID}
}

func scanWebhook(row pgx.Row) (WebhookView, error) {
	var v WebhookView
	err := row.Scan(&v.ID, &v.OrgID, &v.URL, &v.Events, &v.Enabled, &v.DisabledReason, &v.SecretHint, &v.CreatedAt, &v.SecretRotatedAt)
	return v, err
}

// List returns the subscriptions a may see, oldest first.
func (q WebhookQueries) List(ctx context.Context, a domain.Auth) ([]WebhookView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+webhookColumns+` FROM webhook_subscriptions WHERE `+visibleTo+
		` ORDER BY created_at, webhook_id`, visibilityArgs(a)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookView, error) { return scanWebhook(r) })
}

// Get returns subscription id, or not_found.
func (q WebhookQueries) Get(ctx context.Context, a domain.Auth, id string) (WebhookView, error) {
	v, err := scanWebhook(q.DB.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhook_subscriptions WHERE `+visibleTo+
		` AND webhook_id = $5`, append(visibilityArgs(a), id)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, domain.Errorf(domain.CodeNotFound, "no webhook %s", id)
	}
	return v, err
}

const deliveryColumns = `delivery_id, webhook_id, event, status, attempts, response_status, error, payload, created_at, last_attempt_at, next_attempt_at, abandoned`

func scanDelivery(row pgx.Row) (DeliveryView, error) {
	var d DeliveryView
	err := row.Scan(&d.ID, &d.WebhookID, &d.Event, &d.Status, &d.Attempts, &d.ResponseStatus, &d.Error, &d.Payload,
		&d.CreatedAt, &d.LastAttemptAt, &d.NextAttemptAt, &d.Abandoned)
	return d, err
}

// Deliveries returns up to limit deliveries of subscription webhookID,
// newest first (by the source event's time, then id), strictly after
// before when it is not nil, and the cursor of the next page (nil on the
// last). A subscription a may not see answers not_found.
func (q WebhookQueries) Deliveries(ctx context.Context, a domain.Auth, webhookID string, limit int, before *DeliveryCursor) ([]DeliveryView, *DeliveryCursor, error) {
	if _, err := q.Get(ctx, a, webhookID); err != nil {
		return nil, nil, err
	}
	args := []any{webhookID, limit + 1}
	where := `webhook_id = $1`
	if before != nil {
		where += ` AND (created_at, delivery_id) < ($3, $4)`
		args = append(args, before.CreatedAt, before.DeliveryID)
	}
	rows, err := q.DB.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE `+where+
		` ORDER BY created_at DESC, delivery_id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryView, error) { return scanDelivery(r) })
	if err != nil {
		return nil, nil, err
	}
	var next *DeliveryCursor
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		next = &DeliveryCursor{CreatedAt: last.CreatedAt, DeliveryID: last.ID}
	}
	return out, next, nil
}

// Delivery returns one delivery of a subscription a may see, or not_found.
func (q WebhookQueries) Delivery(ctx context.Context, a domain.Auth, deliveryID string) (DeliveryView, error) {
	d, err := scanDelivery(q.DB.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE delivery_id = $1`, deliveryID))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, domain.Errorf(domain.CodeNotFound, "no delivery %s", deliveryID)
	}
	if err != nil {
		return d, err
	}
	if _, err := q.Get(ctx, a, d.WebhookID); err != nil {
		return DeliveryView{}, domain.Errorf(domain.CodeNotFound, "no delivery %s", deliveryID)
	}
	return d, nil
}
