package projections

import (
	"sort"

	"phonefleet/domain"
)

// The event types each selective projection reads (see Selective). The
// audit feed reads every event and so is not selective.

// EventTypes implements Selective.
func (Devices) EventTypes() []string { return sortedKeys(deviceEvents) }

// EventTypes implements Selective.
func (Leases) EventTypes() []string { return sortedKeys(leaseEvents) }

// EventTypes implements Selective.
func (Receipts) EventTypes() []string { return sortedKeys(receiptEvents) }

// EventTypes implements Selective.
func (FrameIndex) EventTypes() []string { return sortedKeys(frameEvents) }

// EventTypes implements Selective.
func (APIKeys) EventTypes() []string { return []string{"api_key.%"} }

// EventTypes implements Selective: its own events and every event type that
// causes a webhook (the outbox).
func (Webhooks) EventTypes() []string {
	return append([]string{"webhook.%"}, domain.WebhookSourceTypes()...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
