package keys

import (
	"context"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// SecretHasher turns an API key secret into its stored form
// (identity.Hasher satisfies it).
type SecretHasher interface {
	Hash(secret string) []byte
}

// APIKeyDeps are the dependencies every key command shares.
type APIKeyDeps struct {
	Store *eventstore.Store
	// ReadModels makes each command answer only once the key store has
	// applied its events, so a revoked key is refused from its next
	// request.
	ReadModels cqrs.ReadModels
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
}

func (d APIKeyDeps) now() time.Time {
	if d.Now == nil {
		return clock.Now().UTC()
	}
	return d.Now().UTC()
}

// changeAPIKey runs decide on one key through the repository, then waits
// for the key store. decide returns nil when there is nothing to record.
// A malformed id names a key that does not exist.
func changeAPIKey(ctx context.Context, d APIKeyDeps, keyID string,
	decide func(k domain.APIKey, now time.Time, u *eventstore.Unit) (domain.Event, error)) error {
	if !domain.HasPrefix(keyID, domain.PrefixAPIKey) {
		_, err := decide(domain.APIKey{}, d.now(), &eventstore.Unit{})
		return err
	}
	repo := eventstore.NewRepository(d.Store, apiKeyAggregate)
	_, c, err := repo.UpdateWith(ctx, keyID, func(k *domain.APIKey, u *eventstore.Unit) ([]domain.Event, error) {
		ev, err := decide(*k, d.now(), u)
		if err != nil || ev == nil {
			return nil, err
		}
		return []domain.Event{ev}, nil
	})
	if err != nil {
		return err
	}
	return cqrs.Await(ctx, d.ReadModels, c.Last(), projections.APIKeysName)
}

// Keys is the key capability: what the key commands and queries need.
type Keys struct {
	Deps   APIKeyDeps
	Hasher SecretHasher
	// Grace is how long a rotated key's old secret keeps working.
	Grace  time.Duration
	Reader projections.APIKeyReader
}

// Handlers are the key capability's entry points of the application
// object (/v1/api-keys).
type Handlers struct {
	MintAPIKey   cqrs.Handler[MintAPIKey, MintedAPIKey]
	RotateAPIKey cqrs.Handler[RotateAPIKey, MintedAPIKey]
	RenewAPIKey  cqrs.Handler[RenewAPIKey, cqrs.Done]
	NarrowAPIKey cqrs.Handler[NarrowAPIKey, cqrs.Done]
	RevokeAPIKey cqrs.Handler[RevokeAPIKey, cqrs.Done]
	ListAPIKeys  cqrs.Handler[ListAPIKeys, []domain.APIKeyRecord]
	GetAPIKey    cqrs.Handler[GetAPIKey, domain.APIKeyRecord]
}

// Handlers returns the key capability's entry points, each behind d.
func (k *Keys) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		MintAPIKey:   cqrs.Serve(d, MintAPIKeyHandler{APIKeyDeps: k.Deps, Hasher: k.Hasher}),
		RotateAPIKey: cqrs.Serve(d, RotateAPIKeyHandler{APIKeyDeps: k.Deps, Hasher: k.Hasher, Grace: k.Grace}),
		RenewAPIKey:  cqrs.Serve(d, RenewAPIKeyHandler{APIKeyDeps: k.Deps}),
		NarrowAPIKey: cqrs.Serve(d, NarrowAPIKeyHandler{APIKeyDeps: k.Deps}),
		RevokeAPIKey: cqrs.Serve(d, RevokeAPIKeyHandler{APIKeyDeps: k.Deps}),
		ListAPIKeys:  cqrs.Serve(d, ListAPIKeysHandler{k.Reader}),
		GetAPIKey:    cqrs.Serve(d, GetAPIKeyHandler{k.Reader}),
	}
}

// apiKeyAggregate folds an API key's stream.
var apiKeyAggregate = eventstore.Aggregate[domain.APIKey, domain.Event]{
	Stream: domain.APIKeyStream,
	Codec:  domain.Events,
	New:    func(string) domain.APIKey { return domain.APIKey{} },
	Apply:  func(k *domain.APIKey, e domain.Event, _ eventstore.Recorded) { k.Apply(e) },
	OrgID:  func(k *domain.APIKey) string { return k.OrgID },
}
