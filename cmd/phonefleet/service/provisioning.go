package service

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/identity"
	"phonefleet/internal/payments"
	"phonefleet/internal/sim"
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
	if err := checkSimModels(catalog); err != nil {
		return fmt.Errorf("SERVICE_CATALOG_FILE %s: %w", a.cfg.CatalogFile, err)
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
		Runs:                  a.capabilities.Runs,
		PublicURL:             a.baseURL(),
		RequireReverification: a.cfg.RequireReverification,
		StepUp:                identity.StepUpVerifier(a.deps.Auth),
		ServedInstances:       served,
		RefuseOutOfStock:      a.cfg.RefuseOutOfStock,
		PaygDeviceLimit:       a.cfg.PAYGDeviceLimit,
		ReadModels:            a.runner,
	})
	a.payments = provider
	return nil
}

// checkSimModels refuses a price list naming a simModel the simulator
// does not have, so a misspelt model stops start-up instead of every
// take and paid phone of its sku.
func checkSimModels(c *domain.Catalog) error {
	for _, s := range c.Skus {
		if s.SimModel == "" {
			continue
		}
		if _, err := sim.LookupModel(s.SimModel); err != nil {
			names := []string{}
			for _, m := range sim.Models() {
				names = append(names, m.Name)
			}
			return fmt.Errorf("catalog: sku %s: simModel %q is not a simulator model (want one of %s)", s.Sku, s.SimModel,
				strings.Join(names, ", "))
		}
	}
	return nil
}

// serveProvisioning adds provisioning's workers, each sending its commands
// through the application object: the fulfilment sweeps (provisioning
// phones as units free up, moving passed estimates, the undelivered-order
// sweep, day passes and cancelled renewals ending); in hosted mode the
// pay-as-you-go pool's returns (every second, the units whose lease ended
// or whose organisation lost pay-as-you-go access; a local deployment
// lends nothing); and, wherever a payment provider is configured, the
// payment follow-ups (cancel or refund at the provider what our own
// decisions ended).
func (a *App) serveProvisioning(context.Context) error {
	a.workers = append(a.workers, a.fulfilmentSweeps(nil).Run)
	if a.cfg.Mode == "hosted" {
		a.workers = append(a.workers,
			workers.PoolReturns{Return: a.app.Provisioning.ReturnPoolDevices, Logger: a.logger.With("worker", "pool-returns")}.Run)
	}
	if a.payments != nil {
		a.workers = append(a.workers, workers.NewPaymentFollowups(workers.PaymentFollowupsConfig{Pool: a.db.Pool,
			Record: a.app.Provisioning.RecordPaymentFollowup, Provider: a.payments,
			Logger: a.logger.With("worker", "payment-followups")}).Run)
	}
	return nil
}

// fulfilmentSweeps is the sweeps worker over the application object, with
// clock now (nil: the wall clock).
func (a *App) fulfilmentSweeps(now func() time.Time) workers.FulfilmentSweeps {
	return workers.FulfilmentSweeps{Sweep: a.app.Provisioning.SweepFulfilment, Pool: a.db.Pool, Now: now,
		Logger: a.logger.With("worker", "fulfilment-sweeps")}
}
