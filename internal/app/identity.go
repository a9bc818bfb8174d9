package app

import (
	"context"

	"phonefleet/projections"
)

// identityProjections are the read models of API keys and OAuth verification.
func identityProjections() []projections.Projection { return nil }

// wireIdentity prepares API keys and OAuth verification: it fills a.deps and adds workers.
func (a *App) wireIdentity(ctx context.Context) error { return nil }
