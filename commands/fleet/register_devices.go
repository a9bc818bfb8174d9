package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// RegisterDevices adds Count devices of one backend kind to an
// organisation's fleet (the operator command `phonefleet devices add`,
// and a local deployment's first start).
type RegisterDevices struct {
	OrgID   string
	Backend string
	Count   int
	// Model is the sim model (empty = the default); other kinds record it.
	Model string
	// Serial is the adb serial of the one adb device registered (Count 1).
	// An organisation registers each serial once: the command then also
	// claims the stream ADBSerialStream and does nothing (no ids) when the
	// serial is registered already.
	Serial string
	// NamePrefix names the devices NamePrefix-1, NamePrefix-2, …; empty
	// means the backend kind.
	NamePrefix string
	// SeedMarker, when set, also appends FleetSeeded to this stream in the
	// same transaction, and the command does nothing if the stream exists:
	// a local deployment registers its starting phones exactly once.
	SeedMarker string
}

// MaxRegisterCount bounds one registration.
const MaxRegisterCount = 1000

// RegisterDevicesHandler handles RegisterDevices.
type RegisterDevicesHandler struct{ f *Fleet }

// RegisterDevices returns the handler of RegisterDevices.
func (f *Fleet) RegisterDevices() RegisterDevicesHandler { return RegisterDevicesHandler{f} }

// Handle registers the devices in one transaction, each as a
// device.registered event on its own new stream; a sim phone's starting
// state is saved beside it. It returns the new device ids (none when
// SeedMarker says it was done before).
func (h RegisterDevicesHandler) Handle(ctx context.Context, cmd RegisterDevices) ([]string, error) {
	if cmd.OrgID == "" {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "an organisation is required")
	}
	if !slices.Contains(domain.BackendKinds, cmd.Backend) {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "backend must be one of %s", strings.Join(domain.BackendKinds, ", "))
	}
	if cmd.Count < 0 || cmd.Count > MaxRegisterCount {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "count must be between 0 and %d", MaxRegisterCount)
	}
	if cmd.Serial != "" {
		if cmd.Backend != domain.BackendADB || cmd.Count != 1 {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "a serial names one adb device (backend adb, count 1)")
		}
		if !domain.ValidSerial(cmd.Serial) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "serial %q is not an adb serial", cmd.Serial)
		}
		if cmd.SeedMarker == "" {
			cmd.SeedMarker = domain.ADBSerialStream(cmd.OrgID, cmd.Serial)
		}
		if cmd.NamePrefix == "" {
			cmd.NamePrefix = cmd.Serial
		}
	}
	prefix := cmd.NamePrefix
	if prefix == "" {
		prefix = cmd.Backend
	}
	now := h.f.now()
	if cmd.SeedMarker != "" {
		seeded, err := h.f.store.Load(ctx, cmd.SeedMarker, 1)
		if err != nil || len(seeded) > 0 {
			return nil, err
		}
	}
	u := &eventstore.Unit{}
	ids := make([]string, 0, cmd.Count)
	for i := 0; i < cmd.Count; i++ {
		id := domain.NewID(domain.PrefixDevice)
		reg := domain.DeviceRegistered{DeviceID: id, OrgID: cmd.OrgID, Name: fmt.Sprintf("%s-%d", prefix, i+1),
			Backend: cmd.Backend, Model: cmd.Model, Serial: cmd.Serial, RegisteredAt: now}
		if cmd.Serial != "" {
			reg.Name = string([]rune(cmd.NamePrefix)[:min(len([]rune(cmd.NamePrefix)), domain.MaxDeviceNameRunes)])
		}
		if _, err := h.f.RegisterInto(u, reg, nil); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if cmd.SeedMarker != "" {
		news, err := eventstore.Encode(domain.Events, cmd.OrgID, domain.Event(domain.FleetSeeded{OrgID: cmd.OrgID, DeviceIDs: ids}))
		if err != nil {
			return nil, err
		}
		u.Append(cmd.SeedMarker, eventstore.NoStream, news...)
	}
	if u.Empty() {
		return ids, nil
	}
	_, err := h.f.store.Commit(ctx, u)
	if errors.Is(err, eventstore.ErrConflict) && cmd.SeedMarker != "" {
		return nil, nil // a concurrent first start seeded the fleet
	}
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// RegisterInto adds to u the registration of a new device reg names and,
// in the same append on its new stream, the events then decides on it
// (nil: none); a sim phone gets its serial and its starting state, saved
// beside it. It returns the device's state after both. A provisioning
// pool lends a unit this way: registered and leased in one append.
func (f *Fleet) RegisterInto(u *eventstore.Unit, reg domain.DeviceRegistered,
	then func(d *domain.Device) ([]domain.Event, error)) (domain.Device, error) {
	var d domain.Device
	if reg.Backend == domain.BackendSim {
		reg.Serial = simSerialFor(reg.DeviceID)
		if f.cfg.NewSimState == nil {
			return d, domain.Errorf(domain.CodeServiceUnavailable, "this deployment does not register sim phones")
		}
		state, err := f.cfg.NewSimState(&reg)
		if err != nil {
			return d, err
		}
		u.Exec(`INSERT INTO device_states (device_id, org_id, backend, model, state, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, reg.DeviceID, reg.OrgID, reg.Backend, reg.Model, state, reg.RegisteredAt)
	}
	evs, err := d.Register(reg)
	if err != nil {
		return d, err
	}
	for i, e := range evs {
		d.Apply(e, int64(i+1))
	}
	if then != nil {
		more, err := then(&d)
		if err != nil {
			return d, err
		}
		for i, e := range more {
			d.Apply(e, int64(len(evs)+i+1))
		}
		evs = append(evs, more...)
	}
	news, err := eventstore.Encode(domain.Events, reg.OrgID, evs...)
	if err != nil {
		return d, err
	}
	u.Append(domain.DeviceStream(reg.DeviceID), eventstore.NoStream, news...)
	return d, nil
}

// simSerialFor derives a readable serial from a device id.
func simSerialFor(id string) string {
	return "SIM-" + strings.ToUpper(id[len(id)-8:])
}

// SeedLocalFleet registers a local deployment's starting sim phones on its
// first start (SERVICE_SIM_DEVICES) and never again.
func (f *Fleet) SeedLocalFleet(ctx context.Context, orgID string, count int) ([]string, error) {
	return f.RegisterDevices().Handle(ctx, RegisterDevices{OrgID: orgID, Backend: domain.BackendSim, Count: count,
		NamePrefix: "sim", SeedMarker: domain.LocalFleetStream(orgID)})
}
