package commands

import (
	"context"
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

// changeAPIKey runs decide on one key through the repository, then waits
// for the key store. decide returns nil when there is nothing to record.
// A malformed id names a key that does not exist.
func changeAPIKey(ctx context.Context, d APIKeyDeps, keyID string,
	decide func(k domain.APIKey, now time.Time) (domain.Event, error)) error {
	if !domain.HasPrefix(keyID, domain.PrefixAPIKey) {
		_, err := decide(domain.APIKey{}, d.now())
		return err
	}
	repo := eventstore.NewRepository(d.Store, apiKeyAggregate)
	_, c, err := repo.Update(ctx, keyID, func(k *domain.APIKey) ([]domain.Event, error) {
		ev, err := decide(*k, d.now())
		if err != nil || ev == nil {
			return nil, err
		}
		return []domain.Event{ev}, nil
	})
	if err != nil || len(c.Appends) == 0 {
		return err
	}
	return d.Wait.WaitFor(ctx, projections.APIKeysName, c.Last())
}
