package app

import (
	"context"

	"phonefleet/commands"
)

// wireOperators builds the operator views (GET /v1/operators/projections):
// every projection's state, lag and rebuild progress, read by the
// projection runner from the database, so the answer covers every
// instance and a rebuild run by `phonefleet projections rebuild`.
func (a *App) wireOperators(context.Context) error {
	a.capabilities.Operators = &commands.OperatorCapability{Projections: a.runner}
	return nil
}
