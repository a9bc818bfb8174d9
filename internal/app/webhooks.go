package app

import (
	"context"

	"phonefleet/projections"
)

// webhookProjections are the read models of webhook subscriptions and delivery.
func webhookProjections() []projections.Projection { return nil }

// wireWebhooks prepares webhook subscriptions and delivery: it fills a.deps and adds workers.
func (a *App) wireWebhooks(ctx context.Context) error { return nil }
