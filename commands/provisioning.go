package commands

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
)

// ProvisioningConfig is what the provisioning capability needs: the price
// list, the payment provider and the deployment's purchase settings
// (ARCHITECTURE.md, "Provisioning").
type ProvisioningConfig struct {
	Store *eventstore.Store
	// Catalog is the price list and inventory.
	Catalog *domain.Catalog
	// Payments is the payment provider; nil means none is configured:
	// checkout, the portal and the upcoming invoice answer
	// checkout_unavailable.
	Payments payments.Provider
	// WebhookSecret verifies POST /webhooks/stripe; empty means the
	// provider's events cannot be received (the route answers
	// service_unavailable).
	WebhookSecret string
	// Fleet registers the devices fulfilments hand over, and retires them
	// when a fulfilment is cancelled.
	Fleet *Fleet
	// PublicURL is {base_url}: where the hosted payment page and the portal
	// send the browser back to.
	PublicURL string
	// RequireReverification makes checkout ask for a fresh identity check
	// (header x-service-step-up, at most 10 minutes old).
	RequireReverification bool
	// StepUp verifies an x-service-step-up token for a subject and returns
	// when the identity check happened; nil with RequireReverification set
	// refuses every checkout with reverification_required.
	StepUp func(ctx context.Context, token, subject string) (time.Time, error)
	// ServedInstances are the sign-in instances (token issuers) whose
	// organisations this deployment sells to; empty serves every instance.
	// Another instance's organisation answers instance_not_served.
	ServedInstances []string
	// RefuseOutOfStock refuses a purchase that cannot ship today with
	// out_of_stock instead of taking it as awaiting_provisioning.
	RefuseOutOfStock bool
	// PaygDeviceLimit is how many pool devices one organisation may hold
	// at once.
	PaygDeviceLimit int
	// PromiseWithin is how soon a paid phone with no free unit is promised
	// (default 24 hours).
	PromiseWithin time.Duration
	// Now is the clock; nil means time.Now. Tests inject one (the 24-hour
	// idempotency window, day passes, sweeps).
	Now func() time.Time
	// Wait, when not nil, returns once the named read model has applied
	// what a command appended (projections.Runner.WaitFor), so the caller
	// can answer from it.
	Wait func(ctx context.Context, projection string, a eventstore.Appended) error
}

// Provisioning is the provisioning capability: the price list, checkout,
// the payment provider's webhook, fulfilments, admission, billing, the
// pay-as-you-go pool. Each handler embeds it.
type Provisioning struct {
	cfg         ProvisioningConfig
	pool        *pgxpool.Pool
	store       *eventstore.Store
	accounts    *eventstore.Repository[domain.Account, domain.Event]
	fulfilments *eventstore.Repository[domain.Fulfilment, domain.Event]
}

// accountAggregate folds an organisation's billing account (its checkout
// attempts and orders).
var accountAggregate = eventstore.Aggregate[domain.Account, domain.Event]{
	Stream: domain.AccountStream,
	Codec:  domain.Events,
	New:    func(orgID string) domain.Account { return domain.Account{OrgID: orgID} },
	Apply:  func(a *domain.Account, e domain.Event, at eventstore.Recorded) { a.Apply(e, at.Version) },
	OrgID:  func(a *domain.Account) string { return a.OrgID },
}

// fulfilmentAggregate folds one fulfilment's stream.
var fulfilmentAggregate = eventstore.Aggregate[domain.Fulfilment, domain.Event]{
	Stream: domain.FulfilmentStream,
	Codec:  domain.Events,
	New:    func(string) domain.Fulfilment { return domain.Fulfilment{} },
	Apply:  func(f *domain.Fulfilment, e domain.Event, at eventstore.Recorded) { f.Apply(e, at.Version) },
	OrgID:  func(f *domain.Fulfilment) string { return f.OrgID },
}

// NewProvisioning returns the provisioning capability.
func NewProvisioning(cfg ProvisioningConfig) *Provisioning {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Catalog == nil {
		cfg.Catalog = domain.DefaultCatalog()
	}
	if cfg.PromiseWithin <= 0 {
		cfg.PromiseWithin = 24 * time.Hour
	}
	if cfg.PaygDeviceLimit <= 0 {
		cfg.PaygDeviceLimit = 2
	}
	return &Provisioning{cfg: cfg, pool: cfg.Store.Pool(), store: cfg.Store,
		accounts:    eventstore.NewRepository(cfg.Store, accountAggregate),
		fulfilments: eventstore.NewRepository(cfg.Store, fulfilmentAggregate)}
}

// Catalog returns the price list.
func (p *Provisioning) Catalog() *domain.Catalog { return p.cfg.Catalog }

func (p *Provisioning) now() time.Time { return p.cfg.Now().UTC().Truncate(time.Microsecond) }

// wait returns once projection has applied what c appended.
func (p *Provisioning) wait(ctx context.Context, projection string, c eventstore.Committed) error {
	if p.cfg.Wait == nil || len(c.Appends) == 0 {
		return nil
	}
	return p.cfg.Wait(ctx, projection, c.Last())
}

// provisioningPart is one part of provisioning (checkout, the provider's
// webhook, fulfilments, billing, the pool, …): how it sets its entries of
// the application object, and how it sets them on a deployment without
// provisioning. Each part appends itself to provisioningParts from an init
// function in its own file, so NewApplication needs no list to keep.
type provisioningPart struct {
	name        string
	register    func(p *Provisioning, l *slog.Logger, c *Commands, q *Queries)
	unavailable func(l *slog.Logger, c *Commands, q *Queries, why func() error)
}

var provisioningParts []provisioningPart

// registerProvisioning sets every provisioning entry of the application
// object: from p, or answering service_unavailable when p is nil.
func registerProvisioning(l *slog.Logger, p *Provisioning, c *Commands, q *Queries) {
	down := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "purchases are not served by this deployment")
	}
	for _, part := range provisioningParts {
		if p != nil {
			part.register(p, l, c, q)
		} else {
			part.unavailable(l, c, q, down)
		}
	}
}
