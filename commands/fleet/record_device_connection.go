package fleet

import (
	"context"

	"phonefleet/domain"
)

// RecordDeviceConnection records that a device's transport has it
// (Online) or lost it (State says how): device.came_online or
// device.went_offline, only when that changes what is recorded. Device
// discovery (workers.ADBDiscovery) sends it as a worker; it carries no
// credential.
type RecordDeviceConnection struct {
	DeviceID string
	Online   bool
	State    string
}

// RecordDeviceConnectionHandler handles RecordDeviceConnection.
type RecordDeviceConnectionHandler struct{ f *Fleet }

// RecordDeviceConnection returns the handler of RecordDeviceConnection.
func (f *Fleet) RecordDeviceConnection() RecordDeviceConnectionHandler {
	return RecordDeviceConnectionHandler{f}
}

// Handle appends the event, if any, and reports whether it did. Errors:
// device_unavailable (not_found) for a device that is not registered.
func (h RecordDeviceConnectionHandler) Handle(ctx context.Context, cmd RecordDeviceConnection) (bool, error) {
	now := h.f.now()
	changed := false
	_, _, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		if !d.Registered() {
			return nil, domain.ErrDeviceNotFound(cmd.DeviceID)
		}
		evs := d.Connection(now, cmd.Online, cmd.State)
		changed = len(evs) > 0
		return evs, nil
	})
	return changed, err
}
