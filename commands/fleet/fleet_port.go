package fleet

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// What the other capabilities use of the fleet. Runs hold a device for a
// run and act on it; provisioning registers the devices a purchase hands
// over, lends pool units and takes them back. Each declares the part it
// needs as an interface of its own (runs.Devices, provisioning.Devices),
// which *Fleet satisfies through the methods below; none reaches into the
// fleet's state.

// Visible loads a device the caller may use: in its organisation and its
// device subset. Anything else is device_unavailable (not_found).
func (f *Fleet) Visible(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error) {
	return f.visibleDevice(ctx, auth, deviceID)
}

// State returns a device's state and its stream's version (0: no such
// device).
func (f *Fleet) State(ctx context.Context, deviceID string) (domain.Device, int64, error) {
	return f.devices.Load(ctx, deviceID)
}

// UpdateDevice decides on a device through the fleet's repository (its
// one retry policy): decide returns the device's events and may add
// another stream's to the unit, which commits with them or not at all
// (a run's first events beside its device's lease).
func (f *Fleet) UpdateDevice(ctx context.Context, deviceID string,
	decide func(d *domain.Device, u *eventstore.Unit) ([]domain.Event, error)) (eventstore.Committed, error) {
	_, c, err := f.devices.UpdateWith(ctx, deviceID, decide)
	return c, err
}

// DecideInto adds to u the events decide returns for a device, appended at
// the version they were decided on: a device that moves on before u
// commits fails the commit with a conflict, and the caller's repository
// decides again (a run's end giving its lease back, a fulfilment's end
// retiring its device).
func (f *Fleet) DecideInto(ctx context.Context, u *eventstore.Unit, deviceID string,
	decide func(d *domain.Device) ([]domain.Event, error)) error {
	_, err := f.devices.DecideInto(ctx, u, deviceID, decide)
	return err
}

// FrameOf names the device and the screen hash of a frame of the
// organisation still readable at now; ok is false for a frame that is
// absent, another organisation's or past retention.
func (f *Fleet) FrameOf(ctx context.Context, orgID, frameID string, now time.Time) (deviceID, screenHash string, ok bool, err error) {
	m, ok, err := f.lookupFrame(ctx, orgID, frameID, now)
	return m.DeviceID, m.ScreenHash, ok, err
}

// Observe looks at a device as ObserveDevice does.
func (f *Fleet) Observe(ctx context.Context, cmd ObserveDevice) (Observation, error) {
	return f.ObserveDevice().Handle(ctx, cmd)
}

// Act performs an action as PerformAction does.
func (f *Fleet) Act(ctx context.Context, cmd PerformAction) (ActOutcome, error) {
	return f.PerformAction().Handle(ctx, cmd)
}

// Frame reads a stored frame as GetFrame does.
func (f *Fleet) Frame(ctx context.Context, q GetFrame) (Frame, error) {
	return f.frame(ctx, q.Auth, q.FrameID, q.FrameOptions)
}

// Lease takes a device's lease as AcquireLease does.
func (f *Fleet) Lease(ctx context.Context, cmd AcquireLease) (projections.LeaseView, error) {
	return f.AcquireLease().Handle(ctx, cmd)
}

// Release gives a lease back as ReleaseLease does.
func (f *Fleet) Release(ctx context.Context, cmd ReleaseLease) error {
	_, err := f.ReleaseLease().Handle(ctx, cmd)
	return err
}

// Software reads a device's software as ReadSoftware does.
func (f *Fleet) Software(ctx context.Context, q ReadSoftware) (domain.DeviceSoftware, error) {
	return f.ReadSoftware().Handle(ctx, q)
}
