// Package checkpoints is the capability of signed receipt checkpoints: the
// service's Ed25519 signing keys (generated on first start, stored sealed
// under the server key, rotated by the operator, published with their
// validity) and the checkpoints they sign of each organisation's receipt
// chain (package receiptchain defines both formats).
package checkpoints

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
	"phonefleet/receiptchain"
)

// Checkpoints holds what every checkpoint command and query needs.
type Checkpoints struct {
	Store *eventstore.Store
	Pool  *pgxpool.Pool
	// Box seals the signing keys' private halves under the server key.
	Box *domain.SecretBox
	// Policy says when a chain is signed.
	Policy domain.CheckpointPolicy
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// ReadModels gives read-your-writes on the checkpoints read model.
	ReadModels cqrs.ReadModels
}

func (c *Checkpoints) now() time.Time {
	if c.Now == nil {
		return clock.Now()
	}
	return c.Now()
}

func (c *Checkpoints) keys() *eventstore.Repository[domain.SigningKeys, domain.Event] {
	r := eventstore.NewRepository(c.Store, keysAggregate)
	r.Now = c.now
	return r
}

func (c *Checkpoints) chains() *eventstore.Repository[domain.CheckpointChain, domain.Event] {
	r := eventstore.NewRepository(c.Store, chainAggregate)
	r.Now = c.now
	return r
}

func (c *Checkpoints) wait(ctx context.Context, committed eventstore.Committed) error {
	if len(committed.Appends) == 0 {
		return nil
	}
	return cqrs.Await(ctx, c.ReadModels, committed.Last(), projections.ReceiptCheckpointsName)
}

// Handlers are the capability's entry points of the application object.
type Handlers struct {
	// EnsureSigningKey is sent once at start.
	EnsureSigningKey cqrs.Handler[EnsureSigningKey, receiptchain.PublishedKey]
	// RotateSigningKey is the operator's (phonefleet receipts rotate-key).
	RotateSigningKey cqrs.Handler[RotateSigningKey, receiptchain.PublishedKey]
	// SignCheckpoints is sent by the checkpoint worker.
	SignCheckpoints cqrs.Handler[SignCheckpoints, int]

	ListSigningKeys cqrs.Handler[ListSigningKeys, receiptchain.KeySet]
	ListCheckpoints cqrs.Handler[ListCheckpoints, CheckpointPage]
}

// Handlers returns the capability's entry points, each behind d.
func (c *Checkpoints) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		EnsureSigningKey: cqrs.Serve(d, EnsureSigningKeyHandler{c}),
		RotateSigningKey: cqrs.Serve(d, RotateSigningKeyHandler{c}),
		SignCheckpoints:  cqrs.Serve(d, SignCheckpointsHandler{c}),
		ListSigningKeys:  cqrs.Serve(d, ListSigningKeysHandler{c}),
		ListCheckpoints:  cqrs.Serve(d, ListCheckpointsHandler{c}),
	}
}

// keysAggregate folds the service's one stream of signing keys (the id is
// ignored).
var keysAggregate = eventstore.Aggregate[domain.SigningKeys, domain.Event]{
	Stream: func(string) string { return domain.ReceiptSigningKeysStream },
	Codec:  domain.Events,
	New:    func(string) domain.SigningKeys { return domain.SigningKeys{} },
	Apply:  func(s *domain.SigningKeys, e domain.Event, _ eventstore.Recorded) { s.Apply(e) },
	OrgID:  func(*domain.SigningKeys) string { return "" },
}

// chainAggregate folds an organisation's checkpoints (keyed by its id).
var chainAggregate = eventstore.Aggregate[domain.CheckpointChain, domain.Event]{
	Stream: domain.ReceiptCheckpointStream,
	Codec:  domain.Events,
	New:    func(org string) domain.CheckpointChain { return domain.CheckpointChain{OrgID: org} },
	Apply:  func(s *domain.CheckpointChain, e domain.Event, _ eventstore.Recorded) { s.Apply(e) },
	OrgID:  func(s *domain.CheckpointChain) string { return s.OrgID },
}
