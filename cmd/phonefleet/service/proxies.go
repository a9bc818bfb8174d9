package service

import (
	"context"
	"net"
	"net/url"

	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/workers"
)

// proxyProjections are the read models of managed proxies.
func proxyProjections() []projections.Projection {
	return []projections.Projection{projections.Proxies{}}
}

// wireProxies builds managed proxies: the catalog's proxy products (the
// provisioning price list's), the payment provider and its webhook secret,
// the default supplier (the in-process forward proxy, listening on
// SERVICE_PROXY_ADDR or a free port beside the service; it admits private
// destinations in local mode only) and the server key that seals proxy
// passwords (the webhook secrets' key).
func (a *App) wireProxies(context.Context) error {
	key, err := LoadOrCreateWebhookKey(a.cfg.DataDir)
	if err != nil {
		return err
	}
	box, err := domain.NewSecretBox(key)
	if err != nil {
		return err
	}
	addr := a.cfg.ProxyAddr
	if addr == "" {
		host, _, err := net.SplitHostPort(a.ln.Addr().String())
		if err != nil {
			return err
		}
		addr = net.JoinHostPort(host, "0")
	}
	// Devices reach the proxy at the listener's host, or, where it listens
	// on every address, at the deployment's public host.
	advertise := ""
	if host, _, err := net.SplitHostPort(addr); err == nil && (host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()) {
		if u, err := url.Parse(a.baseURL()); err == nil {
			advertise = u.Hostname()
		}
	}
	fp, err := forwardproxy.Listen(addr, forwardproxy.Config{
		AdvertiseHost: advertise,
		Auth: func(ctx context.Context, user, pass string) (string, bool, error) {
			id, err := a.app.Proxies.AuthenticateProxy.Handle(ctx, proxies.AuthenticateProxy{Username: user, Password: pass})
			return id, id != "", err
		},
		AllowPrivate: a.cfg.Mode == "local",
		Logger:       a.logger.With("component", "forward-proxy"),
	})
	if err != nil {
		return err
	}
	a.forwardProxy = fp
	catalog := domain.DefaultCatalog()
	if a.capabilities.Provisioning != nil {
		catalog = a.capabilities.Provisioning.Catalog()
	}
	a.proxyWake = make(chan struct{}, 1)
	a.capabilities.Proxies = proxies.New(proxies.Config{
		Store: a.store, Catalog: catalog, Payments: a.payments, WebhookSecret: a.cfg.StripeWebhookSecret,
		Supplier: fp, Devices: a.capabilities.Fleet, Box: box, PublicURL: a.baseURL(),
		RequireReverification: a.cfg.RequireReverification, StepUp: identity.StepUpVerifier(a.deps.Auth),
		Requested: func() {
			select {
			case a.proxyWake <- struct{}{}:
			default:
			}
		},
		ReadModels: a.runner,
	})
	return nil
}

// serveProxies runs the forward proxy and the proxy-operations worker,
// which performs operations through the application object.
func (a *App) serveProxies(context.Context) error {
	a.workers = append(a.workers, a.forwardProxy.Run, workers.ProxyOperations{Perform: a.app.Proxies.PerformProxyOperations,
		Wake: a.proxyWake, Logger: a.logger.With("worker", "proxy-operations")}.Run)
	return nil
}
