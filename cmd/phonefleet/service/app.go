// Package service wires phonefleet together: configuration, the database (its
// own embedded cluster when none is configured), migrations, the event
// store, projections and the HTTP edge. cmd/phonefleet and the end-to-end
// tests both start the service through it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/organisations"
	"phonefleet/domain"
	"phonefleet/eventstore"
	httpapi "phonefleet/http"
	"phonefleet/internal/clock"
	"phonefleet/internal/cluster"
	"phonefleet/internal/config"
	"phonefleet/internal/devices"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/gateway"
	"phonefleet/internal/payments"
	"phonefleet/internal/pgembed"
	"phonefleet/internal/smtpmail"
	"phonefleet/migrations"
	"phonefleet/projections"
	"phonefleet/workers"
)

// Version is the build's version, set with -ldflags at release.
var Version = "0.1.0-dev"

// Projections returns every projection the service runs: the audit feed and
// each capability's read models (identity.go, fleet.go, webhooks.go).
func Projections() []projections.Projection {
	return slices.Concat([]projections.Projection{projections.Audit{}},
		identityProjections(), fleetProjections(), webhookProjections(), runProjections(), scheduleProjections(), provisioningProjections(), consoleProjections(), gatewayProjections(), gatewayHubProjections(), notificationProjections(), appProjections(), proxyProjections(), copilotProjections())
}

// DB is an open database: the pool, and the embedded cluster behind it
// when no DATABASE_URL is set.
type DB struct {
	Pool    *pgxpool.Pool
	cluster *pgembed.Cluster
}

// clusterWatchInterval is how often a service on the embedded cluster
// checks that its server still runs (DB.Watch).
const clusterWatchInterval = time.Second

// OpenDB connects to cfg.DatabaseURL, or, when it is empty, starts the
// embedded cluster under cfg.DataDir (or uses the one running there), and
// applies migrations. On the embedded cluster every connection of the
// pool, and every connection made from a copy of its configuration (the
// device host's lock connection), dials the server where it listens now,
// so the pool follows the server when it is started again on another port.
// Close releases it all.
func OpenDB(ctx context.Context, cfg config.Config, logger *slog.Logger) (*DB, error) {
	db := &DB{}
	url := cfg.DatabaseURL
	if url == "" {
		c, err := pgembed.Start(ctx, filepath.Join(cfg.DataDir, "postgres"), logger)
		if err != nil {
			return nil, fmt.Errorf("embedded database: %w", err)
		}
		db.cluster, url = c, c.DSN()
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("invalid DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 32)
	if db.cluster != nil {
		pcfg.ConnConfig.DialFunc = db.cluster.Dial
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("database: %w", err)
	}
	db.Pool = pool
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("database unreachable: %w", err)
	}
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		db.Close(ctx)
		return nil, err
	}
	if len(applied) > 0 {
		logger.Info("migrations applied", "versions", applied)
	}
	return db, nil
}

// Close closes the pool and ends this process's use of the embedded
// cluster, if any: its server is stopped only when no other process uses
// it and a phonefleet process started it (the last user out stops it), so
// an operator command never stops the server of a running service.
func (db *DB) Close(ctx context.Context) {
	if db.Pool != nil {
		db.Pool.Close()
	}
	if db.cluster != nil {
		if err := db.cluster.Close(ctx); err != nil {
			slog.Default().Warn("closing the embedded database", "err", err)
		}
	}
}

// Watch keeps the embedded cluster's server running until ctx ends: when
// it stops underneath the process (stopped by hand, by an older CLI, or
// killed), it is started again, on the same port when that is free, and
// the pool follows it (see OpenDB). With DATABASE_URL it returns at once:
// the pool reconnects by itself when that server comes back.
func (db *DB) Watch(ctx context.Context) {
	if db.cluster != nil {
		db.cluster.Watch(ctx, clusterWatchInterval)
	}
}

// App is a running service.
type App struct {
	cfg    config.Config
	logger *slog.Logger
	db     *DB
	store  *eventstore.Store
	runner *projections.Runner
	server *httpapi.Server
	ln     net.Listener
	orgID  string
	// deps collects what each capability's wiring hands the HTTP edge, and
	// capabilities what it hands the application object.
	deps         httpapi.Deps
	capabilities commands.Capabilities
	// app is the one application object every surface receives.
	app commands.Application
	// devices is the device runtime and its backends.
	devices *devices.Assembly
	// webhookDispatcher is the dispatcher's settings but its recorder
	// (the application's), and payments the payment provider, if any:
	// what wireWebhooks and wireProvisioning leave for the workers.
	webhookDispatcher workers.WebhookDispatcherConfig
	payments          payments.Provider
	// cluster carries device calls to and from the other instances
	// (cluster.go); nil: one instance.
	cluster *cluster.Node
	// gatewayHub serves the gateways' tunnels (gateway_hub.go).
	gatewayHub *gateway.Hub
	// forwardProxy is the managed proxies' default supplier and proxyWake
	// wakes their operations worker (proxies.go).
	forwardProxy *forwardproxy.Server
	proxyWake    chan struct{}
	// workers run beside the server until shutdown (lease expiry, webhook
	// dispatch, …); each returns when its context ends.
	workers []func(ctx context.Context)
	// mail is the SMTP server notifications are e-mailed through (nil:
	// none), notifications their workers (notifications.go).
	mail          *smtpmail.Config
	notifications *workers.Notifications
}

// New opens the database, prepares projections and the HTTP edge, and binds
// the listener (so Addr is known before Run).
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*App, error) {
	db, err := OpenDB(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, logger: logger, db: db}
	// What the service records while it starts is its own act.
	ctx = eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "system", ActorID: "phonefleet",
		RequestID: domain.NewID(domain.PrefixRequest)})
	a.store = eventstore.New(db.Pool, eventstore.WithUpcaster(domain.Events), eventstore.WithGroupCommit())
	a.runner, err = projections.NewRunner(a.store, logger, Projections())
	if err == nil {
		err = a.runner.Ensure(ctx)
	}
	if err == nil && cfg.Mode == "local" {
		a.orgID, err = organisations.EnsureLocalOrganisationHandler{Store: a.store}.Handle(ctx, organisations.EnsureLocalOrganisation{})
	}
	a.deps = httpapi.Deps{Logger: logger, Mode: cfg.Mode, Health: health{a}, LocalOrgID: a.orgID}
	if err == nil {
		// Bound first, so {base_url} is known (a test's port 0).
		if a.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			err = fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
	}
	for _, wire := range []func(context.Context) error{
		// What the application object is built from: each capability,
		// and the parts below them (identity, the way to the other
		// instances, the device runtime).
		a.wireIdentity, a.dialCluster, a.wireFleet, a.startADBSims, a.wireWebhooks, a.wireRuns, a.wireSchedules, a.wireApps, a.wireProvisioning,
		a.wireConsole, a.wireGateways, a.wireNotifications, a.wireProxies, a.wireCopilot, a.wireCheckpoints,
		// The application object, composed once.
		a.wireApplication,
		// Everything that receives it: the device runtime's takeovers, the
		// workers and the surfaces.
		a.serveFleet, a.serveWebhooks, a.serveRuns, a.serveSchedules, a.serveApps, a.serveProvisioning, a.serveNotifications, a.serveProxies, a.serveCopilot, a.serveCheckpoints, a.wireMCP, a.wireVRX, a.serveCluster,
	} {
		if err == nil {
			err = wire(ctx)
		}
	}
	if err != nil {
		a.stopCluster()
		if a.ln != nil {
			_ = a.ln.Close()
		}
		db.Close(ctx)
		return nil, err
	}
	a.server = httpapi.New(a.deps)
	return a, nil
}

// wireApplication builds the one application object from the
// capabilities wired before it and hands it to the HTTP edge.
func (a *App) wireApplication(context.Context) error {
	a.capabilities.Logger = a.logger.With("component", "application")
	a.app = commands.NewApplication(a.capabilities)
	a.deps.App = &a.app
	return nil
}

// Application returns the application object (for the end-to-end tests
// and the operator commands, which use it as every surface does).
func (a *App) Application() *commands.Application { return &a.app }

// Addr is the address the service listens on.
func (a *App) Addr() string { return a.ln.Addr().String() }

// Store returns the event store.
func (a *App) Store() *eventstore.Store { return a.store }

// Run serves until ctx ends, then shuts down gracefully: in-flight requests
// finish, projection subscribers stop, and the embedded database is given
// up (stopped unless another process still uses it). While it serves, it
// keeps the embedded database's server running (DB.Watch).
func (a *App) Run(ctx context.Context) error {
	defer a.db.Close(context.WithoutCancel(ctx))
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, w := range a.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w(bg) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); a.db.Watch(bg) }()
	go func() { defer wg.Done(); a.store.Relay(bg, a.logger) }()
	go func() {
		defer wg.Done()
		if err := a.runner.Run(bg); err != nil {
			a.logger.Error("projections stopped", "err", err)
		}
	}()
	if off := clock.Offset(); off != 0 {
		a.logger.Warn("this build runs its wall clock off the machine's (a chaos suite build)", "offset", off.String())
	}
	a.logger.Info("phonefleet serving", "addr", a.Addr(), "mode", a.cfg.Mode, "version", Version)
	err := a.server.Serve(ctx, a.ln)
	a.stopCluster()
	stopBG()
	wg.Wait()
	a.stopGatewayHub()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	a.logger.Info("phonefleet stopped")
	return err
}

// health reports the database and projections for /healthz.
type health struct{ a *App }

func (h health) Health(ctx context.Context) httpapi.HealthReport {
	var rep httpapi.HealthReport
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := h.a.db.Pool.Ping(ctx); err != nil {
		rep.Database = httpapi.ComponentHealth{OK: false, Error: "database unreachable"}
		return rep
	}
	rep.Database = httpapi.ComponentHealth{OK: true}
	st, err := h.a.runner.Status(ctx)
	if err != nil {
		rep.Database = httpapi.ComponentHealth{OK: false, Error: "projection status unreadable"}
		return rep
	}
	for _, s := range st {
		rep.Projections = append(rep.Projections, httpapi.ProjectionHealth{
			Name: s.Name, Version: s.ActiveVersion, State: s.State, Lag: s.Lag, OK: s.State != "failing"})
	}
	// Payment follow-ups waiting for the operator (money not returned, a
	// subscription not cancelled). A read that fails (the read model not
	// made yet) warns of nothing: the projections above say what is wrong.
	if n, err := projections.CountStuckFollowups(ctx, h.a.db.Pool); err == nil && n > 0 {
		rep.Warnings = append(rep.Warnings, httpapi.HealthWarning{Code: PaymentFollowupsStuck,
			Message: fmt.Sprintf("%d payment follow-up(s) refused or given up wait for the operator: phonefleet payments followups", n)})
	}
	return rep
}

// PaymentFollowupsStuck is the /healthz warning code for payment
// follow-ups refused or given up and neither retried nor settled.
const PaymentFollowupsStuck = "payment_followups_stuck"
