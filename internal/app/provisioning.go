package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/identity"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/workers"
)

// provisioningProjections are the read models of purchases. Each part of
// provisioning adds its own here.
func provisioningProjections() []projections.Projection {
	return []projections.Projection{projections.Fulfilments{}, projections.PaymentFollowups{}, projections.Usage{}}
}

// wireProvisioning builds the provisioning capability: the price list
// (SERVICE_CATALOG_FILE or the embedded default), the payment provider
// (SERVICE_STRIPE_*; none configured: checkout answers
// checkout_unavailable) and the purchase settings.
func (a *App) wireProvisioning(ctx context.Context) error {
	catalog := domain.DefaultCatalog()
	if a.cfg.CatalogFile != "" {
		b, err := os.ReadFile(a.cfg.CatalogFile)
		if err != nil {
			return fmt.Errorf("SERVICE_CATALOG_FILE: %w", err)
		}
		if catalog, err = domain.ParseCatalog(b); err != nil {
			return fmt.Errorf("SERVICE_CATALOG_FILE %s: %w", a.cfg.CatalogFile, err)
		}
	}
	var provider payments.Provider
	if a.cfg.StripeSecretKey != "" {
		provider = payments.New(payments.Config{SecretKey: a.cfg.StripeSecretKey, APIBase: a.cfg.StripeAPIBase})
	}
	var served []string
	if a.cfg.OAuthIssuer != "" {
		served = []string{strings.TrimRight(a.cfg.OAuthIssuer, "/")}
	}
	a.capabilities.Provisioning = provisioning.New(provisioning.Config{
		Store:                 a.store,
		Catalog:               catalog,
		Payments:              provider,
		WebhookSecret:         a.cfg.StripeWebhookSecret,
		Devices:               a.capabilities.Fleet,
		PublicURL:             a.baseURL(),
		RequireReverification: a.cfg.RequireReverification,
		StepUp:                identity.StepUpVerifier(a.deps.Auth),
		ServedInstances:       served,
		RefuseOutOfStock:      a.cfg.RefuseOutOfStock,
		PaygDeviceLimit:       a.cfg.PAYGDeviceLimit,
		ReadModels:            a.runner,
	})
	a.wirePool()
	a.wireFulfilments()
	if provider != nil {
		// Payment follow-ups (cancel or refund at the provider what our own
		// decisions ended) run wherever a provider is configured.
		a.workers = append(a.workers, func(ctx context.Context) {
			workers.NewPaymentFollowups(workers.PaymentFollowupsConfig{Pool: a.db.Pool, Record: a.app.Provisioning.RecordPaymentFollowup,
				Provider: provider, Logger: a.logger.With("worker", "payment-followups")}).Run(ctx)
		})
	}
	return nil
}
