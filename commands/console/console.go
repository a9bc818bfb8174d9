package console

import (
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/keys"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// Config is what the console capability needs.
type Config struct {
	Store *eventstore.Store
	// Projections reads every projection's state for the operator views;
	// nil: the deployment does not serve them.
	Projections ProjectionStatusReader
	// Now is the clock; nil means clock.Now. Tests inject one (a sign-in's
	// expiry, the telemetry's per-minute budget).
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the console
	// events read model, so operators read what was sent.
	ReadModels cqrs.ReadModels
}

// Console is the console capability: CLI sign-in approved in the console
// (/v1/cli-sessions), the console's telemetry (/v1/console/events) and
// the operator views (/v1/operators/projections).
type Console struct {
	cli         *CLISessions
	events      *ConsoleEvents
	projections ProjectionStatusReader
}

// New returns the console capability.
func New(cfg Config) *Console {
	return &Console{
		cli:         NewCLISessions(CLISessionConfig{Store: cfg.Store, Now: cfg.Now}),
		events:      NewConsoleEvents(ConsoleEventConfig{Store: cfg.Store, Now: cfg.Now, ReadModels: cfg.ReadModels}),
		projections: cfg.Projections,
	}
}

// Handlers are the console capability's entry points of the
// application object.
type Handlers struct {
	// CLI sign-in: a CLI starts a session and polls it; a signed-in person
	// approves (minting a key) or denies it.
	StartCLISession     cqrs.Handler[StartCLISession, StartedCLISession]
	PollCLISession      cqrs.Handler[PollCLISession, CLISessionPoll]
	ApproveCLISession   cqrs.Handler[ApproveCLISession, CLISessionView]
	DenyCLISession      cqrs.Handler[DenyCLISession, CLISessionView]
	GetCLISessionByCode cqrs.Handler[GetCLISessionByCode, CLISessionView]
	// The console's telemetry, recorded and read by operators.
	RecordConsoleEvents cqrs.Handler[RecordConsoleEvents, RecordedConsoleEvents]
	ListConsoleEvents   cqrs.Handler[ListConsoleEvents, projections.ConsoleEventPage]
	// GetProjectionStatus answers every projection's state, lag and
	// rebuild progress (GET /v1/operators/projections).
	GetProjectionStatus cqrs.Handler[GetProjectionStatus, ProjectionStatus]
}

// KeyMinter is what CLI sign-in needs of the key capability: minting the
// approved CLI's key together with its approval (the application's key
// command).
type KeyMinter struct {
	Mint cqrs.Handler[keys.MintAPIKey, keys.MintedAPIKey]
}

// Handlers returns the console capability's entry points, each behind d;
// an approved CLI sign-in mints its key through keys.
func (c *Console) Handlers(d cqrs.Decorator, keys KeyMinter) Handlers {
	h := Handlers{
		StartCLISession:     cqrs.Serve(d, StartCLISessionHandler{c.cli}),
		PollCLISession:      cqrs.Serve(d, PollCLISessionHandler{c.cli}),
		ApproveCLISession:   cqrs.Serve(d, ApproveCLISessionHandler{CLISessions: c.cli, Mint: keys.Mint}),
		DenyCLISession:      cqrs.Serve(d, DenyCLISessionHandler{c.cli}),
		GetCLISessionByCode: cqrs.Serve(d, GetCLISessionByCodeHandler{c.cli}),
		RecordConsoleEvents: cqrs.Serve(d, RecordConsoleEventsHandler{c.events}),
		ListConsoleEvents:   cqrs.Serve(d, ListConsoleEventsHandler{c.events}),
	}
	if c.projections != nil {
		h.GetProjectionStatus = cqrs.Serve(d, GetProjectionStatusHandler{Projections: c.projections})
	}
	return h
}
