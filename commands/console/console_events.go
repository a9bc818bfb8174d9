package console

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// ConsoleEventConfig is what the console's telemetry needs.
type ConsoleEventConfig struct {
	Store *eventstore.Store
	// Now is the clock; nil means clock.Now. Tests inject one (the
	// per-minute budget).
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the console
	// events read model, so operators read what was sent.
	ReadModels cqrs.ReadModels
}

// ConsoleEvents is the console telemetry capability: a page's page views
// and client errors (POST /v1/console/events), and operators' reading of
// them (GET /v1/console/events). Each handler embeds it.
type ConsoleEvents struct {
	cfg     ConsoleEventConfig
	pool    *pgxpool.Pool
	windows *eventstore.Repository[domain.ConsoleTelemetry, domain.Event]
}

// consoleTelemetryAggregate folds one person's console events of one
// minute. Its id is the stream itself (domain.ConsoleTelemetryStream).
var consoleTelemetryAggregate = eventstore.Aggregate[domain.ConsoleTelemetry, domain.Event]{
	Stream: func(stream string) string { return stream },
	Codec:  domain.Events,
	New:    func(string) domain.ConsoleTelemetry { return domain.ConsoleTelemetry{} },
	Apply:  func(w *domain.ConsoleTelemetry, e domain.Event, _ eventstore.Recorded) { w.Apply(e) },
	OrgID:  func(w *domain.ConsoleTelemetry) string { return w.OrgID },
}

// NewConsoleEvents returns the console telemetry capability.
func NewConsoleEvents(cfg ConsoleEventConfig) *ConsoleEvents {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	return &ConsoleEvents{cfg: cfg, pool: cfg.Store.Pool(), windows: eventstore.NewRepository(cfg.Store, consoleTelemetryAggregate)}
}

func (c *ConsoleEvents) now() time.Time { return c.cfg.Now().UTC().Truncate(time.Microsecond) }

// RecordConsoleEvents records a batch of a console page's telemetry (POST
// /v1/console/events).
type RecordConsoleEvents struct {
	Auth   domain.Auth
	Events []domain.ConsoleEventInput
	// UserAgent is the browser's User-Agent header.
	UserAgent string
}

// RecordedConsoleEvents names the events recorded, in the batch's order.
type RecordedConsoleEvents struct {
	EventIDs []string
}

// RecordConsoleEventsHandler handles RecordConsoleEvents.
type RecordConsoleEventsHandler struct {
	*ConsoleEvents
}

// Handle records the batch on the sender's stream of the current minute
// and answers once operators can read it. It needs a signed-in session (a
// key or an app is permission_denied: the telemetry is the console
// page's); a malformed batch is invalid_argument naming the field; a
// batch past the sender's budget (60 events a minute) is rate_limited
// with retryAfterMs, and nothing of it is recorded.
func (h RecordConsoleEventsHandler) Handle(ctx context.Context, cmd RecordConsoleEvents) (RecordedConsoleEvents, error) {
	if err := cmd.Auth.RequireSession("console telemetry"); err != nil {
		return RecordedConsoleEvents{}, err
	}
	if err := domain.CheckConsoleBatch(cmd.Events); err != nil {
		return RecordedConsoleEvents{}, err
	}
	now := h.now()
	ids := make([]string, len(cmd.Events))
	for i := range ids {
		ids[i] = domain.NewID(domain.PrefixConsoleEvent)
	}
	stream := domain.ConsoleTelemetryStream(cmd.Auth.OrgID, domain.ActorOf(cmd.Auth), domain.ConsoleTelemetryWindow(now))
	_, c, err := h.windows.Update(ctx, stream, func(w *domain.ConsoleTelemetry) ([]domain.Event, error) {
		return w.Record(cmd.Auth, cmd.Events, ids, cmd.UserAgent, now)
	})
	if err != nil {
		return RecordedConsoleEvents{}, err
	}
	if len(c.Appends) > 0 {
		if err := cqrs.Await(ctx, h.cfg.ReadModels, c.Last(), projections.ConsoleEventsName); err != nil {
			return RecordedConsoleEvents{}, err
		}
	}
	return RecordedConsoleEvents{EventIDs: ids}, nil
}

// ListConsoleEvents pages through the organisation's console telemetry,
// newest first (GET /v1/console/events).
type ListConsoleEvents struct {
	Auth domain.Auth
	projections.ConsoleEventQuery
}

// ListConsoleEventsHandler handles ListConsoleEvents.
type ListConsoleEventsHandler struct{ *ConsoleEvents }

// Handle answers ListConsoleEvents. It needs an organisation admin's
// signed-in session (the local operator is one): the telemetry tells what
// each person looked at. A type other than page_view or client_error, and
// a cursor that is not an event id, are invalid_argument.
func (c ListConsoleEventsHandler) Handle(ctx context.Context, q ListConsoleEvents) (projections.ConsoleEventPage, error) {
	if err := q.Auth.RequireSession("console telemetry"); err != nil {
		return projections.ConsoleEventPage{}, err
	}
	if q.Auth.Role != domain.RoleAdmin {
		return projections.ConsoleEventPage{}, domain.Errorf(domain.CodePermissionDenied, "reading the console's telemetry needs an organisation admin")
	}
	switch q.Type {
	case "", domain.ConsolePageView, domain.ConsoleClientError:
	default:
		return projections.ConsoleEventPage{}, domain.Errorf(domain.CodeInvalidArgument, "type must be %s or %s", domain.ConsolePageView, domain.ConsoleClientError).
			With("field", "type")
	}
	if q.Before != "" && !domain.HasPrefix(q.Before, domain.PrefixConsoleEvent) {
		return projections.ConsoleEventPage{}, domain.Errorf(domain.CodeInvalidArgument, "before must be a value returned as nextBefore by this route").
			With("field", "before")
	}
	if q.Limit < 0 {
		return projections.ConsoleEventPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be positive")
	}
	return projections.ListConsoleEvents(ctx, c.pool, q.Auth.OrgID, q.ConsoleEventQuery)
}
