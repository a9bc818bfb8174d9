package webhooks

import (
	"context"

	"phonefleet/domain"
)

// DisableDepartedPersonWebhooks switches off every webhook an OAuth app
// made for a person who has left the organisation (spec 5.2). Only that
// person may switch one on again. The identity capability issues it when
// the identity provider reports the membership deleted.
type DisableDepartedPersonWebhooks struct {
	OrgID  string
	UserID string
}

// DisableDepartedPersonWebhooksHandler handles DisableDepartedPersonWebhooks.
type DisableDepartedPersonWebhooksHandler struct {
	Webhooks
}

// Handle returns how many subscriptions it switched off.
func (h DisableDepartedPersonWebhooksHandler) Handle(ctx context.Context, cmd DisableDepartedPersonWebhooks) (int, error) {
	n := 0
	_, err := h.decide(ctx, cmd.OrgID, func(set *domain.WebhookSet) ([]domain.Event, error) {
		evs := set.PersonLeft(cmd.UserID)
		n = len(evs)
		return evs, nil
	})
	return n, err
}
