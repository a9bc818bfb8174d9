// Package fleetwire assembles the device fleet — the sim host, the
// backend registry, the device runtime and the fleet's commands — in one
// place, for the service (internal/app) and for the tests that run the
// fleet (internal/fleettest) alike.
//
// It is a package of its own because neither user can hold it:
// internal/devices cannot import commands (commands imports it, through
// its port's types), and internal/app cannot be imported by fleettest
// (the http package's tests import fleettest, and app imports http).
package fleetwire

import (
	"context"
	"log/slog"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/adb"
	"phonefleet/internal/backends"
	"phonefleet/internal/devices"
	"phonefleet/projections"
	"phonefleet/workers"
)

// Config configures New.
type Config struct {
	Store *eventstore.Store
	// Runner gives the commands read-your-writes on the fleet's read
	// models.
	Runner *projections.Runner
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// QueueLimit bounds each device's queue; zero means
	// devices.DefaultQueueLimit.
	QueueLimit int
	// FrameRetention is how long frames stay readable; zero means
	// devices.DefaultFrameRetention.
	FrameRetention time.Duration
	// WaitForReceipts sets commands.FleetConfig.WaitForReceipts.
	WaitForReceipts bool
	// Wrap, when set, wraps every resolved backend (tests inject faults
	// with it).
	Wrap func(d *domain.Device, b domain.Backend) domain.Backend
	// ADBAddr is the adb server that drives the adb devices
	// (SERVICE_ADB_ADDR); empty means adb.DefaultAddr.
	ADBAddr string
	// Catalog returns the APK install_app sends to an adb device for a
	// catalog package; nil means the sim catalog's APKs
	// (backends.CatalogAPK).
	Catalog func(pkg string) ([]byte, bool)
	// Gateways serves the devices gateways bring, and holds their hosts,
	// in this process (the gateway hub); nil means none are served here.
	Gateways Gateways
}

// Gateways is what the fleet needs of the gateway hub: the gateways'
// hosts it holds and their devices' backends.
type Gateways interface {
	devices.HostSet
	backends.GatewayBackends
}

// Fleet is the assembled fleet.
type Fleet struct {
	Commands *fleet.Fleet
	// Runtime runs device work; run its Run until shutdown.
	Runtime  *devices.Runtime
	Sim      *backends.SimHost
	ADB      *backends.ADBHost
	Registry *backends.Registry
}

// New assembles the fleet and prepares its runtime: it tries to become
// the devices' host and, if it does, first marks the actions an earlier
// process left unfinished as outcome unknown. Call it before serving
// requests. Errors are the database's.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The adb devices are driven by the process holding the sim host
	// claim too (one claim, one takeover pass for every device).
	fl := &Fleet{Sim: backends.NewSimHost(cfg.Store.Pool()), ADB: backends.NewADBHost(adb.New(cfg.ADBAddr), cfg.Catalog)}
	fl.Registry = &backends.Registry{Sim: fl.Sim, ADB: fl.ADB, Gateways: cfg.Gateways, Wrap: cfg.Wrap}
	// The takeover hook runs only from Prepare and Run, once the commands
	// it sends exist.
	takeover := func(ctx context.Context) error {
		mark := cqrs.Serve(cqrs.Decorator{Logger: cfg.Logger.With("component", "application")}, fl.Commands.MarkAbandonedActions())
		return workers.AbandonedActions{Mark: mark, Host: domain.HostSim, Logger: cfg.Logger}.RunOnce(ctx)
	}
	fl.Runtime = devices.New(devices.Config{Backends: fl.Registry, Host: fl.Sim, Gateways: cfg.Gateways, OnHost: takeover,
		QueueLimit: cfg.QueueLimit, FrameRetention: cfg.FrameRetention, Logger: cfg.Logger})
	fl.Commands = fleet.New(fleet.Config{Store: cfg.Store, ReadModels: cfg.Runner, Runtime: fl.Runtime,
		Now: cfg.Now, WaitForReceipts: cfg.WaitForReceipts, HostState: backends.HostState(cfg.Store.Pool())})
	if err := fl.Runtime.Prepare(ctx); err != nil {
		fl.Runtime.Stop() // gives the host claim back
		return nil, err
	}
	return fl, nil
}
