package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// ConsoleEvents is the read model of the console's own telemetry (GET
// /v1/console/events): one row per page view or client error a console
// page sent, for the organisation's operators. It consumes
// console.event_recorded and emits nothing.
type ConsoleEvents struct{}

// ConsoleEventsName is the projection's stable name.
const ConsoleEventsName = "console_events"

// Name implements Projection.
func (ConsoleEvents) Name() string { return ConsoleEventsName }

// Tables implements Projection.
func (ConsoleEvents) Tables() []string { return []string{"console_events"} }

// EventTypes implements Selective.
func (ConsoleEvents) EventTypes() []string { return []string{"console.%"} }

// Setup implements Projection. Event ids are time-ordered (UUIDv7), so
// newest first is descending id order, and the id is the page cursor.
func (ConsoleEvents) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.console_events (
		event_id    text PRIMARY KEY,
		org_id      text NOT NULL,
		type        text NOT NULL,
		page        text NOT NULL,
		message     text,
		user_agent  text,
		actor_kind  text NOT NULL,
		actor_id    text NOT NULL,
		client_at   timestamptz,
		received_at timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.console_events (org_id, event_id DESC);
	CREATE INDEX ON `+schema+`.console_events (org_id, type, event_id DESC);`)
	return err
}

var consoleEventTypes = typeSet(nameOf(domain.ConsoleEventRecorded{}))

// Apply implements Projection.
func (ConsoleEvents) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	table := schema + `.console_events`
	return applyBatch(ctx, tx, events, consoleEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		if r, ok := ev.(domain.ConsoleEventRecorded); ok {
			b.Queue(`INSERT INTO `+table+` (event_id, org_id, type, page, message, user_agent, actor_kind, actor_id, client_at, received_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING`,
				r.EventID, e.OrgID, r.Type, r.Page, nullString(r.Message), nullString(r.UserAgent), r.By.Kind, r.By.ID, r.ClientAt, r.ReceivedAt)
		}
		return nil
	})
}

// ConsoleEventView is one telemetry event as operators read it.
type ConsoleEventView struct {
	EventID   string
	Type      string
	Page      string
	Message   string
	UserAgent string
	// By is the person whose page sent it.
	By         domain.Actor
	ClientAt   *time.Time
	ReceivedAt time.Time
}

// ConsoleEventQuery pages an organisation's console events, newest first.
type ConsoleEventQuery struct {
	// Type keeps only events of this type (empty: every type).
	Type string
	// Before is the cursor: events older than this event id.
	Before string
	Limit  int
}

// ConsoleEventPage is one page of console events; NextBefore is empty on
// the last.
type ConsoleEventPage struct {
	Events     []ConsoleEventView
	NextBefore string
}

// ListConsoleEvents returns one page of orgID's console events.
func ListConsoleEvents(ctx context.Context, pool *pgxpool.Pool, orgID string, q ConsoleEventQuery) (ConsoleEventPage, error) {
	limit := ClampLimit(q.Limit)
	rows, err := pool.Query(ctx, `SELECT event_id, type, page, coalesce(message, ''), coalesce(user_agent, ''), actor_kind, actor_id,
			client_at, received_at
		FROM public.console_events
		WHERE org_id = $1 AND ($2 = '' OR type = $2) AND ($3 = '' OR event_id < $3)
		ORDER BY event_id DESC LIMIT $4`, orgID, q.Type, q.Before, limit+1)
	if err != nil {
		return ConsoleEventPage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ConsoleEventView, error) {
		var v ConsoleEventView
		err := r.Scan(&v.EventID, &v.Type, &v.Page, &v.Message, &v.UserAgent, &v.By.Kind, &v.By.ID, &v.ClientAt, &v.ReceivedAt)
		return v, err
	})
	if err != nil {
		return ConsoleEventPage{}, err
	}
	page := ConsoleEventPage{Events: out}
	if len(out) > limit {
		page.Events = out[:limit]
		page.NextBefore = out[limit-1].EventID
	}
	return page, nil
}
