package domain

import "time"

// Retire returns the events that take a device out of its organisation's
// fleet: the end of any lease it has (lease.released for one in force,
// lease.expired for one that ran out unrecorded; no reset is owed, since
// nobody will use the device again), then device.retired. A device that
// is not registered (missing, or retired already) returns nothing.
func (d *Device) Retire(reason string, now time.Time) []Event {
	if !d.Registered() {
		return nil
	}
	var evs []Event
	if l := d.Lease; l != nil {
		if l.Active(now) {
			evs = append(evs, LeaseReleased{DeviceID: d.ID, LeaseID: l.ID, ReleasedAt: now})
		} else {
			evs = append(evs, LeaseExpired{DeviceID: d.ID, LeaseID: l.ID, ExpiredAt: l.ExpiresAt})
		}
	}
	return append(evs, DeviceRetired{DeviceID: d.ID, OrgID: d.OrgID, Reason: reason, At: now})
}
