package fleet

import (
	"context"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
)

// SetDeviceNetworkProxy puts a device behind a network proxy, or takes it
// off (Proxy nil). It is a system command: the capability that sends it
// (managed proxies, through SetNetworkProxy) checked the caller. A device
// another process holds is reached there (OpSetNetworkProxy), so the
// setting is applied on the holder's queue.
type SetDeviceNetworkProxy struct {
	DeviceID string
	Proxy    *domain.NetworkProxy
}

// SetDeviceNetworkProxyHandler handles SetDeviceNetworkProxy.
type SetDeviceNetworkProxyHandler struct{ f *Fleet }

// SetDeviceNetworkProxy returns the handler of SetDeviceNetworkProxy.
func (f *Fleet) SetDeviceNetworkProxy() SetDeviceNetworkProxyHandler {
	return SetDeviceNetworkProxyHandler{f}
}

// SetNetworkProxy sets a device's network proxy as SetDeviceNetworkProxy
// does (the managed proxies' port, proxies.Devices).
func (f *Fleet) SetNetworkProxy(ctx context.Context, deviceID string, p *domain.NetworkProxy) error {
	_, err := f.SetDeviceNetworkProxy().Handle(ctx, SetDeviceNetworkProxy{DeviceID: deviceID, Proxy: p})
	return err
}

// Handle applies the setting through the device's queue, so it never races
// an action; a sim phone's changed state is saved with it. Errors:
// device_unavailable (not registered; offline), capability_unsupported
// (the backend has no network proxy setting), the backend's errors, and
// the database's.
func (h SetDeviceNetworkProxyHandler) Handle(ctx context.Context, cmd SetDeviceNetworkProxy) (cqrs.Done, error) {
	f := h.f
	d, _, err := f.devices.Load(ctx, cmd.DeviceID)
	if err != nil {
		return cqrs.Done{}, err
	}
	if !d.Registered() {
		return cqrs.Done{}, domain.Errorf(domain.CodeDeviceUnavailable, "device %s is not registered", cmd.DeviceID).
			With("reason", domain.ReasonNotFound)
	}
	if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return cqrs.Done{}, err
	} else if remote {
		return forwardDeviceCall[SetDeviceNetworkProxy, cqrs.Done](ctx, f, host, OpSetNetworkProxy, d.ID, cmd)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return cqrs.Done{}, err
	}
	cfg, ok := backend.(domain.NetworkProxyConfigurer)
	if !ok {
		return cqrs.Done{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device has no network proxy setting").
			With("capability", "networkProxy")
	}
	slot, err := f.runtime.Reserve(d.ID)
	if err != nil {
		return cqrs.Done{}, err
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		slot.Cancel()
		return cqrs.Done{}, err
	}
	done := submit(slot, func(ctx context.Context) jobResult {
		if err := cfg.SetNetworkProxy(ctx, cmd.Proxy); err != nil {
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
	return cqrs.Done{}, err
}
