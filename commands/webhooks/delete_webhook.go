package webhooks

import (
	"context"
	"phonefleet/commands/cqrs"

	"phonefleet/domain"
)

// DeleteWebhook removes a subscription; its delivery rows leave the read
// side with it, its events remain.
type DeleteWebhook struct {
	Auth      domain.Auth
	WebhookID string
}

// DeleteWebhookHandler handles DeleteWebhook.
type DeleteWebhookHandler struct {
	Webhooks
}

// Handle answers not_found for a subscription the caller may not see.
func (h DeleteWebhookHandler) Handle(ctx context.Context, cmd DeleteWebhook) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h DeleteWebhookHandler) handle(ctx context.Context, cmd DeleteWebhook) error {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return err
	}
	_, err := h.decide(ctx, cmd.Auth.OrgID, func(set *domain.WebhookSet) ([]domain.Event, error) {
		return set.Delete(cmd.Auth, cmd.WebhookID)
	})
	return err
}
