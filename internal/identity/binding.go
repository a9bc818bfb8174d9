package identity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Bindings records and checks which sign-in instance (token issuer) each
// organisation belongs to (spec 5.6.5). The first signed-in request of an
// organisation records the binding (organisation.instance_bound on the
// stream org-binding-<org>) in its own transaction; every later request of
// that organisation must come from the same instance. A binding never
// changes, so a positive answer is cached for the life of the process.
type Bindings struct {
	Store *eventstore.Store
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.RWMutex
	known map[string]string // organisation → issuer
}

func bindingStream(orgID string) string { return "org-binding-" + orgID }

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
	evs, err := b.Store.Load(ctx, bindingStream(orgID), 1)
	if err != nil || len(evs) == 0 {
		return "", err
	}
	ev, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
	if err != nil {
		return "", err
	}
	bound, ok := ev.(domain.OrganisationInstanceBound)
	if !ok {
		return "", fmt.Errorf("stream %s starts with %s", bindingStream(orgID), evs[0].Type)
	}
	b.remember(orgID, bound.Issuer)
	return bound.Issuer, nil
}

func (b *Bindings) remember(orgID, issuer string) {
	b.mu.Lock()
	if b.known == nil {
		b.known = map[string]string{}
	}
	b.known[orgID] = issuer
	b.mu.Unlock()
}

// bind reads the binding, recording issuer when there is none.
func (b *Bindings) bind(ctx context.Context, orgID, issuer string) (string, error) {
	bound, err := b.read(ctx, orgID)
	if err != nil {
		return "", bindingUnavailable(err)
	}
	if bound != "" {
		return bound, nil
	}
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	name, version, data, err := domain.Events.Encode(domain.OrganisationInstanceBound{OrgID: orgID, Issuer: issuer, BoundAt: now.UTC()})
	if err != nil {
		return "", err
	}
	_, err = b.Store.Append(ctx, bindingStream(orgID), eventstore.NoStream, eventstore.NewEvent{
		Type: name, SchemaVersion: version, OrgID: orgID, Data: data,
		Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "identity"},
	})
	switch {
	case errors.Is(err, eventstore.ErrConflict):
		// Another request recorded it first; its transaction has committed
		// (the unique index made this one wait for it), so it is readable.
		bound, err := b.read(ctx, orgID)
		if err != nil {
			return "", bindingUnavailable(err)
		}
		if bound == "" {
			return "", domain.Errorf(domain.CodeTenantBindingUnsettled,
				"this organisation's sign-in instance is being recorded; retry in a second").WithRetryable(true)
		}
		return bound, nil
	case err != nil:
		return "", bindingUnavailable(err)
	}
	b.remember(orgID, issuer)
	return issuer, nil
}

func bindingUnavailable(cause error) error {
	return domain.Errorf(domain.CodeTenantBindingUnavailable,
		"this organisation's sign-in instance cannot be checked now; retry in 30 seconds").WithRetryable(true).Wrap(cause)
}
