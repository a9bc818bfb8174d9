package fleet

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// RenewLease extends the caller's lease (PATCH /v1/devices/{deviceId}/lease).
type RenewLease struct {
	Auth       domain.Auth
	DeviceID   string
	LeaseID    string
	TTLSeconds int
}

// RenewLeaseHandler handles RenewLease.
type RenewLeaseHandler struct{ f *Fleet }

// RenewLease returns the handler of RenewLease.
func (f *Fleet) RenewLease() RenewLeaseHandler { return RenewLeaseHandler{f} }

// Handle sets the lease to expire TTL from now. It needs devices:lease.
// Errors: lease_required (no lease id), lease_mismatch (not the current
// lease, expired, or held by another actor), invalid_argument,
// device_unavailable (not_found).
func (h RenewLeaseHandler) Handle(ctx context.Context, cmd RenewLease) (projections.LeaseView, error) {
	return h.f.changeLease(ctx, cmd.Auth, cmd.DeviceID, cmd.TTLSeconds,
		func(d *domain.Device, now time.Time, actor domain.Actor, ttl time.Duration) ([]domain.Event, error) {
			return d.RenewLease(now, actor, cmd.LeaseID, ttl)
		})
}
