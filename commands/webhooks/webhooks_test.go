package webhooks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// TestWebhookCapHoldsUnderConcurrentCreates races 30 creates for one
// organisation: the per-organisation stream's optimistic concurrency lets
// exactly 20 through, and every refusal names the cap.
func TestWebhookCapHoldsUnderConcurrentCreates(t *testing.T) {
	pool := testutil.SmallPool(t, 8)
	box, err := domain.NewSecretBox(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	h := webhooks.CreateWebhookHandler{Webhooks: webhooks.Webhooks{Store: eventstore.New(pool, eventstore.WithUpcaster(domain.Events)), Box: box}}
	auth := domain.LocalOperator("org_cap")
	const tries = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused, other := 0, 0, []error{}
	for i := 0; i < tries; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
			defer cancel()
			// An IP literal: no name resolution in a test.
			_, err := h.Handle(ctx, webhooks.CreateWebhook{Auth: auth, URL: "https://93.184.216.34/in", Events: []string{domain.WebhookRunEnded}})
			mu.Lock()
			defer mu.Unlock()
			var de *domain.Error
			switch {
			case err == nil:
				created++
			case domain.ErrorCode(err) == domain.CodeInvalidArgument && asError(err, &de) && de.Extra["reason"] == "too_many_webhooks":
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if created != domain.MaxWebhooksPerOrg || refused != tries-domain.MaxWebhooksPerOrg || len(other) > 0 {
		t.Fatalf("got %d created, %d refused by the cap, other errors %v; want exactly %d created", created, refused, other, domain.MaxWebhooksPerOrg)
	}
	evs, err := eventstore.New(pool).Load(testutil.Context(t), domain.WebhookStream("org_cap"), 1)
	if err != nil || len(evs) != domain.MaxWebhooksPerOrg {
		t.Fatalf("got %d subscribed events (%v); want %d", len(evs), err, domain.MaxWebhooksPerOrg)
	}
}

func asError(err error, target **domain.Error) bool {
	de, ok := err.(*domain.Error)
	if ok {
		*target = de
	}
	return ok
}
