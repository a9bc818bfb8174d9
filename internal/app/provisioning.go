package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"phonefleet/commands"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/workers"
)

// provisioningProjections are the read models of purchases. Each part of
// provisioning adds its own here.
func provisioningProjections() []projections.Projection {
	return []projections.Projection{projections.Fulfilments{}, projections.PaymentFollowups{}}
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
	a.capabilities.Provisioning = commands.NewProvisioning(commands.ProvisioningConfig{
		Store:                 a.store,
		Catalog:               catalog,
		Payments:              provider,
		WebhookSecret:         a.cfg.StripeWebhookSecret,
		Fleet:                 a.capabilities.Fleet,
		PublicURL:             a.baseURL(),
		RequireReverification: a.cfg.RequireReverification,
		StepUp:                identity.StepUpVerifier(a.deps.Auth),
		ServedInstances:       served,
		RefuseOutOfStock:      a.cfg.RefuseOutOfStock,
		PaygDeviceLimit:       a.cfg.PAYGDeviceLimit,
		Wait: func(ctx context.Context, name string, ap eventstore.Appended) error {
			return a.runner.WaitFor(ctx, name, ap)
		},
	})
	a.wirePool()
	a.wireFulfilments()
	if provider != nil {
		// Payment follow-ups (cancel or refund at the provider what our own
		// decisions ended) run wherever a provider is configured.
		a.workers = append(a.workers, workers.NewPaymentFollowups(workers.PaymentFollowupsConfig{Pool: a.db.Pool,
			Store: a.store, Provider: provider, Logger: a.logger.With("worker", "payment-followups")}).Run)
	}
	return nil
}
