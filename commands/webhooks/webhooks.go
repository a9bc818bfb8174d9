package webhooks

import (
	"context"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Webhooks holds what every webhook subscription command needs. Each
// handler embeds it.
type Webhooks struct {
	Store *eventstore.Store
	// Box seals signing secrets under the server key.
	Box *domain.SecretBox
	// Now is the clock events are stamped with; nil means clock.Now.
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the webhooks
	// read model, so a command's caller can answer from it.
	ReadModels cqrs.ReadModels
}

func (w Webhooks) now() time.Time {
	if w.Now == nil {
		return clock.Now()
	}
	return w.Now()
}

// loadSet returns orgID's subscriptions.
func (w Webhooks) loadSet(ctx context.Context, orgID string) (*domain.WebhookSet, error) {
	set, _, err := w.repo().Load(ctx, orgID)
	return set, err
}

func (w Webhooks) repo() *eventstore.Repository[*domain.WebhookSet, domain.Event] {
	r := eventstore.NewRepository(w.Store, webhookAggregate)
	r.Now = w.now
	return r
}

// decide runs fn on the organisation's subscriptions through the
// repository and returns what it appended (zero when fn decided nothing)
// after the read model has applied it.
func (w Webhooks) decide(ctx context.Context, orgID string, fn func(*domain.WebhookSet) ([]domain.Event, error)) (eventstore.Appended, error) {
	_, c, err := w.repo().Update(ctx, orgID, func(s **domain.WebhookSet) ([]domain.Event, error) { return fn(*s) })
	if err != nil || len(c.Appends) == 0 {
		return eventstore.Appended{}, err
	}
	return c.Last(), w.wait(ctx, c.Last())
}

func (w Webhooks) wait(ctx context.Context, a eventstore.Appended) error {
	return cqrs.Await(ctx, w.ReadModels, a, projections.WebhooksName)
}

// Capability is the webhook capability: what the subscription
// commands, the delivery recording and the webhook queries need.
type Capability struct {
	Webhooks
	// Create checks addresses with its policy and resolver.
	Create  CreateWebhookHandler
	Queries projections.WebhookQueries
}

// Handlers are the webhook capability's entry points of the
// application object (/v1/webhooks, and the dispatcher's records).
type Handlers struct {
	CreateWebhook                 cqrs.Handler[CreateWebhook, CreatedWebhook]
	SetWebhookEnabled             cqrs.Handler[SetWebhookEnabled, cqrs.Done]
	RotateWebhookSecret           cqrs.Handler[RotateWebhookSecret, string]
	DeleteWebhook                 cqrs.Handler[DeleteWebhook, cqrs.Done]
	TestWebhook                   cqrs.Handler[TestWebhook, string]
	DisableDepartedPersonWebhooks cqrs.Handler[DisableDepartedPersonWebhooks, int]
	// RecordWebhookAttempt is sent by the webhook dispatcher.
	RecordWebhookAttempt cqrs.Handler[RecordWebhookAttempt, RecordedWebhookAttempt]

	ListWebhooks   cqrs.Handler[ListWebhooks, []projections.WebhookView]
	GetWebhook     cqrs.Handler[GetWebhook, projections.WebhookView]
	ListDeliveries cqrs.Handler[ListDeliveries, DeliveryPage]
}

// Handlers returns the webhook capability's entry points, each behind d.
func (w *Capability) Handlers(d cqrs.Decorator) Handlers {
	create := w.Create
	create.Webhooks = w.Webhooks
	return Handlers{
		CreateWebhook:                 cqrs.Serve(d, create),
		SetWebhookEnabled:             cqrs.Serve(d, SetWebhookEnabledHandler{w.Webhooks}),
		RotateWebhookSecret:           cqrs.Serve(d, RotateWebhookSecretHandler{w.Webhooks}),
		DeleteWebhook:                 cqrs.Serve(d, DeleteWebhookHandler{w.Webhooks}),
		TestWebhook:                   cqrs.Serve(d, TestWebhookHandler{w.Webhooks}),
		DisableDepartedPersonWebhooks: cqrs.Serve(d, DisableDepartedPersonWebhooksHandler{w.Webhooks}),
		RecordWebhookAttempt:          cqrs.Serve(d, RecordWebhookAttemptHandler{Store: w.Store}),
		ListWebhooks:                  cqrs.Serve(d, ListWebhooksHandler{w.Queries}),
		GetWebhook:                    cqrs.Serve(d, GetWebhookHandler{w.Queries}),
		ListDeliveries:                cqrs.Serve(d, ListDeliveriesHandler{w.Queries}),
	}
}

// webhookAggregate folds an organisation's webhook subscriptions (one
// stream per organisation, keyed by its id).
var webhookAggregate = eventstore.Aggregate[*domain.WebhookSet, domain.Event]{
	Stream: domain.WebhookStream,
	Codec:  domain.Events,
	New:    domain.NewWebhookSet,
	Apply:  func(s **domain.WebhookSet, e domain.Event, _ eventstore.Recorded) { (*s).Apply(e) },
	OrgID:  func(s **domain.WebhookSet) string { return (*s).OrgID },
}
