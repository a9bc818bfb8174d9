package provisioning

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// Config is what the provisioning capability needs: the price
// list, the payment provider and the deployment's purchase settings
// (ARCHITECTURE.md, "Provisioning").
type Config struct {
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
	// Devices is the fleet: it registers the devices fulfilments hand over
	// and the pool lends, and retires them when a fulfilment ends or a
	// unit goes back; nil: no device is handed over.
	Devices Devices
	// Runs ends the runs on a device provisioning retires (a fulfilment's
	// end, a pool unit going back), in the same unit; nil: no runs.
	Runs RunsOnDevice
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
	// Now is the clock; nil means clock.Now. Tests inject one (the 24-hour
	// idempotency window, day passes, sweeps).
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the read models
	// a command's caller answers from.
	ReadModels cqrs.ReadModels
}

// Devices is what provisioning needs of the fleet
// (commands.Fleet satisfies it).
type Devices interface {
	// State returns a device's state.
	State(ctx context.Context, deviceID string) (domain.Device, int64, error)
	// DecideInto adds a device's events (its retirement) to a unit
	// provisioning commits.
	DecideInto(ctx context.Context, u *eventstore.Unit, deviceID string, decide func(d *domain.Device) ([]domain.Event, error)) error
	// RegisterInto adds a new device's registration, and the events then
	// decides on it (a pool unit's lease), to a unit: a pool unit, or a
	// paid phone's unit with its claim and its fulfilment.
	RegisterInto(u *eventstore.Unit, reg domain.DeviceRegistered, then func(d *domain.Device) ([]domain.Event, error)) (domain.Device, error)
}

// RunsOnDevice is what provisioning needs of the runs (commands/runs.Runs
// satisfies it).
type RunsOnDevice interface {
	// EndRunsOnDeviceInto adds to a unit that retires deviceID the end of
	// every run on it (holder: the lease's holder as the retirement saw it),
	// failed, reason device_lost, with detail.
	EndRunsOnDeviceInto(ctx context.Context, u *eventstore.Unit, deviceID string, holder domain.Actor, detail string, now time.Time) error
}

// Provisioning is the provisioning capability: the price list, checkout,
// the payment provider's webhook, fulfilments, admission, billing, the
// pay-as-you-go pool. Each handler embeds it.
type Provisioning struct {
	cfg         Config
	pool        *pgxpool.Pool
	store       *eventstore.Store
	accounts    *eventstore.Repository[domain.Account, domain.Event]
	fulfilments *eventstore.Repository[domain.Fulfilment, domain.Event]
	inventory   *eventstore.Repository[domain.Inventory, domain.Event]
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

// inventoryAggregate folds one slot's inventory stream (the units its
// fulfilments hold).
var inventoryAggregate = eventstore.Aggregate[domain.Inventory, domain.Event]{
	Stream: domain.InventoryStream,
	Codec:  domain.Events,
	New:    func(slot string) domain.Inventory { return domain.Inventory{Slot: slot} },
	Apply:  func(i *domain.Inventory, e domain.Event, at eventstore.Recorded) { i.Apply(e, at.Version) },
	OrgID:  func(i *domain.Inventory) string { return i.OrgID },
}

// New returns the provisioning capability.
func New(cfg Config) *Provisioning {
	if cfg.Now == nil {
		cfg.Now = clock.Now
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
		fulfilments: eventstore.NewRepository(cfg.Store, fulfilmentAggregate),
		inventory:   eventstore.NewRepository(cfg.Store, inventoryAggregate)}
}

// Catalog returns the price list.
func (p *Provisioning) Catalog() *domain.Catalog { return p.cfg.Catalog }

func (p *Provisioning) now() time.Time { return p.cfg.Now().UTC().Truncate(time.Microsecond) }

// wait returns once projection has applied what c appended.
func (p *Provisioning) wait(ctx context.Context, projection string, c eventstore.Committed) error {
	return cqrs.Await(ctx, p.cfg.ReadModels, c.Last(), projection)
}

// Handlers are the provisioning capability's entry points of
// the application object.
type Handlers struct {
	// The payment provider's webhook (POST /webhooks/stripe).
	ReceiveProviderEvent cqrs.Handler[ReceiveProviderEvent, ProviderEventReceipt]
	// RecordPaymentFollowup is sent by the payment follow-up reactor.
	RecordPaymentFollowup cqrs.Handler[RecordPaymentFollowup, eventstore.Appended]
	// Fulfilments: the customer's Cancel, Return and cancel-renewal
	// (/v1/fulfilments/{id}/…), the owner's refund (phonefleet fulfilments
	// refund) and the fulfilment sweeps' step on one fulfilment.
	CancelFulfilment        cqrs.Handler[CancelFulfilment, projections.FulfilmentView]
	ReturnFulfilment        cqrs.Handler[ReturnFulfilment, projections.FulfilmentView]
	CancelFulfilmentRenewal cqrs.Handler[CancelFulfilmentRenewal, FulfilmentRenewal]
	RefundFulfilment        cqrs.Handler[RefundFulfilment, domain.Fulfilment]
	SweepFulfilment         cqrs.Handler[SweepFulfilment, string]
	// The shared pay-as-you-go pool: take a unit (POST /v1/devices/take);
	// the pool-returns worker's pass putting back those whose lease ended.
	TakePoolDevice    cqrs.Handler[TakePoolDevice, TakenPoolDevice]
	ReturnPoolDevices cqrs.Handler[ReturnPoolDevices, int]
	// OpenBillingPortal opens the provider's billing portal (POST
	// /v1/billing/portal-sessions).
	OpenBillingPortal cqrs.Handler[OpenBillingPortal, BillingPortalSession]
	// StartCheckout begins a purchase (POST /v1/checkout-sessions).
	StartCheckout cqrs.Handler[StartCheckout, CheckoutAnswer]

	// Fulfilments (GET /v1/fulfilments, …/estimate-history,
	// …/renewal-status).
	ListFulfilments        cqrs.Handler[ListFulfilments, projections.FulfilmentPage]
	GetFulfilmentEstimates cqrs.Handler[GetFulfilmentEstimates, FulfilmentEstimates]
	GetFulfilmentRenewal   cqrs.Handler[GetFulfilmentRenewal, FulfilmentRenewal]
	// GetUsage answers device time per billing period (GET /v1/usage).
	GetUsage cqrs.Handler[GetUsage, UsageReport]
	// GetUpcomingInvoice answers the organisation's next invoice (GET
	// /v1/billing/upcoming).
	GetUpcomingInvoice cqrs.Handler[GetUpcomingInvoice, UpcomingInvoice]
	// Reconcile compares the provider's records with the orders and
	// fulfilments (the operator's phonefleet fulfilments reconcile).
	Reconcile cqrs.Handler[Reconcile, ReconcileReport]
	// The operator's payment follow-up tools (phonefleet payments
	// followups, … retry, … settle).
	ListStuckFollowups    cqrs.Handler[ListStuckFollowups, []projections.FollowupView]
	RetryPaymentFollowup  cqrs.Handler[RetryPaymentFollowup, domain.PaymentFollowupRetried]
	SettlePaymentFollowup cqrs.Handler[SettlePaymentFollowup, domain.PaymentFollowupSettled]
	// The price list with live inventory (GET /v1/skus) and the
	// organisation's onboarding and purchase status (GET /v1/admission).
	GetPriceList cqrs.Handler[GetPriceList, PriceList]
	GetAdmission cqrs.Handler[GetAdmission, Admission]
}

// Handlers returns the provisioning capability's entry points, each
// behind d.
func (p *Provisioning) Handlers(d cqrs.Decorator) Handlers {
	pool := newPoolPart(p)
	return Handlers{
		ReceiveProviderEvent:    cqrs.Serve(d, ReceiveProviderEventHandler{p}),
		RecordPaymentFollowup:   cqrs.Serve(d, RecordPaymentFollowupHandler{Store: p.store}),
		CancelFulfilment:        cqrs.Serve(d, CancelFulfilmentHandler{p}),
		ReturnFulfilment:        cqrs.Serve(d, ReturnFulfilmentHandler{p}),
		CancelFulfilmentRenewal: cqrs.Serve(d, CancelFulfilmentRenewalHandler{p}),
		RefundFulfilment:        cqrs.Serve(d, RefundFulfilmentHandler{p}),
		SweepFulfilment:         cqrs.Serve(d, SweepFulfilmentHandler{p}),
		TakePoolDevice:          cqrs.Serve(d, TakePoolDeviceHandler{pool}),
		ReturnPoolDevices:       cqrs.Serve(d, ReturnPoolDevicesHandler{pool}),
		OpenBillingPortal:       cqrs.Serve(d, OpenBillingPortalHandler{p}),
		StartCheckout:           cqrs.Serve(d, StartCheckoutHandler{p}),
		ListFulfilments:         cqrs.Serve(d, ListFulfilmentsHandler{p}),
		GetFulfilmentEstimates:  cqrs.Serve(d, GetFulfilmentEstimatesHandler{p}),
		GetFulfilmentRenewal:    cqrs.Serve(d, GetFulfilmentRenewalHandler{p}),
		GetUsage:                cqrs.Serve(d, GetUsageHandler{p}),
		GetUpcomingInvoice:      cqrs.Serve(d, GetUpcomingInvoiceHandler{p}),
		GetPriceList:            cqrs.Serve(d, GetPriceListHandler{p}),
		GetAdmission:            cqrs.Serve(d, GetAdmissionHandler{p}),
		Reconcile:               cqrs.Serve(d, ReconcileHandler{p}),
		ListStuckFollowups:      cqrs.Serve(d, ListStuckFollowupsHandler{p}),
		RetryPaymentFollowup:    cqrs.Serve(d, RetryPaymentFollowupHandler{p}),
		SettlePaymentFollowup:   cqrs.Serve(d, SettlePaymentFollowupHandler{p}),
	}
}
