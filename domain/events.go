package domain

// Events is the registry of every event type phonefleet records: the one
// place that lists them. Each capability adds its events here.
var Events = mustRegistry(
	Def[OrganisationCreated](1, nil),
)

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
