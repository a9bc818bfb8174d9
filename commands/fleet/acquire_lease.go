package fleet

import (
	"context"
	"time"

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
	// ResetOnRelease asks for a clean hand-over: when the lease ends
	// (released, expired, or given up by a run it was handed to), the
	// device is reset to its baseline, through its queue, before anyone
	// can lease it again. Recorded on lease.acquired.
	ResetOnRelease bool
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
// invalid_argument (ttl), device_unavailable (not_found; resetting, while
// the reset an earlier lease asked for is owed), and with ResetOnRelease
// capability_unsupported (the backend cannot reset) and the backend
// resolution's errors (device_unavailable offline, …).
func (h AcquireLeaseHandler) Handle(ctx context.Context, cmd AcquireLease) (projections.LeaseView, error) {
	if cmd.ResetOnRelease && cmd.Auth.Has(domain.ScopeDevicesLease) {
		// Whether the device can reset is the backend's to say: ask the
		// instance driving it.
		if d, err := h.f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err == nil {
			if host, remote, err := h.f.runtime.Route(ctx, &d); err != nil {
				return projections.LeaseView{}, err
			} else if remote {
				return forwardDeviceCall[AcquireLease, projections.LeaseView](ctx, h.f, host, OpAcquireLease, d.ID, cmd)
			}
		}
	}
	leaseID := domain.NewID(domain.PrefixLease)
	checked := false
	return h.f.changeLease(ctx, cmd.Auth, cmd.DeviceID, cmd.TTLSeconds,
		func(d *domain.Device, now time.Time, actor domain.Actor, ttl time.Duration) ([]domain.Event, error) {
			if cmd.ResetOnRelease && !checked {
				// Promise a reset only on a device that can do one.
				backend, err := h.f.runtime.Resolve(ctx, d)
				if err != nil {
					return nil, err
				}
				if !backend.Capabilities().Reset {
					return nil, errCannotReset()
				}
				checked = true
			}
			return d.AcquireLeaseWith(now, actor, leaseID, ttl, domain.LeaseOptions{ResetOnRelease: cmd.ResetOnRelease})
		})
}

// changeLease is what acquiring and renewing a lease share: scope
// devices:lease, a valid TTL and a device the caller may see are checked
// first; decide then runs on the device's state through the repository,
// and the lease is answered as the read models show it. Errors:
// permission_denied, invalid_argument (ttl), device_unavailable
// (not_found), and decide's own.
func (f *Fleet) changeLease(ctx context.Context, auth domain.Auth, deviceID string, ttlSeconds int,
	decide func(d *domain.Device, now time.Time, actor domain.Actor, ttl time.Duration) ([]domain.Event, error)) (projections.LeaseView, error) {
	if err := auth.Require(domain.ScopeDevicesLease); err != nil {
		return projections.LeaseView{}, err
	}
	ttl, err := domain.CheckLeaseTTL(ttlSeconds)
	if err != nil {
		return projections.LeaseView{}, err
	}
	if _, err := f.visibleDevice(ctx, auth, deviceID); err != nil {
		return projections.LeaseView{}, err
	}
	actor := domain.HolderOf(auth)
	now := f.now()
	d, c, err := f.devices.Update(ctx, deviceID, func(d *domain.Device) ([]domain.Event, error) {
		return decide(d, now, actor, ttl)
	})
	if err != nil {
		return projections.LeaseView{}, err
	}
	if err := f.waitFor(ctx, c.Last(), projections.DevicesName, projections.LeasesName); err != nil {
		return projections.LeaseView{}, err
	}
	return projections.LeaseViewOf(d.Lease), nil
}
