package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// ProjectionWaiter is what key commands need of the projection runner:
// read-your-writes on the key store (projections.Runner satisfies it).
type ProjectionWaiter interface {
	WaitFor(ctx context.Context, name string, a eventstore.Appended) error
}

// SecretHasher turns an API key secret into its stored form
// (identity.Hasher satisfies it).
type SecretHasher interface {
	Hash(secret string) []byte
}

// APIKeyDeps are the dependencies every key command shares.
type APIKeyDeps struct {
	Store *eventstore.Store
	// Wait makes each command answer only once the key store has applied
	// its events, so a revoked key is refused from its next request.
	Wait ProjectionWaiter
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (d APIKeyDeps) now() time.Time {
	if d.Now == nil {
		return time.Now().UTC()
	}
	return d.Now().UTC()
}

// apiKeyConflictRetries bounds load–decide–append rounds lost to concurrent
// changes of the same key.
const apiKeyConflictRetries = 3

// loadAPIKey builds a key's state from its stream. A malformed id, or one
// whose stream is empty, gives a key that does not exist.
func loadAPIKey(ctx context.Context, store *eventstore.Store, keyID string) (domain.APIKey, error) {
	var k domain.APIKey
	if !domain.HasPrefix(keyID, domain.PrefixAPIKey) {
		return k, nil
	}
	evs, err := store.Load(ctx, domain.APIKeyStream(keyID), 1)
	if err != nil {
		return k, err
	}
	for _, e := range evs {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return k, fmt.Errorf("api key %s: %w", keyID, err)
		}
		k.Apply(ev)
	}
	return k, nil
}

// changeAPIKey runs load–decide–append for one key, retrying when another
// change of the same key won the race, then waits for the key store.
// decide returns nil when there is nothing to record.
func changeAPIKey(ctx context.Context, d APIKeyDeps, a domain.Auth, requestID, keyID string,
	decide func(k domain.APIKey, now time.Time) (domain.Event, error)) error {
	for attempt := 0; ; attempt++ {
		k, err := loadAPIKey(ctx, d.Store, keyID)
		if err != nil {
			return err
		}
		ev, err := decide(k, d.now())
		if err != nil || ev == nil {
			return err
		}
		_, err = appendKeyEvent(ctx, d, a, requestID, k.ID, k.OrgID, k.Version, ev)
		if errors.Is(err, eventstore.ErrConflict) && attempt < apiKeyConflictRetries {
			continue
		}
		return err
	}
}

// appendKeyEvent appends ev to the key's stream at the expected version and
// waits until the key store has applied it.
func appendKeyEvent(ctx context.Context, d APIKeyDeps, a domain.Auth, requestID, keyID, orgID string,
	expected int64, ev domain.Event) (eventstore.Appended, error) {
	name, version, data, err := domain.Events.Encode(ev)
	if err != nil {
		return eventstore.Appended{}, err
	}
	kind, id := a.Actor()
	appended, err := d.Store.Append(ctx, domain.APIKeyStream(keyID), expected, eventstore.NewEvent{
		Type: name, SchemaVersion: version, OrgID: orgID, Data: data,
		Metadata: eventstore.Metadata{ActorKind: kind, ActorID: id, RequestID: requestID},
	})
	if err != nil {
		return appended, err
	}
	return appended, d.Wait.WaitFor(ctx, projections.APIKeysName, appended)
}
