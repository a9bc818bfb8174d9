// Package commands holds phonefleet's command handlers: one file per
// command, each a data-only command struct and a handler that loads, decides
// and appends events through one eventstore.Repository. Handlers never log;
// a decorator does.
package organisations

import (
	"context"
	"errors"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// EnsureLocalOrganisation returns the id of the local deployment's single
// organisation, creating it on first start.
type EnsureLocalOrganisation struct{}

// EnsureLocalOrganisationHandler handles EnsureLocalOrganisation.
type EnsureLocalOrganisationHandler struct {
	Store *eventstore.Store
}

// Handle returns the organisation id. Concurrent first starts agree on one
// organisation: the loser of the append race decides again on the
// winner's.
func (h EnsureLocalOrganisationHandler) Handle(ctx context.Context, _ EnsureLocalOrganisation) (string, error) {
	org, _, err := eventstore.NewRepository(h.Store, organisationAggregate).Update(ctx, localOrganisationStream,
		func(o *domain.OrganisationCreated) ([]domain.Event, error) {
			if o.OrgID != "" {
				return nil, nil
			}
			return []domain.Event{domain.OrganisationCreated{OrgID: domain.NewID(domain.PrefixOrganisation), Name: "Local", Mode: "local"}}, nil
		})
	if err == nil && org.OrgID == "" {
		err = errors.New("local organisation: the stream records none")
	}
	return org.OrgID, err
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
