package domain

import "slices"

// Events is the registry of every event type phonefleet records. The lists
// it joins are each one capability's: identityEvents (identity_events.go),
// fleetEvents (fleet_events.go), webhookEvents (webhook_events.go),
// runEvents (run_events.go), scheduleEvents (schedule_events.go).
var Events = mustRegistry(slices.Concat(coreEvents, identityEvents, fleetEvents, webhookEvents, runEvents, scheduleEvents, liveSessionEvents, provisioningEvents, poolEvents, inventoryEvents, paymentFollowupEvents, chargeRefundEvents, cliSessionEvents, consoleEvents, gatewayEvents, notificationEvents, appEvents, proxyEvents, copilotEvents, receiptSigningEvents)...)

var coreEvents = []EventDef{
	Def[OrganisationCreated](1, nil),
}

func mustRegistry(defs ...EventDef) *Registry {
	r, err := NewRegistry(defs...)
	if err != nil {
		panic(err) // a programming error, caught by every test run
	}
	return r
}

// OrganisationCreated records a new tenant.
type OrganisationCreated struct {
	OrgID string `json:"orgId"`
	Name  string `json:"name"`
	// Mode is the deployment mode that created it: "local" or "hosted".
	Mode string `json:"mode"`
}

// EventName implements Event.
func (OrganisationCreated) EventName() string { return "organisation.created" }
