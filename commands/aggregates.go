package commands

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

// apiKeyAggregate folds an API key's stream.
var apiKeyAggregate = eventstore.Aggregate[domain.APIKey, domain.Event]{
	Stream: domain.APIKeyStream,
	Codec:  domain.Events,
	New:    func(string) domain.APIKey { return domain.APIKey{} },
	Apply:  func(k *domain.APIKey, e domain.Event, _ eventstore.Recorded) { k.Apply(e) },
	OrgID:  func(k *domain.APIKey) string { return k.OrgID },
}

// webhookAggregate folds an organisation's webhook subscriptions (one
// stream per organisation, keyed by its id).
var webhookAggregate = eventstore.Aggregate[*domain.WebhookSet, domain.Event]{
	Stream: domain.WebhookStream,
	Codec:  domain.Events,
	New:    domain.NewWebhookSet,
	Apply:  func(s **domain.WebhookSet, e domain.Event, _ eventstore.Recorded) { (*s).Apply(e) },
	OrgID:  func(s **domain.WebhookSet) string { return (*s).OrgID },
}

// localOrganisationStream holds the one organisation of a local deployment.
const localOrganisationStream = "organisation-local"

// organisationAggregate folds the local deployment's organisation stream
// (its id is the stream itself).
var organisationAggregate = eventstore.Aggregate[domain.OrganisationCreated, domain.Event]{
	Stream: func(string) string { return localOrganisationStream },
	Codec:  domain.Events,
	New:    func(string) domain.OrganisationCreated { return domain.OrganisationCreated{} },
	Apply: func(o *domain.OrganisationCreated, e domain.Event, _ eventstore.Recorded) {
		if c, ok := e.(domain.OrganisationCreated); ok && o.OrgID == "" {
			*o = c
		}
	},
	OrgID: func(o *domain.OrganisationCreated) string { return o.OrgID },
}
