package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

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
// SERVICE_PROXY_ADDR, else the port it had, remembered in the data
// directory, or a free one beside the service; it admits private
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
	addr, fallback := a.cfg.ProxyAddr, ""
	if addr == "" {
		if addr, fallback, err = rememberedProxyAddr(a.cfg.DataDir, a.ln.Addr().String()); err != nil {
			return err
		}
	}
	// Devices reach the proxy at the listener's host, or, where it listens
	// on every address, at the deployment's public host.
	advertise := ""
	if host, _, err := net.SplitHostPort(addr); err == nil && (host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()) {
		if u, err := url.Parse(a.baseURL()); err == nil {
			advertise = u.Hostname()
		}
	}
	fpConfig := forwardproxy.Config{
		AdvertiseHost: advertise,
		Auth: func(ctx context.Context, user, pass string) (string, bool, error) {
			id, err := a.app.Proxies.AuthenticateProxy.Handle(ctx, proxies.AuthenticateProxy{Username: user, Password: pass})
			return id, id != "", err
		},
		AllowPrivate: a.cfg.Mode == "local",
		Logger:       a.logger.With("component", "forward-proxy"),
	}
	fp, err := forwardproxy.Listen(addr, fpConfig)
	if err != nil && fallback != "" {
		// The port it had is taken now: a new one, remembered in turn
		// (proxies issued on the old port no longer reach it).
		a.logger.Warn("forward proxy: the remembered address is taken; listening on a new port", "addr", addr, "err", err)
		addr = fallback
		fp, err = forwardproxy.Listen(addr, fpConfig)
	}
	if err != nil {
		return err
	}
	if a.cfg.ProxyAddr == "" {
		if err := os.WriteFile(filepath.Join(a.cfg.DataDir, proxyAddrFile), []byte(fp.Addr()), 0o600); err != nil {
			return fmt.Errorf("forward proxy: remember its address: %w", err)
		}
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

// proxyAddrFile, in the data directory, remembers the forward proxy's
// address when SERVICE_PROXY_ADDR is unset: issued proxies record their
// endpoint, so the port must outlive a restart.
const proxyAddrFile = "forward-proxy.addr"

// rememberedProxyAddr is where the forward proxy listens when no address
// is configured: the address it had (in the data directory), else a free
// port on the service's host. fallback is the free-port address, for when
// the remembered one is taken.
func rememberedProxyAddr(dataDir, serviceAddr string) (addr, fallback string, err error) {
	host, _, err := net.SplitHostPort(serviceAddr)
	if err != nil {
		return "", "", err
	}
	free := net.JoinHostPort(host, "0")
	b, err := os.ReadFile(filepath.Join(dataDir, proxyAddrFile))
	if errors.Is(err, fs.ErrNotExist) {
		return free, "", os.MkdirAll(dataDir, 0o700)
	}
	if err != nil {
		return "", "", fmt.Errorf("forward proxy: %w", err)
	}
	if _, port, err := net.SplitHostPort(strings.TrimSpace(string(b))); err == nil {
		return net.JoinHostPort(host, port), free, nil
	}
	return free, "", nil
}
