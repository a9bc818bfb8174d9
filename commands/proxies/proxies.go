// Package proxies is the managed proxies capability (spec 1 item 8, 4.5):
// products from the deployment's catalog and their quotes; orders paid
// through the payment provider, settled by its signed webhook events; the
// proxy a paid order issues, from a supplier (a port; the default one is
// the in-process forward proxy of internal/forwardproxy); and operations
// putting devices behind a proxy, taking them off and rotating its
// credentials, performed asynchronously by the proxy-operations worker.
package proxies

import (
	"context"
	"errors"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// Supplier issues proxies: the port behind which a proxy really exists.
// The service makes each proxy's credentials and tells the supplier.
type Supplier interface {
	// Issue makes a proxy of a product that admits username and password,
	// and returns where it listens.
	Issue(ctx context.Context, proxyID string, product domain.ProxyProduct, username, password string) (domain.ProxyEndpoint, error)
	// Rotate replaces a proxy's credentials: the old ones are refused.
	Rotate(ctx context.Context, proxyID, username, password string) error
	// Revoke ends a proxy: its credentials are refused.
	Revoke(ctx context.Context, proxyID string) error
}

// Devices is what managed proxies need of the fleet (*fleet.Fleet
// satisfies it).
type Devices interface {
	// Visible loads a device the caller may use (device_unavailable
	// not_found otherwise, as for a missing one).
	Visible(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error)
	// SetNetworkProxy puts a device behind a proxy (nil: direct again).
	SetNetworkProxy(ctx context.Context, deviceID string, p *domain.NetworkProxy) error
}

// Config is what the capability needs.
type Config struct {
	Store   *eventstore.Store
	Catalog *domain.Catalog
	// Payments is the payment provider; nil: orders answer
	// checkout_unavailable.
	Payments payments.Provider
	// WebhookSecret verifies the provider's events (as provisioning's).
	WebhookSecret string
	Supplier      Supplier
	Devices       Devices
	// Box seals proxy passwords under the server key.
	Box *domain.SecretBox
	// PublicURL is {base_url}: where the payment page sends the browser
	// back to (the console's Proxies page).
	PublicURL string
	// RequireReverification and StepUp: as checkout's (spec 4.1.3, 8).
	RequireReverification bool
	StepUp                func(ctx context.Context, token, subject string) (time.Time, error)
	// Requested, when not nil, is called after an operation is recorded
	// (it wakes the proxy-operations worker).
	Requested  func()
	Now        func() time.Time
	ReadModels cqrs.ReadModels
}

// Proxies is the capability.
type Proxies struct {
	cfg      Config
	accounts *eventstore.Repository[domain.ProxyAccount, domain.Event]
	queries  projections.ProxyQueries
}

var accountAggregate = eventstore.Aggregate[domain.ProxyAccount, domain.Event]{
	Stream: domain.ProxyStream,
	Codec:  domain.Events,
	New:    func(orgID string) domain.ProxyAccount { return domain.ProxyAccount{OrgID: orgID} },
	Apply:  func(a *domain.ProxyAccount, e domain.Event, _ eventstore.Recorded) { a.Apply(e) },
	OrgID:  func(a *domain.ProxyAccount) string { return a.OrgID },
}

// New returns the capability.
func New(cfg Config) *Proxies {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Catalog == nil {
		cfg.Catalog = domain.DefaultCatalog()
	}
	p := &Proxies{cfg: cfg, queries: projections.ProxyQueries{DB: cfg.Store.Pool()}}
	p.accounts = eventstore.NewRepository(cfg.Store, accountAggregate)
	p.accounts.Now = p.now
	return p
}

func (p *Proxies) now() time.Time { return p.cfg.Now().UTC().Truncate(time.Microsecond) }

// decide runs fn on the organisation's proxies and waits for the read
// model.
func (p *Proxies) decide(ctx context.Context, orgID string, fn func(a *domain.ProxyAccount) ([]domain.Event, error)) (domain.ProxyAccount, error) {
	a, c, err := p.accounts.Update(ctx, orgID, fn)
	if err != nil {
		return a, err
	}
	return a, cqrs.Await(ctx, p.cfg.ReadModels, c.Last(), projections.ProxiesName)
}

// Handlers are the capability's entry points.
type Handlers struct {
	ListProxyProducts cqrs.Handler[ListProxyProducts, ProductList]
	QuoteProxy        cqrs.Handler[QuoteProxy, Quote]
	PlaceProxyOrder   cqrs.Handler[PlaceProxyOrder, PlacedOrder]
	ListProxyOrders   cqrs.Handler[ListProxyOrders, []projections.ProxyOrderView]
	GetProxyOrder     cqrs.Handler[GetProxyOrder, projections.ProxyOrderView]
	CancelProxyOrder  cqrs.Handler[CancelProxyOrder, projections.ProxyOrderView]
	// ReceiveProviderEvent settles orders from the provider's signed
	// events (POST /webhooks/stripe, for events about proxy orders).
	ReceiveProviderEvent cqrs.Handler[ReceiveProviderEvent, ProviderEventOutcome]
	ListProxies          cqrs.Handler[ListProxies, []projections.ProxyView]
	GetProxy             cqrs.Handler[GetProxy, projections.ProxyView]
	// RevealProxyCredentials shows an issued proxy's password, once.
	RevealProxyCredentials cqrs.Handler[RevealProxyCredentials, ProxyCredentials]
	// RequestProxyOperation records an operation (POST
	// /v1/proxy-operations); PerformProxyOperations is the worker's pass.
	RequestProxyOperation  cqrs.Handler[RequestProxyOperation, RequestedOperation]
	PerformProxyOperations cqrs.Handler[PerformProxyOperations, int]
	ListProxyOperations    cqrs.Handler[ListProxyOperations, []projections.ProxyOperationView]
	GetProxyOperation      cqrs.Handler[GetProxyOperation, projections.ProxyOperationView]
	// AuthenticateProxy checks credentials presented to the forward proxy.
	AuthenticateProxy cqrs.Handler[AuthenticateProxy, string]
	// DeviceProxy names the proxy a device is behind (the device views).
	DeviceProxy cqrs.Handler[DeviceProxy, string]
	// ProxiesAt names the proxy each receipt's device was behind when it
	// acted.
	ProxiesAt cqrs.Handler[ProxiesAt, []string]
}

// Handlers returns the entry points, each behind d.
func (p *Proxies) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		ListProxyProducts:      cqrs.Serve(d, ListProxyProductsHandler{p}),
		QuoteProxy:             cqrs.Serve(d, QuoteProxyHandler{p}),
		PlaceProxyOrder:        cqrs.Serve(d, PlaceProxyOrderHandler{p}),
		ListProxyOrders:        cqrs.Serve(d, ListProxyOrdersHandler{p}),
		GetProxyOrder:          cqrs.Serve(d, GetProxyOrderHandler{p}),
		CancelProxyOrder:       cqrs.Serve(d, CancelProxyOrderHandler{p}),
		ReceiveProviderEvent:   cqrs.Serve(d, ReceiveProviderEventHandler{p}),
		ListProxies:            cqrs.Serve(d, ListProxiesHandler{p}),
		GetProxy:               cqrs.Serve(d, GetProxyHandler{p}),
		RevealProxyCredentials: cqrs.Serve(d, RevealProxyCredentialsHandler{p}),
		RequestProxyOperation:  cqrs.Serve(d, RequestProxyOperationHandler{p}),
		PerformProxyOperations: cqrs.Serve(d, PerformProxyOperationsHandler{p}),
		ListProxyOperations:    cqrs.Serve(d, ListProxyOperationsHandler{p}),
		GetProxyOperation:      cqrs.Serve(d, GetProxyOperationHandler{p}),
		AuthenticateProxy:      cqrs.Serve(d, AuthenticateProxyHandler{p}),
		DeviceProxy:            cqrs.Serve(d, DeviceProxyHandler{p}),
		ProxiesAt:              cqrs.Serve(d, ProxiesAtHandler{p}),
	}
}

// mayRead: any member of the organisation (devices:read).
func mayRead(a domain.Auth) error { return a.Require(domain.ScopeDevicesRead) }

// mayPay is who may spend money on proxies (spec 4.1, 5.4; issue 25): a
// signed-in admin holding orders:place, or an API key holding
// orders:place (only an admin can mint one); never an OAuth app (it is
// told to use the console) nor a member.
func mayPay(a domain.Auth, what string) error {
	if err := a.DenyApp(what, "the console's Proxies page"); err != nil {
		return err
	}
	if a.Kind == domain.PrincipalAPIKey {
		return a.Require(domain.ScopeOrdersPlace)
	}
	if a.Role != domain.RoleAdmin {
		return domain.Errorf(domain.CodePermissionDenied, "only an organisation admin may %s", what)
	}
	return a.Require(domain.ScopeOrdersPlace)
}

// storeDown is the answer when the store cannot be read or written.
func storeDown(err error) error {
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	return domain.Errorf(domain.CodeServiceUnavailable, "the proxy records cannot be read now; nothing was charged").
		WithRetryable(true).Wrap(err)
}

// awaitErr waits for the read model to apply what c committed.
func awaitErr(p *Proxies, ctx context.Context, c eventstore.Committed) error {
	if len(c.Appends) == 0 {
		return nil
	}
	return cqrs.Await(ctx, p.cfg.ReadModels, c.Last(), projections.ProxiesName)
}
