package commands

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The application's query requests: each names the caller (Auth) and what
// it asks for. The handlers check scopes and tenancy.

// ListDevices lists the devices the caller can see (GET /v1/devices).
type ListDevices struct {
	Auth domain.Auth
	DeviceQuery
}

// GetDevice reads one device (GET /v1/devices/{deviceId}).
type GetDevice struct {
	Auth     domain.Auth
	DeviceID string
}

// GetDriving says who drives a device now (GET /v1/devices/{deviceId}/driving).
type GetDriving struct {
	Auth     domain.Auth
	DeviceID string
}

// ListLeases lists leases (GET /v1/leases).
type ListLeases struct {
	Auth domain.Auth
	LeaseQuery
}

// GetFrame reads a stored frame (GET /v1/frames/{frameId}).
type GetFrame struct {
	Auth    domain.Auth
	FrameID string
	FrameOptions
}

// ListReceipts pages through receipts (GET /v1/receipts).
type ListReceipts struct {
	Auth domain.Auth
	ReceiptQuery
}

// GetReceipt reads one receipt (GET /v1/receipts/{idempotencyKey}).
type GetReceipt struct {
	Auth           domain.Auth
	IdempotencyKey string
}

// ListAPIKeys lists the keys a signed-in person may manage (GET /v1/api-keys).
type ListAPIKeys struct {
	Auth domain.Auth
}

// GetAPIKey reads one key record: a key a signed-in person may manage
// (GET /v1/api-keys/{id}), or with Current the calling key's own record
// (GET /v1/api-keys/current).
type GetAPIKey struct {
	Auth    domain.Auth
	KeyID   string
	Current bool
}

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

// NotAnAPIKey is the answer of the current-key routes to a caller that is
// not an API key.
func NotAnAPIKey() *domain.Error {
	return domain.NotFound("this request was not made with an API key, so there is no current key")
}

type listAPIKeysHandler struct{ r projections.APIKeyReader }

// Handle needs a signed-in session (spec 5.3.4): never an API key.
func (h listAPIKeysHandler) Handle(ctx context.Context, q ListAPIKeys) ([]projections.APIKeyRecord, error) {
	if err := q.Auth.RequireSession("API keys"); err != nil {
		return nil, err
	}
	return h.r.List(ctx, q.Auth)
}

type getAPIKeyHandler struct{ r projections.APIKeyReader }

// Handle reads a key for a signed-in session, or the calling key itself
// (as its organisation's admin would read it). Errors: permission_denied,
// not_found.
func (h getAPIKeyHandler) Handle(ctx context.Context, q GetAPIKey) (projections.APIKeyRecord, error) {
	if q.Current {
		if q.Auth.Kind != domain.PrincipalAPIKey {
			return projections.APIKeyRecord{}, NotAnAPIKey()
		}
		return h.r.Get(ctx, domain.Auth{OrgID: q.Auth.OrgID, Role: domain.RoleAdmin}, q.Auth.APIKeyID)
	}
	if err := q.Auth.RequireSession("API keys"); err != nil {
		return projections.APIKeyRecord{}, err
	}
	return h.r.Get(ctx, q.Auth, q.KeyID)
}

type listWebhooksHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read (spec 4.4: no role gate).
func (h listWebhooksHandler) Handle(ctx context.Context, q ListWebhooks) ([]projections.WebhookView, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return nil, err
	}
	return h.q.List(ctx, q.Auth)
}

type getWebhookHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read; a subscription the caller may not see is
// not_found.
func (h getWebhookHandler) Handle(ctx context.Context, q GetWebhook) (projections.WebhookView, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return projections.WebhookView{}, err
	}
	return h.q.Get(ctx, q.Auth, q.WebhookID)
}

type listDeliveriesHandler struct{ q projections.WebhookQueries }

// Handle needs devices:read; a subscription the caller may not see is
// not_found.
func (h listDeliveriesHandler) Handle(ctx context.Context, q ListDeliveries) (DeliveryPage, error) {
	if err := q.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return DeliveryPage{}, err
	}
	out, next, err := h.q.Deliveries(ctx, q.Auth, q.WebhookID, q.Limit, q.Before)
	return DeliveryPage{Deliveries: out, Next: next}, err
}
