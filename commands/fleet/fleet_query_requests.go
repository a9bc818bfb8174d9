package fleet

import (
	"phonefleet/domain"
)

// The fleet's query requests: each names the caller (Auth) and what it
// asks for. The handlers check scopes and tenancy.

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
