package identity

import (
	"context"
	"sync"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
)

// Bindings records and checks which sign-in instance (token issuer) each
// organisation belongs to (spec 5.6.5). The first signed-in request of an
// organisation records the binding (organisation.instance_bound on the
// stream org-binding-<org>) in its own transaction; every later request of
// that organisation must come from the same instance. A binding never
// changes, so a positive answer is cached for the life of the process.
type Bindings struct {
	Store *eventstore.Store
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// BindWait bounds how long recording a binding may wait, which it
	// does only behind a concurrent first request's transaction holding
	// the binding stream; 0 means DefaultBindWait.
	BindWait time.Duration

	mu    sync.RWMutex
	known map[string]string // organisation → issuer
}

func bindingStream(orgID string) string { return "org-binding-" + orgID }

// DefaultBindWait is how long a first request waits for a concurrent one
// recording its organisation's binding before it answers
// tenant_binding_unsettled (Retry-After 1).
const DefaultBindWait = 2 * time.Second

// Check returns nil when orgID is bound to issuer, binding it first if it is
// not bound yet. It answers 403 org_not_served_by_instance when the
// organisation belongs to another instance, 503 tenant_binding_unavailable
// (Retry-After 30) when the binding cannot be read or recorded, and 503
// tenant_binding_unsettled (Retry-After 1) when a concurrent first request
// is recording it and it cannot be read yet.
func (b *Bindings) Check(ctx context.Context, orgID, issuer string) error {
	b.mu.RLock()
	bound, ok := b.known[orgID]
	b.mu.RUnlock()
	if !ok {
		var err error
		if bound, err = b.bind(ctx, orgID, issuer); err != nil {
			return err
		}
	}
	if bound != issuer {
		return domain.Errorf(domain.CodeOrgNotServedByInstance,
			"organisation %s signs in through another instance than this credential's; sign in through that instance", orgID)
	}
	return nil
}

// Bound returns the issuer orgID is bound to, "" when it is not bound.
func (b *Bindings) Bound(ctx context.Context, orgID string) (string, error) {
	b.mu.RLock()
	bound, ok := b.known[orgID]
	b.mu.RUnlock()
	if ok {
		return bound, nil
	}
	return b.read(ctx, orgID)
}

func (b *Bindings) read(ctx context.Context, orgID string) (string, error) {
	bound, _, err := b.repo().Load(ctx, orgID)
	if err != nil || bound.Issuer == "" {
		return "", err
	}
	b.remember(orgID, bound.Issuer)
	return bound.Issuer, nil
}

// bindingAggregate folds an organisation's binding stream: its first
// organisation.instance_bound is the binding for good.
var bindingAggregate = eventstore.Aggregate[domain.OrganisationInstanceBound, domain.Event]{
	Stream: bindingStream,
	Codec:  domain.Events,
	New: func(orgID string) domain.OrganisationInstanceBound {
		return domain.OrganisationInstanceBound{OrgID: orgID}
	},
	Apply: func(s *domain.OrganisationInstanceBound, e domain.Event, _ eventstore.Recorded) {
		if b, ok := e.(domain.OrganisationInstanceBound); ok && s.Issuer == "" {
			*s = b
		}
	},
	OrgID: func(s *domain.OrganisationInstanceBound) string { return s.OrgID },
}

func (b *Bindings) repo() *eventstore.Repository[domain.OrganisationInstanceBound, domain.Event] {
	return eventstore.NewRepository(b.Store, bindingAggregate)
}

func (b *Bindings) remember(orgID, issuer string) {
	b.mu.Lock()
	if b.known == nil {
		b.known = map[string]string{}
	}
	b.known[orgID] = issuer
	b.mu.Unlock()
}

// bind reads the binding, recording issuer when there is none. Of
// concurrent first requests one records it; the others decide again on
// the recorded binding (the repository's retry).
func (b *Bindings) bind(ctx context.Context, orgID, issuer string) (string, error) {
	now := clock.Now()
	if b.Now != nil {
		now = b.Now()
	}
	ctx = eventstore.WithActor(ctx, "system", "identity")
	wait := b.BindWait
	if wait <= 0 {
		wait = DefaultBindWait
	}
	bctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	bound, _, err := b.repo().Update(bctx, orgID, func(s *domain.OrganisationInstanceBound) ([]domain.Event, error) {
		if s.Issuer != "" {
			return nil, nil
		}
		return []domain.Event{domain.OrganisationInstanceBound{OrgID: orgID, Issuer: issuer, BoundAt: now.UTC()}}, nil
	})
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		// The wait ran out while the request still stands: an append
		// waits only behind another transaction writing the stream, a
		// concurrent first request. A plain read does not wait for it: the
		// binding, if that transaction has committed meanwhile; unsettled
		// while it has not; unavailable if even that read fails.
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		switch issuer, rerr := b.read(rctx, orgID); {
		case rerr != nil:
			return "", bindingUnavailable(rerr)
		case issuer != "":
			return issuer, nil
		}
		return "", domain.Errorf(domain.CodeTenantBindingUnsettled,
			"this organisation's sign-in instance is being recorded by a concurrent request; retry in a second").
			WithRetryable(true).Wrap(err)
	}
	if err != nil {
		return "", bindingUnavailable(err)
	}
	b.remember(orgID, bound.Issuer)
	return bound.Issuer, nil
}

func bindingUnavailable(cause error) error {
	return domain.Errorf(domain.CodeTenantBindingUnavailable,
		"this organisation's sign-in instance cannot be checked now; retry in 30 seconds").WithRetryable(true).Wrap(cause)
}
