package webhooks

import (
	"context"
	"net"
	"strings"
	"time"

	"phonefleet/domain"
)

// CreateWebhook subscribes an https endpoint to webhook events (spec 4.4).
type CreateWebhook struct {
	Auth   domain.Auth
	URL    string
	Events []string
}

// CreatedWebhook is the new subscription's id and its signing secret,
// returned this once only.
type CreatedWebhook struct {
	WebhookID string
	Secret    string
}

// CreateWebhookHandler handles CreateWebhook.
type CreateWebhookHandler struct {
	Webhooks
	// Addresses decides which addresses a receiver may have.
	Addresses domain.AddressPolicy
	// Resolver resolves the URL's host name; nil means net.DefaultResolver.
	Resolver domain.HostResolver
}

// webhookResolveTimeout bounds the subscribe-time name resolution.
const webhookResolveTimeout = 5 * time.Second

// Handle checks the URL (reasons not_a_url, scheme_not_https,
// has_credentials, private_address, too_long), the event names and the
// per-organisation cap, all as invalid_argument with a reason, then records
// the subscription with a fresh secret sealed under the server key.
func (h CreateWebhookHandler) Handle(ctx context.Context, cmd CreateWebhook) (CreatedWebhook, error) {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return CreatedWebhook{}, err
	}
	u, err := domain.CheckWebhookURL(cmd.URL, h.Addresses)
	if err != nil {
		return CreatedWebhook{}, err
	}
	if _, err := domain.CheckWebhookEvents(cmd.Events); err != nil {
		return CreatedWebhook{}, err
	}
	var r domain.HostResolver = net.DefaultResolver
	if h.Resolver != nil {
		r = h.Resolver
	}
	rctx, cancel := context.WithTimeout(ctx, webhookResolveTimeout)
	err = domain.CheckWebhookHost(rctx, strings.TrimSuffix(u.Hostname(), "."), h.Addresses, r)
	cancel()
	if err != nil {
		return CreatedWebhook{}, err
	}
	id := domain.NewID(domain.PrefixWebhook)
	secret := domain.NewWebhookSecret()
	sealed := h.Box.Seal(id, secret)
	_, err = h.decide(ctx, cmd.Auth.OrgID, func(set *domain.WebhookSet) ([]domain.Event, error) {
		return set.Subscribe(cmd.Auth, id, u.String(), cmd.Events, sealed, domain.SecretHint(secret))
	})
	if err != nil {
		return CreatedWebhook{}, err
	}
	return CreatedWebhook{WebhookID: id, Secret: secret}, nil
}
