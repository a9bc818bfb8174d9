package commands

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Webhooks holds what every webhook subscription command needs. Each
// handler embeds it.
type Webhooks struct {
	Store *eventstore.Store
	// Box seals signing secrets under the server key.
	Box *domain.SecretBox
	// Now is the clock events are stamped with; nil means time.Now.
	Now func() time.Time
	// Wait, when not nil, returns once the webhooks read model has applied
	// what a command appended (projections.Runner.WaitFor bound to
	// projections.WebhooksName), so the caller can answer from it.
	Wait func(ctx context.Context, a eventstore.Appended) error
}

func (w Webhooks) now() time.Time {
	if w.Now == nil {
		return time.Now()
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
	if w.Wait == nil {
		return nil
	}
	return w.Wait(ctx, a)
}
