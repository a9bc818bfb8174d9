package identity_test

import (
	"context"
	"sync"
	"testing"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/testutil"
)

func TestBindings(t *testing.T) {
	pool := testutil.SmallPool(t, 8)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	ctx := testutil.Context(t)
	b := &identity.Bindings{Store: store}

	t.Run("concurrent first requests agree", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Separate caches: separate instances.
				errs[i] = (&identity.Bindings{Store: store}).Check(ctx, "org_new", "https://a.example")
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		evs, _ := store.Load(ctx, "org-binding-org_new", 1)
		if len(evs) != 1 {
			t.Fatalf("got %d binding events; want 1", len(evs))
		}
	})
	t.Run("another instance is refused", func(t *testing.T) {
		if err := b.Check(ctx, "org_new", "https://b.example"); domain.ErrorCode(err) != domain.CodeOrgNotServedByInstance {
			t.Fatalf("got %v; want org_not_served_by_instance", err)
		}
	})
	t.Run("store down", func(t *testing.T) {
		down, cancel := context.WithCancel(ctx)
		cancel()
		err := (&identity.Bindings{Store: store}).Check(down, "org_other", "https://a.example")
		if domain.ErrorCode(err) != domain.CodeTenantBindingUnavailable {
			t.Fatalf("got %v; want tenant_binding_unavailable", err)
		}
	})
}
