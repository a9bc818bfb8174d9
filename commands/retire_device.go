package commands

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// RetireDevice takes a device out of an organisation's fleet (a cancelled
// fulfilment's phone leaves the organisation): any lease on it ends in the
// same append, and from then on the device answers exactly as one that
// never existed. It is a system command (no caller's scopes).
type RetireDevice struct {
	OrgID    string
	DeviceID string
	// Reason is why it left (the fulfilment's cancellation reason).
	Reason string
}

// RetireDeviceHandler handles RetireDevice.
type RetireDeviceHandler struct{ f *Fleet }

// RetireDevice returns the handler of RetireDevice.
func (f *Fleet) RetireDevice() RetireDeviceHandler { return RetireDeviceHandler{f} }

// Handle appends the retirement and reports whether it did: a device that
// does not exist, is another organisation's or is retired already is left
// alone, so the command is idempotent. It answers once the devices read
// model no longer lists the device.
func (h RetireDeviceHandler) Handle(ctx context.Context, cmd RetireDevice) (bool, error) {
	now := h.f.now()
	_, c, err := h.f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		if d.OrgID != cmd.OrgID {
			return nil, nil
		}
		return d.Retire(cmd.Reason, now), nil
	})
	if err != nil || len(c.Appends) == 0 {
		return false, err
	}
	return true, h.f.waitFor(ctx, c.Last(), projections.DevicesName)
}

// retireInto adds the retirement of an organisation's device to u, at the
// device stream's current version, for a decision that must commit with
// it (a fulfilment's end). If the device moves on before u commits, the
// commit fails with eventstore.ErrConflict and the caller decides again.
// A device that is not the organisation's, or is gone, adds nothing.
func (f *Fleet) retireInto(ctx context.Context, u *eventstore.Unit, orgID, deviceID, reason string, now time.Time) error {
	if deviceID == "" {
		return nil
	}
	d, version, err := f.devices.Load(ctx, deviceID)
	if err != nil || d.OrgID != orgID {
		return err
	}
	evs := d.Retire(reason, now)
	if len(evs) == 0 {
		return nil
	}
	news, err := eventstore.Encode(domain.Events, d.OrgID, evs...)
	if err != nil {
		return err
	}
	u.Append(domain.DeviceStream(deviceID), version, news...)
	return nil
}
