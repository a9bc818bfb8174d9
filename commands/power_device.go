package commands

import (
	"context"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
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

// Handle queues the wake or stop on the device's executor, behind the
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
	actor := domain.ActorOf(cmd.Auth)
	if err := d.CheckPower(f.now(), actor, cmd.LeaseID); err != nil {
		return projections.DeviceView{}, err
	}
	backend, err := f.cfg.Backends.Resolve(ctx, &d)
	if err != nil {
		return projections.DeviceView{}, err
	}
	caps := backend.Capabilities()
	if cmd.Wake && !caps.Wake || !cmd.Wake && !caps.Stop {
		what := map[bool]string{true: "wake", false: "stop"}[cmd.Wake]
		return projections.DeviceView{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot %s", what).With("capability", what)
	}
	slot, err := f.queue.Reserve(d.ID)
	if err != nil {
		return projections.DeviceView{}, err
	}
	kind := JobStop
	if cmd.Wake {
		kind = JobWake
	}
	job := Job{Kind: kind, OrgID: d.OrgID, DeviceID: d.ID, Actor: actor, LeaseID: cmd.LeaseID, Done: make(chan JobResult, 1)}
	slot.Submit(job)
	var res JobResult
	select {
	case res = <-job.Done:
	case <-ctx.Done():
		return projections.DeviceView{}, ctx.Err()
	}
	if res.Err != nil {
		return projections.DeviceView{}, res.Err
	}
	if err := f.waitFor(ctx, res.Appended, "devices"); err != nil {
		return projections.DeviceView{}, err
	}
	return f.GetDevice(ctx, cmd.Auth, d.ID)
}

// executePower wakes or stops the device, then records device.woken or
// device.stopped and the device's saved state in one transaction.
func (f *Fleet) executePower(ctx context.Context, job Job) JobResult {
	d, err := f.repo.load(ctx, job.DeviceID)
	if err != nil {
		return JobResult{Err: err}
	}
	if err := d.CheckPower(f.now(), job.Actor, job.LeaseID); err != nil {
		return JobResult{Err: err}
	}
	backend, err := f.cfg.Backends.Resolve(ctx, &d)
	if err != nil {
		return JobResult{Err: err}
	}
	if job.Kind == JobWake {
		err = backend.Wake(ctx)
	} else {
		err = backend.Stop(ctx)
	}
	if err != nil {
		return JobResult{Err: err}
	}
	var state []byte
	if sb, ok := backend.(domain.StatefulBackend); ok {
		if state, err = sb.SaveState(); err != nil {
			return JobResult{Err: err}
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	now := f.now()
	_, a, err := f.repo.updateTx(ctx, job.DeviceID, fleetMeta(job.Actor, ""), func(d *domain.Device) ([]domain.Event, error) {
		if job.Kind == JobWake {
			return d.Wake(now), nil
		}
		return d.Stop(now), nil
	}, func(tx pgx.Tx) error {
		if state == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO device_states (device_id, org_id, backend, model, state, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (device_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at`,
			d.ID, d.OrgID, d.Backend, d.Model, state, now)
		return err
	})
	return JobResult{Appended: a, Err: err}
}
