package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

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
	// projections.WebhooksProjection), so the caller can answer from it.
	Wait func(ctx context.Context, a eventstore.Appended) error
}

func (w Webhooks) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// maxWebhookDecideAttempts bounds retries of a decision that lost an
// optimistic-concurrency race on the organisation's stream. Webhook changes
// are rare; the bound only stops a pathological storm.
const maxWebhookDecideAttempts = 50

// loadSet returns orgID's subscriptions and the stream's version.
func (w Webhooks) loadSet(ctx context.Context, orgID string) (*domain.WebhookSet, int64, error) {
	evs, err := w.Store.Load(ctx, domain.WebhookStream(orgID), 1)
	if err != nil {
		return nil, 0, err
	}
	set := domain.NewWebhookSet(orgID)
	var version int64
	for _, e := range evs {
		de, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return nil, 0, fmt.Errorf("webhooks of %s: %w", orgID, err)
		}
		set.Apply(de)
		version = e.StreamVersion
	}
	return set, version, nil
}

// webhookMetadata records who asked.
func webhookMetadata(a domain.Auth, requestID string) eventstore.Metadata {
	kind, id := a.Actor()
	return eventstore.Metadata{ActorKind: kind, ActorID: id, RequestID: requestID}
}

// encodeWebhookEvents turns domain events into events to append, stamped at now.
func encodeWebhookEvents(orgID string, meta eventstore.Metadata, now time.Time, evs []domain.Event) ([]eventstore.NewEvent, error) {
	out := make([]eventstore.NewEvent, len(evs))
	for i, e := range evs {
		name, version, data, err := domain.Events.Encode(e)
		if err != nil {
			return nil, err
		}
		out[i] = eventstore.NewEvent{ID: uuid.Must(uuid.NewV7()), Type: name, SchemaVersion: version, OrgID: orgID,
			Data: data, Metadata: meta, OccurredAt: now}
	}
	return out, nil
}

// decide loads the organisation's subscriptions, lets fn decide, and
// appends what it decided at the version it saw, deciding again after a
// lost race. It returns what was appended (zero when fn decided nothing)
// after the read model has applied it.
func (w Webhooks) decide(ctx context.Context, orgID string, meta eventstore.Metadata, fn func(*domain.WebhookSet) ([]domain.Event, error)) (eventstore.Appended, error) {
	for attempt := 1; ; attempt++ {
		set, version, err := w.loadSet(ctx, orgID)
		if err != nil {
			return eventstore.Appended{}, err
		}
		evs, err := fn(set)
		if err != nil || len(evs) == 0 {
			return eventstore.Appended{}, err
		}
		out, err := encodeWebhookEvents(orgID, meta, w.now(), evs)
		if err != nil {
			return eventstore.Appended{}, err
		}
		a, err := w.Store.Append(ctx, domain.WebhookStream(orgID), version, out...)
		if errors.Is(err, eventstore.ErrConflict) && attempt < maxWebhookDecideAttempts {
			// Another change of this organisation's webhooks won; decide
			// again on the new state after a short, jittered pause.
			select {
			case <-ctx.Done():
				return eventstore.Appended{}, ctx.Err()
			case <-time.After(time.Duration(rand.Int64N(int64(attempt)*int64(2*time.Millisecond)) + 1)):
			}
			continue
		}
		if err != nil {
			return eventstore.Appended{}, err
		}
		return a, w.wait(ctx, a)
	}
}

func (w Webhooks) wait(ctx context.Context, a eventstore.Appended) error {
	if w.Wait == nil {
		return nil
	}
	return w.Wait(ctx, a)
}
