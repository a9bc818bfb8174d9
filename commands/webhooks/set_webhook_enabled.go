package webhooks

import (
	"context"
	"phonefleet/commands/cqrs"

	"phonefleet/domain"
)

// SetWebhookEnabled switches a subscription on or off (PATCH enabled).
// Switching it off abandons the deliveries still queued for it.
type SetWebhookEnabled struct {
	Auth      domain.Auth
	WebhookID string
	Enabled   bool
}

// SetWebhookEnabledHandler handles SetWebhookEnabled.
type SetWebhookEnabledHandler struct {
	Webhooks
}

// Handle answers not_found for a subscription the caller may not see, and
// permission_denied when switching on one that only the person it was made
// for may switch on again. Setting the state it already has is a no-op.
func (h SetWebhookEnabledHandler) Handle(ctx context.Context, cmd SetWebhookEnabled) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h SetWebhookEnabledHandler) handle(ctx context.Context, cmd SetWebhookEnabled) error {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return err
	}
	_, err := h.decide(ctx, cmd.Auth.OrgID, func(set *domain.WebhookSet) ([]domain.Event, error) {
		return set.SetEnabled(cmd.Auth, cmd.WebhookID, cmd.Enabled)
	})
	return err
}
