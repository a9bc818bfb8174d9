package fleet

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// ResetDevice performs the reset a device owes: a lease asked with
// resetOnRelease ended (its lease.released or lease.expired carries
// reset) and no device.reset names it yet. The lease commands send it
// right after the lease ends; the device-resets worker sends it for every
// reset still owed (after a crash, or when a run gave the lease up).
type ResetDevice struct {
	DeviceID string
}

// ResetDeviceHandler handles ResetDevice.
type ResetDeviceHandler struct{ f *Fleet }

// ResetDevice returns the handler of ResetDevice.
func (f *Fleet) ResetDevice() ResetDeviceHandler { return ResetDeviceHandler{f} }

// Handle queues the reset on the device's queue, behind the work already
// waiting, so it never races an action; when its turn comes the backend
// returns the device to its baseline and device.reset is recorded with the
// device's saved state in one unit. It reports whether it reset the
// device: a device that owes no reset (any more) is left alone, so the
// command is idempotent and safe to send again after a restart. It is a
// system command (no caller's scopes). Errors: device_unavailable
// (offline, when this process does not host the device), device_busy,
// capability_unsupported (the backend cannot reset), the backend's
// errors, and the database's.
func (h ResetDeviceHandler) Handle(ctx context.Context, cmd ResetDevice) (bool, error) {
	f := h.f
	d, _, err := f.devices.Load(ctx, cmd.DeviceID)
	if err != nil || !d.Registered() || d.ResetDue == "" {
		return false, err
	}
	if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return false, err
	} else if remote {
		return forwardDeviceCall[ResetDevice, bool](ctx, f, host, OpResetDevice, d.ID, cmd)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return false, err
	}
	if !backend.Capabilities().Reset {
		return false, errCannotReset()
	}
	slot, err := f.runtime.Reserve(d.ID)
	if err != nil {
		return false, err
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		slot.Cancel()
		return false, err
	}
	job := resetJob{f: f, deviceID: d.ID, meta: meta}
	done := submit(slot, job.run, func(context.Context) jobResult {
		return jobResult{err: neverRan(d.ID, "the service stopped before the reset ran; it is still owed").WithRetryable(true)}
	})
	res, err := await(ctx, done)
	if err == nil {
		err = res.err
	}
	if err != nil || res.appended.LastPosition == 0 {
		return false, err
	}
	return true, f.waitFor(ctx, res.appended, projections.DevicesName)
}

func errCannotReset() *domain.Error {
	return domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot be reset to its baseline").
		With("capability", "reset")
}

// resetJob is a reset waiting for its turn on its device.
type resetJob struct {
	f        *Fleet
	deviceID string
	// meta is the metadata of the command: device.reset carries it.
	meta eventstore.Metadata
}

// run checks that the reset is still owed (an earlier job may have done
// it meanwhile), resets the device, then records device.reset and the
// saved state through the repository, which decides again on the state it
// appends to: a reset is recorded once. Nobody can lease the device while
// the reset is owed, so no action runs between the check and the record.
func (j resetJob) run(ctx context.Context) jobResult {
	f := j.f
	d, _, err := f.devices.Load(ctx, j.deviceID)
	if err != nil || d.ResetDue == "" {
		return jobResult{err: err}
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return jobResult{err: err}
	}
	if err := backend.Reset(ctx); err != nil {
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
		evs := d.ResetDone(now)
		if len(evs) > 0 && state != nil {
			queueDeviceState(u, d, state, now)
		}
		return evs, nil
	})
	return jobResult{appended: c.Last(), err: err}
}

// resetAfter sends ResetDevice for a device whose lease just ended with
// resetOnRelease, and waits for it, so the caller answers once the device
// is clean. A reset that fails here stays owed: the device refuses new
// leases (reason resetting) until the device-resets worker has done it;
// the lease's end stands either way, so the error is not the caller's.
func (f *Fleet) resetAfter(ctx context.Context, deviceID string) {
	_, _ = f.ResetDevice().Handle(ctx, ResetDevice{DeviceID: deviceID})
}
