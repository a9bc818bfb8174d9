package fleet

import (
	"context"

	"phonefleet/commands/cqrs"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ReleaseLease gives a device back (DELETE /v1/devices/{deviceId}/lease).
type ReleaseLease struct {
	Auth     domain.Auth
	DeviceID string
	LeaseID  string
}

// ReleaseLeaseHandler handles ReleaseLease.
type ReleaseLeaseHandler struct{ f *Fleet }

// ReleaseLease returns the handler of ReleaseLease.
func (f *Fleet) ReleaseLease() ReleaseLeaseHandler { return ReleaseLeaseHandler{f} }

// Handle ends the caller's lease now. It needs devices:lease. A lease
// asked with resetOnRelease is answered once the device has been reset to
// its baseline (or, when the reset cannot run now, once it is owed: the
// device-resets worker does it). Errors: lease_required, lease_mismatch,
// device_unavailable (not_found).
func (h ReleaseLeaseHandler) Handle(ctx context.Context, cmd ReleaseLease) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h ReleaseLeaseHandler) handle(ctx context.Context, cmd ReleaseLease) error {
	if err := cmd.Auth.Require(domain.ScopeDevicesLease); err != nil {
		return err
	}
	if _, err := h.f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return err
	}
	actor := domain.HolderOf(cmd.Auth)
	now := h.f.now()
	d, c, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		return d.ReleaseLease(now, actor, cmd.LeaseID)
	})
	if err != nil {
		return err
	}
	if d.ResetDue == cmd.LeaseID {
		h.f.resetAfter(ctx, cmd.DeviceID)
	}
	return h.f.waitFor(ctx, c.Last(), projections.DevicesName, projections.LeasesName)
}
