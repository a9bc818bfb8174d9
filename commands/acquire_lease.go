package commands

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// AcquireLease asks for exclusive use of a device (POST
// /v1/devices/{deviceId}/lease).
type AcquireLease struct {
	Auth     domain.Auth
	DeviceID string
	// TTLSeconds is the lease's time-to-live; 0 means the default.
	TTLSeconds int
}

// AcquireLeaseHandler handles AcquireLease.
type AcquireLeaseHandler struct{ f *Fleet }

// AcquireLease returns the handler of AcquireLease.
func (f *Fleet) AcquireLease() AcquireLeaseHandler { return AcquireLeaseHandler{f} }

// Handle grants the lease, with a fencing token larger than any the device
// issued before. It needs devices:lease. Of any number of concurrent
// callers exactly one wins (the append at the stream's version decides);
// the others, and any caller while the device is leased, get
// device_unavailable with reason already_leased. Other errors:
// invalid_argument (ttl), device_unavailable (not_found).
func (h AcquireLeaseHandler) Handle(ctx context.Context, cmd AcquireLease) (projections.LeaseView, error) {
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
	leaseID := domain.NewID(domain.PrefixLease)
	now := h.f.now()
	d, c, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		return d.AcquireLease(now, actor, leaseID, ttl)
	})
	if err != nil {
		return projections.LeaseView{}, err
	}
	if err := h.f.waitFor(ctx, c.Last(), "devices", "leases"); err != nil {
		return projections.LeaseView{}, err
	}
	return toLeaseView(d.Lease), nil
}

func toLeaseView(l *domain.Lease) projections.LeaseView {
	return projections.LeaseView{LeaseID: l.ID, DeviceID: l.DeviceID, Holder: l.Holder.ForReceipt(),
		FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}
