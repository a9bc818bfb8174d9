package identity_test

import (
	"context"
	"sync"
	"testing"
	"time"

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
	t.Run("a concurrent first request still recording it", func(t *testing.T) {
		// Another instance's first request has appended the binding in a
		// transaction it has not committed yet.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
			VALUES (gen_random_uuid(), 'org-binding-org_slow', 1, 'organisation.instance_bound', 1, 'org_slow',
			        '{"orgId":"org_slow","issuer":"https://a.example","boundAt":"2026-11-27T00:00:00Z"}', '{}', now())`); err != nil {
			t.Fatal(err)
		}
		waiting := &identity.Bindings{Store: store, BindWait: 300 * time.Millisecond}
		err = waiting.Check(ctx, "org_slow", "https://a.example")
		if r := domain.AsError(err).Retryable; domain.ErrorCode(err) != domain.CodeTenantBindingUnsettled || r == nil || !*r {
			t.Fatalf("got %v; want tenant_binding_unsettled, retryable", err)
		}
		// Once it commits, the same request is served.
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := waiting.Check(ctx, "org_slow", "https://a.example"); err != nil {
			t.Fatalf("after the binding committed: got %v; want served", err)
		}
		if err := waiting.Check(ctx, "org_slow", "https://b.example"); domain.ErrorCode(err) != domain.CodeOrgNotServedByInstance {
			t.Fatalf("another instance after the binding committed: got %v; want org_not_served_by_instance", err)
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
