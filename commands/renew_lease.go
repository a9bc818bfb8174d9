package commands

import (
	"context"

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
	if err := cmd.Auth.Require(domain.ScopeDevicesLease); err != nil {
		return projections.LeaseView{}, err
	}
	ttl, err := domain.CheckLeaseTTL(cmd.TTLSeconds)
	if err != nil {
		return projections.LeaseView{}, err
	}
	if _, err := h.f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return projections.LeaseView{}, err
	}
	actor := domain.ActorOf(cmd.Auth)
	now := h.f.now()
	d, c, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		return d.RenewLease(now, actor, cmd.LeaseID, ttl)
	})
	if err != nil {
		return projections.LeaseView{}, err
	}
	if err := h.f.waitFor(ctx, c.Last(), "devices", "leases"); err != nil {
		return projections.LeaseView{}, err
	}
	return toLeaseView(d.Lease), nil
}
