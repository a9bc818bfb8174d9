package fleet

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// SetNetworkProxy puts a device behind a network proxy, or takes it off
// (p nil), through the device's queue, so it never races an action; a sim
// phone's changed state is saved with it. It is a system command: the
// capability that sends it (managed proxies) checked the caller. Errors:
// device_unavailable (not registered, or hosted by another process),
// capability_unsupported (the backend has no network proxy setting), the
// backend's errors, and the database's.
func (f *Fleet) SetNetworkProxy(ctx context.Context, deviceID string, p *domain.NetworkProxy) error {
	d, _, err := f.devices.Load(ctx, deviceID)
	if err != nil {
		return err
	}
	if !d.Registered() {
		return domain.Errorf(domain.CodeDeviceUnavailable, "device %s is not registered", deviceID).With("reason", domain.ReasonNotFound)
	}
	if _, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return err
	} else if remote {
		return domain.Errorf(domain.CodeDeviceUnavailable, "device %s is hosted by another instance; its network proxy is set there", deviceID).
			With("reason", domain.ReasonOffline).WithRetryable(true)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return err
	}
	cfg, ok := backend.(domain.NetworkProxyConfigurer)
	if !ok {
		return domain.Errorf(domain.CodeCapabilityUnsupported, "this device has no network proxy setting").With("capability", "networkProxy")
	}
	slot, err := f.runtime.Reserve(d.ID)
	if err != nil {
		return err
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		slot.Cancel()
		return err
	}
	done := submit(slot, func(ctx context.Context) jobResult {
		if err := cfg.SetNetworkProxy(ctx, p); err != nil {
			return jobResult{err: err}
		}
		state, err := savedState(backend)
		if err != nil || state == nil {
			return jobResult{err: err}
		}
		ctx, cancel := recordContext(ctx, meta)
		defer cancel()
		_, err = f.pool.Exec(ctx, `UPDATE device_states SET state = $2, updated_at = $3 WHERE device_id = $1`, d.ID, state, f.now())
		return jobResult{err: err}
	}, func(context.Context) jobResult {
		return jobResult{err: neverRan(d.ID, "the service stopped before the proxy setting was applied").WithRetryable(true)}
	})
	res, err := await(ctx, done)
	if err == nil {
		err = res.err
	}
	return err
}
