// Package fleettest runs the device fleet (event store, fleet read models,
// the device runtime as the service assembles it, the fleet and run
// capabilities and their application object) on a real PostgreSQL
// database for tests of the packages that build on it. It is test support
// only.
package fleettest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/backends"
	"phonefleet/internal/devices"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// Quiet discards logs.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Clock is a settable clock for tests that must not wait for wall time.
type Clock = testutil.Clock

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return testutil.NewClock(t) }

// Options configure Start.
type Options struct {
	// DatabaseURL is the database; empty means a fresh one for the test.
	DatabaseURL string
	// MaxConns sizes the pool; zero means 10 (the test server is shared).
	MaxConns int32
	// Tracer, when set, sees every statement the pool sends (a test
	// counting round trips).
	Tracer pgx.QueryTracer
	// OrgID is the organisation; empty means a new id.
	OrgID string
	// Devices is how many sim phones to register in OrgID (only when the
	// organisation has none yet, so a restarted environment keeps its own).
	Devices int
	// QueueLimit bounds each device's queue (zero = the default).
	QueueLimit int
	// Clock, when set, is the fleet's clock.
	Clock *Clock
	// Wrap wraps every resolved backend (fault injection).
	Wrap func(d *domain.Device, b domain.Backend) domain.Backend
	// WaitForReceipts sets fleetwire.Config.WaitForReceipts.
	WaitForReceipts bool
	// FrameRetention sets fleetwire.Config.FrameRetention.
	FrameRetention time.Duration
	// Transport carries device calls to the other fleets of a test (as
	// the cluster does between instances); nil means none.
	Transport devices.Transport
	// ADBAddr is the adb server the fleet's adb devices are driven
	// through (testutil.ADBServer); empty means adb.DefaultAddr, which
	// tests must not touch, so set it in every test with adb devices.
	ADBAddr string
}

// Env is a running fleet.
type Env struct {
	URL      string
	Pool     *pgxpool.Pool
	Store    *eventstore.Store
	Runner   *projections.Runner
	Registry *backends.Registry
	Sim      *backends.SimHost
	// ADB drives the adb devices through Options.ADBAddr.
	ADB   *backends.ADBHost
	Fleet *fleet.Fleet
	// Runs is the run capability over Fleet (vrxBaseUrl on http://vrx.test).
	Runs *runs.Runs
	// App is the application object over Fleet and Runs, as every
	// consumer receives it.
	App     commands.Application
	Runtime *devices.Runtime
	// Calls serve the device calls other fleets forward to this one,
	// through App, as the cluster's node serves them.
	Calls     devices.Calls
	OrgID     string
	DeviceIDs []string
	// Auth is the organisation's local operator (every scope).
	Auth domain.Auth
	Now  func() time.Time

	// settle is the takeover pass the runtime runs when it becomes the
	// host.
	settle   devices.Settle
	runCtx   context.Context
	stop     context.CancelFunc
	done     sync.WaitGroup
	stopOnce sync.Once
}

// Start assembles and runs the fleet; it stops at the end of the test.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = testutil.DatabaseURL(t)
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = 10
	}
	if opts.OrgID == "" {
		opts.OrgID = domain.NewID(domain.PrefixOrganisation)
	}
	ctx := testutil.Context(t)
	cfg, err := pgxpool.ParseConfig(opts.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.MaxConnIdleTime = 5 * time.Second
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{URL: opts.DatabaseURL, Pool: pool, OrgID: opts.OrgID, Now: time.Now}
	if opts.Clock != nil {
		e.Now = opts.Clock.Now
	}
	e.Store = eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	e.Runner, err = projections.NewRunner(e.Store, Quiet, append(projections.Fleet(), projections.Runs{}), projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Runner.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	dev := devices.Assemble(devices.AssembleConfig{Pool: pool, Logger: Quiet, QueueLimit: opts.QueueLimit,
		FrameRetention: opts.FrameRetention, Wrap: opts.Wrap, ADBAddr: opts.ADBAddr, Catalog: backends.CatalogAPK,
		Transport: opts.Transport})
	e.Runtime, e.Sim, e.ADB, e.Registry = dev.Runtime, dev.Sim, dev.ADB, dev.Registry
	e.Fleet = fleet.New(fleet.Config{Store: e.Store, ReadModels: e.Runner, Runtime: e.Runtime, NewSimState: backends.NewSimState, Now: e.Now,
		WaitForReceipts: opts.WaitForReceipts})
	e.Runs = runs.New(runs.Config{Store: e.Store, ReadModels: e.Runner, Devices: e.Fleet, Now: e.Now,
		BaseURL: func() string { return "http://vrx.test" }})
	e.App = commands.NewApplication(commands.Capabilities{Fleet: e.Fleet, Runs: e.Runs, Logger: Quiet})
	e.Calls = fleet.ServedCalls(e.App.Fleet)
	e.settle = workers.AbandonedActions{Mark: e.App.Fleet.MarkAbandonedActions, Logger: Quiet}.Settle
	if err := e.Runtime.Prepare(ctx, e.settle); err != nil {
		e.Runtime.Stop() // gives the host claim back
		t.Fatal(err)
	}
	e.Auth = domain.LocalOperator(e.OrgID)
	if opts.Devices > 0 {
		ids, err := e.Fleet.RegisterDevices().Handle(ctx, fleet.RegisterDevices{OrgID: e.OrgID, Backend: domain.BackendSim,
			Count: opts.Devices, NamePrefix: "sim", SeedMarker: "test-fleet-" + e.OrgID})
		if err != nil {
			t.Fatal(err)
		}
		e.DeviceIDs = ids
	}
	if e.DeviceIDs == nil {
		e.DeviceIDs = e.existingDevices(t)
	}
	runCtx, cancel := context.WithCancel(ctx)
	e.runCtx, e.stop = runCtx, cancel
	e.done.Add(2)
	go func() { defer e.done.Done(); _ = e.Runner.Run(runCtx) }()
	go func() { defer e.done.Done(); e.Runtime.Run(runCtx, e.settle) }()
	t.Cleanup(e.Close)
	// Let the read models show the registered devices.
	e.Settle(t)
	return e
}

func (e *Env) existingDevices(t testing.TB) []string {
	t.Helper()
	rows, err := e.Pool.Query(testutil.Context(t), `SELECT device_id FROM device_states WHERE org_id = $1 ORDER BY device_id`, e.OrgID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Settle waits until every fleet read model has applied every event
// written so far.
func (e *Env) Settle(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	var pos int64
	var txid uint64
	err := e.Pool.QueryRow(ctx, `SELECT coalesce(max(position), 0), coalesce(max(transaction_id::text::bigint), 0) FROM events`).Scan(&pos, &txid)
	if err != nil {
		t.Fatal(err)
	}
	if pos == 0 {
		return
	}
	for _, name := range e.Runner.Names() {
		if err := e.Runner.WaitFor(ctx, name, eventstore.Appended{LastPosition: pos, TransactionID: txid}); err != nil {
			t.Fatalf("read model %s did not catch up: %v", name, err)
		}
	}
}

// Close stops the fleet and closes its pool (once).
func (e *Env) Close() {
	e.stopOnce.Do(func() {
		e.stop()
		e.done.Wait()
		e.ADB.Close()
		e.Pool.Close()
	})
}

// Unfinished counts the device's actions recorded as requested and not
// finished yet: the one its queue is running and those waiting behind it.
// Tests watch the queue through it: an action holds its place in the queue
// before its request is recorded, so an action counted here has one.
func (e *Env) Unfinished(t testing.TB, deviceID string) int {
	t.Helper()
	var n int
	err := e.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM action_idempotency WHERE device_id = $1 AND state = 'requested'`,
		deviceID).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Lease acquires a lease on device for the operator.
func (e *Env) Lease(t testing.TB, deviceID string) projections.LeaseView {
	t.Helper()
	l, err := e.Fleet.AcquireLease().Handle(testutil.Context(t), fleet.AcquireLease{Auth: e.Auth, DeviceID: deviceID})
	if err != nil {
		t.Fatalf("acquire lease on %s: %v", deviceID, err)
	}
	return l
}

// Phone returns the sim adapter of a device (its phone's state is the
// ground truth of what happened on it).
func (e *Env) Phone(t testing.TB, deviceID string) *backends.SimDevice {
	t.Helper()
	d := &domain.Device{ID: deviceID, Backend: domain.BackendSim, OrgID: e.OrgID}
	s, err := e.Sim.Device(testutil.Context(t), d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
