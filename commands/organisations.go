// Package commands holds phonefleet's command handlers: one file per
// command, each a data-only command struct and a handler that loads, decides
// and appends events. Handlers never log; a decorator does.
package commands

import (
	"context"
	"errors"
	"fmt"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// localOrganisationStream holds the one organisation of a local deployment.
const localOrganisationStream = "organisation-local"

// EnsureLocalOrganisation returns the id of the local deployment's single
// organisation, creating it on first start.
type EnsureLocalOrganisation struct{}

// EnsureLocalOrganisationHandler handles EnsureLocalOrganisation.
type EnsureLocalOrganisationHandler struct {
	Store *eventstore.Store
}

// Handle returns the organisation id. Concurrent first starts agree on one
// organisation: the loser of the append race reads the winner's.
func (h EnsureLocalOrganisationHandler) Handle(ctx context.Context, _ EnsureLocalOrganisation) (string, error) {
	for attempt := 0; attempt < 2; attempt++ {
		evs, err := h.Store.Load(ctx, localOrganisationStream, 1)
		if err != nil {
			return "", err
		}
		if len(evs) > 0 {
			e, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
			if err != nil {
				return "", err
			}
			created, ok := e.(domain.OrganisationCreated)
			if !ok {
				return "", fmt.Errorf("stream %s starts with %s", localOrganisationStream, evs[0].Type)
			}
			return created.OrgID, nil
		}
		created := domain.OrganisationCreated{OrgID: domain.NewID(domain.PrefixOrganisation), Name: "Local", Mode: "local"}
		name, version, data, err := domain.Events.Encode(created)
		if err != nil {
			return "", err
		}
		_, err = h.Store.Append(ctx, localOrganisationStream, eventstore.NoStream, eventstore.NewEvent{
			Type: name, SchemaVersion: version, OrgID: created.OrgID, Data: data,
			Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "phonefleet"},
		})
		if errors.Is(err, eventstore.ErrConflict) {
			continue
		}
		if err != nil {
			return "", err
		}
		return created.OrgID, nil
	}
	return "", errors.New("local organisation: could not create or read it")
}
