package service

import (
	"context"

	"phonefleet/commands/console"
	"phonefleet/projections"
)

// consoleProjections are the read models of the console capability: CLI
// sign-in needs none (every read is by session id or code, from the
// streams); the telemetry is read from its own.
func consoleProjections() []projections.Projection {
	return []projections.Projection{projections.ConsoleEvents{}}
}

// wireConsole builds the console capability: CLI sign-in
// (/v1/cli-sessions; it mints keys through the application object's key
// commands), the console's telemetry (/v1/console/events), whose reads
// wait for their read model, and the operator views
// (/v1/operators/projections: every projection's state, lag and rebuild
// progress, read by the projection runner from the database, so the
// answer covers every instance and a rebuild run by `phonefleet
// projections rebuild`).
func (a *App) wireConsole(context.Context) error {
	a.capabilities.Console = console.New(console.Config{Store: a.store, Projections: a.runner, ReadModels: a.runner})
	return nil
}
