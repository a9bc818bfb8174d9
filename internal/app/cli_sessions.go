package app

import (
	"context"

	"phonefleet/commands"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// cliSessionProjections are the read models of CLI sign-in and the
// console's telemetry: sign-in needs none (every read is by session id or
// code, from the streams); the telemetry is read from its own.
func cliSessionProjections() []projections.Projection {
	return []projections.Projection{projections.ConsoleEvents{}}
}

// wireCLISessions builds CLI sign-in (/v1/cli-sessions; it mints keys
// through the application object's key commands) and the console's
// telemetry (/v1/console/events), whose reads wait for their read model.
func (a *App) wireCLISessions(context.Context) error {
	a.capabilities.CLISessions = commands.NewCLISessions(commands.CLISessionConfig{Store: a.store})
	a.capabilities.ConsoleEvents = commands.NewConsoleEvents(commands.ConsoleEventConfig{Store: a.store,
		Wait: func(ctx context.Context, ap eventstore.Appended) error {
			return a.runner.WaitFor(ctx, projections.ConsoleEventsName, ap)
		}})
	return nil
}
