package webhooks

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListWebhooks lists the subscriptions the caller may see (GET /v1/webhooks).
type ListWebhooks struct {
	Auth domain.Auth
}

// GetWebhook reads one subscription (GET /v1/webhooks/{webhookId}).
type GetWebhook struct {
	Auth      domain.Auth
	WebhookID string
}

// ListDeliveries pages through a subscription's deliveries, newest first
// (GET /v1/webhooks/{webhookId}/deliveries).
type ListDeliveries struct {
	Auth      domain.Auth
	WebhookID string
	// Limit is the page size (1 to 100, the surface's default applied).
	Limit int
	// Before is the cursor of the previous page; nil starts at the newest.
	Before *projections.DeliveryCursor
}

// DeliveryPage is one page of deliveries; Next is nil on the last.
type DeliveryPage struct {
	Deliveries []projections.DeliveryView
	Next       *projections.DeliveryCursor
}

// ListWebhooksHandler handles ListWebhooks.
type ListWebhooksHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read (spec 4.4: no role gate).
func (h ListWebhooksHandler) Handle(ctx context.Context, q ListWebhooks) ([]projections.WebhookView, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return nil, err
	}
	return h.q.List(ctx, q.Auth)
}

// GetWebhookHandler handles GetWebhook.
type GetWebhookHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read; a subscription the caller may not see is
// not_found.
func (h GetWebhookHandler) Handle(ctx context.Context, q GetWebhook) (projections.WebhookView, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return projections.WebhookView{}, err
	}
	return h.q.Get(ctx, q.Auth, q.WebhookID)
}

// ListDeliveriesHandler handles ListDeliveries.
type ListDeliveriesHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read; a subscription the caller may not see is
// not_found.
func (h ListDeliveriesHandler) Handle(ctx context.Context, q ListDeliveries) (DeliveryPage, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return DeliveryPage{}, err
	}
	out, next, err := h.q.Deliveries(ctx, q.Auth, q.WebhookID, q.Limit, q.Before)
	return DeliveryPage{Deliveries: out, Next: next}, err
}
