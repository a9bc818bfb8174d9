package commands

import (
	"context"
	"fmt"

	"phonefleet/domain"
)

// TestWebhook queues one test delivery to a subscription: a real run.ended
// delivery (same signature, headers and retries) with data.test true.
type TestWebhook struct {
	Auth      domain.Auth
	RequestID string
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
// see and wrong_state (state "disabled") for one switched off.
func (h TestWebhookHandler) Handle(ctx context.Context, cmd TestWebhook) (string, error) {
	set, _, err := h.loadSet(ctx, cmd.Auth.OrgID)
	if err != nil {
		return "", err
	}
	evs, err := set.RequestTest(cmd.Auth, cmd.WebhookID, domain.NewID(domain.PrefixAgentRun), domain.NewID(domain.PrefixRun))
	if err != nil {
		return "", err
	}
	out, err := encodeWebhookEvents(cmd.Auth.OrgID, webhookMetadata(cmd.Auth, cmd.RequestID), h.now(), evs)
	if err != nil {
		return "", err
	}
	a, err := h.Store.Append(ctx, webhookTestStream(cmd.WebhookID), -1, out...)
	if err != nil {
		return "", fmt.Errorf("test webhook %s: %w", cmd.WebhookID, err)
	}
	if err := h.wait(ctx, a); err != nil {
		return "", err
	}
	return domain.DeliveryID(cmd.WebhookID, out[0].ID), nil
}
