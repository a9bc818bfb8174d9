package fleet

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// PowerDevice wakes a device (POST /v1/devices/{deviceId}/wake) or puts it
// to sleep (POST /v1/devices/{deviceId}/stop).
type PowerDevice struct {
	Auth     domain.Auth
	DeviceID string
	// Wake is true to turn the screen on, false to turn it off.
	Wake bool
	// LeaseID is required when the device is leased (by the caller).
	LeaseID string
}

// PowerDeviceHandler handles PowerDevice.
type PowerDeviceHandler struct{ f *Fleet }

// PowerDevice returns the handler of PowerDevice.
func (f *Fleet) PowerDevice() PowerDeviceHandler { return PowerDeviceHandler{f} }

// Handle queues the wake or stop on the device's queue, behind the
// actions already waiting, and answers the device once done. It needs
// devices:act. A leased device may be woken or stopped only by its holder
// presenting the lease. Errors: device_unavailable (not_found, offline,
// already_leased), lease_required, lease_mismatch,
// backend_resolution_failed, backend_not_implemented,
// capability_unsupported, device_busy, device_disconnected,
// backend_command_failed.
func (h PowerDeviceHandler) Handle(ctx context.Context, cmd PowerDevice) (projections.DeviceView, error) {
	f := h.f
	if err := cmd.Auth.Require(domain.ScopeDevicesAct); err != nil {
		return projections.DeviceView{}, err
	}
	d, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID)
	if err != nil {
		return projections.DeviceView{}, err
	}
	if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return projections.DeviceView{}, err
	} else if remote {
		if _, err := forwardDeviceCall[PowerDevice, bool](ctx, f, host, OpPowerDevice, d.ID, cmd); err != nil {
			return projections.DeviceView{}, err
		}
		return f.device(ctx, cmd.Auth, d.ID)
	}
	actor := domain.HolderOf(cmd.Auth)
	if err := d.CheckPower(f.now(), actor, cmd.LeaseID); err != nil {
		return projections.DeviceView{}, err
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return projections.DeviceView{}, err
	}
	caps := backend.Capabilities()
	if cmd.Wake && !caps.Wake || !cmd.Wake && !caps.Stop {
		what := map[bool]string{true: "wake", false: "stop"}[cmd.Wake]
		return projections.DeviceView{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot %s", what).With("capability", what)
	}
	slot, err := f.runtime.Reserve(d.ID)
	if err != nil {
		return projections.DeviceView{}, err
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		slot.Cancel()
		return projections.DeviceView{}, err
	}
	job := powerJob{f: f, deviceID: d.ID, wake: cmd.Wake, actor: actor, leaseID: cmd.LeaseID, meta: meta}
	done := submit(slot, job.run, func(context.Context) jobResult {
		return jobResult{err: neverRan(d.ID, whyStopped).WithRetryable(true)}
	})
	res, err := await(ctx, done)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return projections.DeviceView{}, err
	}
	if err := f.waitFor(ctx, res.appended, projections.DevicesName); err != nil {
		return projections.DeviceView{}, err
	}
	return f.device(ctx, cmd.Auth, d.ID)
}

// powerJob is a wake or stop waiting for its turn on its device.
type powerJob struct {
	f        *Fleet
	deviceID string
	// wake is true to turn the screen on, false to turn it off.
	wake    bool
	actor   domain.Actor
	leaseID string
	// meta is the metadata of the request: the events recording the
	// change carry it.
	meta eventstore.Metadata
}

// run checks the lease again (it may have changed while the job waited),
// wakes or stops the device, then records device.woken or device.stopped
// and the device's saved state in one transaction.
func (j powerJob) run(ctx context.Context) jobResult {
	f := j.f
	d, _, err := f.devices.Load(ctx, j.deviceID)
	if err != nil {
		return jobResult{err: err}
	}
	if err := d.CheckPower(f.now(), j.actor, j.leaseID); err != nil {
		return jobResult{err: err}
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return jobResult{err: err}
	}
	if j.wake {
		err = backend.Wake(ctx)
	} else {
		err = backend.Stop(ctx)
	}
	if err != nil {
		return jobResult{err: err}
	}
	state, err := savedState(backend)
	if err != nil {
		return jobResult{err: err}
	}
	ctx, cancel := recordContext(ctx, j.meta)
	defer cancel()
	now := f.now()
	_, c, err := f.devices.UpdateWith(ctx, j.deviceID, func(d *domain.Device, u *eventstore.Unit) ([]domain.Event, error) {
		if state != nil {
			queueDeviceState(u, d, state, now)
		}
		if j.wake {
			return d.Wake(now), nil
		}
		return d.Stop(now), nil
	})
	return jobResult{appended: c.Last(), err: err}
}
