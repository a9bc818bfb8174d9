package devices

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/internal/adb"
	"phonefleet/internal/backends"
)

// AssembleConfig configures Assemble.
type AssembleConfig struct {
	// Pool is the service's database: the sim host's claim and the sim
	// phones' saved states.
	Pool *pgxpool.Pool
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
	// Transport carries device calls to the other instances (the
	// cluster's node); nil means one instance.
	Transport Transport
	// Wrap, when set, wraps every resolved backend (tests inject faults
	// with it).
	Wrap func(d *domain.Device, b domain.Backend) domain.Backend
	// QueueLimit bounds each device's queue; zero means DefaultQueueLimit.
	QueueLimit int
	// FrameRetention is how long frames stay readable; zero means
	// DefaultFrameRetention.
	FrameRetention time.Duration
	Logger         *slog.Logger
}

// Gateways is what the runtime needs of the gateway hub: the gateways'
// hosts this process holds and their devices' backends.
type Gateways interface {
	HostSet
	backends.GatewayBackends
}

// Assembly is the device runtime as the service runs it, with the parts
// the wiring hands on: the sim host (whose claim is the claim on the sim
// and adb devices), the adb host and the backend registry.
type Assembly struct {
	Runtime  *Runtime
	Sim      *backends.SimHost
	ADB      *backends.ADBHost
	Registry *backends.Registry
}

// Assemble builds the device runtime over the service's backends: sim
// phones, adb devices and, through cfg.Gateways, the gateways' devices.
// The adb devices are driven by the process holding the sim host claim
// too: one claim, one takeover pass for every device it drives. It drives
// nothing until Prepare or Run makes this process the host.
func Assemble(cfg AssembleConfig) *Assembly {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Assembly{Sim: backends.NewSimHost(cfg.Pool), ADB: backends.NewADBHost(adb.New(cfg.ADBAddr), cfg.Catalog)}
	a.Registry = &backends.Registry{Sim: a.Sim, ADB: a.ADB, Gateways: cfg.Gateways, Wrap: cfg.Wrap}
	var gateways HostSet
	if cfg.Gateways != nil {
		gateways = cfg.Gateways
	}
	a.Runtime = New(Config{Backends: a.Registry, Host: a.Sim, Gateways: gateways,
		Transport: cfg.Transport, HostState: backends.HostState(cfg.Pool), QueueLimit: cfg.QueueLimit, FrameRetention: cfg.FrameRetention, Logger: cfg.Logger})
	return a
}
