package fleet

import (
	"phonefleet/domain"
	"phonefleet/eventstore"
)

// The aggregates the commands change, each folded by one
// eventstore.Repository: the service's one load–decide–append loop.

// deviceAggregate folds device streams. Every action loads its device, so
// device states are cached and caught up on each load.
var deviceAggregate = eventstore.Aggregate[domain.Device, domain.Event]{
	Stream: domain.DeviceStream,
	Codec:  domain.Events,
	New:    func(id string) domain.Device { return domain.Device{ID: id} },
	Apply:  func(d *domain.Device, e domain.Event, at eventstore.Recorded) { d.Apply(e, at.Version) },
	OrgID:  func(d *domain.Device) string { return d.OrgID },
	Clone: func(d domain.Device) domain.Device {
		if d.Lease != nil {
			l := *d.Lease
			d.Lease = &l
		}
		return d
	},
	// Do not remember ids that name nothing (clients can send any).
	Keep: func(d *domain.Device) bool { return d.Registered() },
}

// actionAggregate folds an action's stream: its request, its outcome and
// its reviews.
var actionAggregate = eventstore.Aggregate[domain.ActionRecord, domain.Event]{
	Stream: domain.ActionStream,
	Codec:  domain.Events,
	New:    func(string) domain.ActionRecord { return domain.ActionRecord{} },
	Apply:  func(r *domain.ActionRecord, e domain.Event, at eventstore.Recorded) { r.Apply(at.OrgID, e, at.Version) },
	OrgID:  func(r *domain.ActionRecord) string { return r.OrgID },
}
