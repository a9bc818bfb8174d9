package fleet

import (
	"context"

	"phonefleet/domain"
)

// ExpireLease records the expiry of a device's lease that has run out (the
// lease expiry worker sends it).
type ExpireLease struct {
	DeviceID string
}

// ExpireLeaseHandler handles ExpireLease.
type ExpireLeaseHandler struct{ f *Fleet }

// ExpireLease returns the handler of ExpireLease.
func (f *Fleet) ExpireLease() ExpireLeaseHandler { return ExpireLeaseHandler{f} }

// Handle appends lease.expired if the device's lease has run out by now,
// and reports whether it did. A lease renewed, released or replaced in the
// meantime is left alone. A lease asked with resetOnRelease makes the
// device's reset due, which is then performed (ResetDevice) before it
// answers.
func (h ExpireLeaseHandler) Handle(ctx context.Context, cmd ExpireLease) (bool, error) {
	now := h.f.now()
	d, c, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		if !d.Registered() {
			return nil, nil
		}
		return d.ExpireLease(now), nil
	})
	expired := len(c.Appends) > 0
	if err == nil && expired && d.ResetDue != "" {
		h.f.resetAfter(ctx, cmd.DeviceID)
	}
	return expired, err
}
