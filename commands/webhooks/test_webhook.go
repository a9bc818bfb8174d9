package webhooks

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// TestWebhook queues one test delivery to a subscription: a real run.ended
// delivery (same signature, headers and retries) with data.test true.
type TestWebhook struct {
	Auth      domain.Auth
	WebhookID string
}

// TestWebhookHandler handles TestWebhook.
type TestWebhookHandler struct {
	Webhooks
}

// webhookTestStream holds the test requests of one subscription. They stay
// out of the organisation's stream so that tests, however many, never slow
// the loading of its subscriptions.
func webhookTestStream(webhookID string) string { return "webhook-tests-" + webhookID }

// Handle returns the id of the queued delivery, derived from the test
// event's id. It answers not_found for a subscription the caller may not
// see and invalid_argument (state "disabled") for one switched off.
func (h TestWebhookHandler) Handle(ctx context.Context, cmd TestWebhook) (string, error) {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return "", err
	}
	set, err := h.loadSet(ctx, cmd.Auth.OrgID)
	if err != nil {
		return "", err
	}
	evs, err := set.RequestTest(cmd.Auth, cmd.WebhookID, domain.NewID(domain.PrefixAgentRun), domain.NewID(domain.PrefixRun))
	if err != nil {
		return "", err
	}
	out, err := eventstore.Encode(domain.Events, cmd.Auth.OrgID, evs...)
	if err != nil {
		return "", err
	}
	// The delivery id derives from the event id, so it is drawn here.
	for i := range out {
		out[i].ID, out[i].OccurredAt = uuid.Must(uuid.NewV7()), h.now()
	}
	a, err := h.Store.Append(ctx, webhookTestStream(cmd.WebhookID), eventstore.AnyVersion, out...)
	if err != nil {
		return "", fmt.Errorf("test webhook %s: %w", cmd.WebhookID, err)
	}
	if err := h.wait(ctx, a); err != nil {
		return "", err
	}
	return domain.DeliveryID(cmd.WebhookID, out[0].ID), nil
}
