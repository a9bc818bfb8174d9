package testutil

import (
	"context"
	"time"

	"phonefleet/eventstore"
)

// ReadModels is read-your-writes for a capability under test (it
// satisfies cqrs.ReadModels): each wait is answered by the projection
// runner that serves the named read model (By, else RM), bounded by Within
// (20 seconds when zero), so a test whose read model never catches up
// fails instead of hanging.
type ReadModels struct {
	RM interface {
		WaitFor(ctx context.Context, name string, a eventstore.Appended) error
	}
	// By names the runner serving a read model that RM does not.
	By map[string]interface {
		WaitFor(context.Context, string, eventstore.Appended) error
	}
	Within time.Duration
}

// WaitFor waits for the read model name to apply a.
func (r ReadModels) WaitFor(ctx context.Context, name string, a eventstore.Appended) error {
	within := r.Within
	if within <= 0 {
		within = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if rm, ok := r.By[name]; ok {
		return rm.WaitFor(ctx, name, a)
	}
	return r.RM.WaitFor(ctx, name, a)
}
