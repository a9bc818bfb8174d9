package webhooks

import (
	"context"

	"phonefleet/domain"
)

// RotateWebhookSecret gives a subscription a new signing secret; the old
// one stops signing at once, with no overlap.
type RotateWebhookSecret struct {
	Auth      domain.Auth
	WebhookID string
}

// RotateWebhookSecretHandler handles RotateWebhookSecret.
type RotateWebhookSecretHandler struct {
	Webhooks
}

// Handle returns the new secret (shown this once), or not_found.
func (h RotateWebhookSecretHandler) Handle(ctx context.Context, cmd RotateWebhookSecret) (string, error) {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return "", err
	}
	secret := domain.NewWebhookSecret()
	sealed := h.Box.Seal(cmd.WebhookID, secret)
	_, err := h.decide(ctx, cmd.Auth.OrgID, func(set *domain.WebhookSet) ([]domain.Event, error) {
		return set.Rotate(cmd.Auth, cmd.WebhookID, sealed, domain.SecretHint(secret))
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}
