package commands

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// Backends resolves devices to their backend adapters and finds the frame
// renderer of a backend kind (internal/backends.Registry implements it).
type Backends interface {
	domain.Resolver
	Renderer(kind string) (domain.FrameRenderer, bool)
}

// ActionQueue is the per-device executor seen from the commands that feed
// it (workers.Executor implements it): one queue per device, run one job at
// a time in arrival order.
type ActionQueue interface {
	// Reserve claims a place in the device's queue, or answers device_busy
	// (with retryAfterMs) when the queue is full. Nothing has been recorded
	// yet when it refuses.
	Reserve(deviceID string) (Slot, error)
}

// Slot is a reserved place in a device's queue.
type Slot interface {
	// Submit queues job in the reserved place; its result arrives on job.Done.
	Submit(job Job)
	// Cancel gives the place back unused.
	Cancel()
}

// JobKind says what a queued job does to its device.
type JobKind int

// Job kinds.
const (
	JobAction JobKind = iota + 1
	JobWake
	JobStop
)

// Job is one unit of device work, executed by Fleet.Execute on the device's
// executor.
type Job struct {
	Kind     JobKind
	OrgID    string
	DeviceID string
	// Requested is the recorded request of an action job, and Action its
	// parsed action.
	Requested domain.ActionRequested
	Action    domain.Action
	// ObservedHash is the screen hash of the action's observedFrame, if any.
	ObservedHash string
	// Actor and LeaseID ask for a wake or stop.
	Actor   domain.Actor
	LeaseID string
	// Done receives the result; it must have room for one value.
	Done chan JobResult
}

// JobResult is what a job came to.
type JobResult struct {
	// Receipt is the action's receipt (action jobs).
	Receipt domain.Receipt
	// Appended is what the job recorded last, for read-your-writes waits.
	Appended eventstore.Appended
	Err      error
}

// FleetConfig is what the fleet's commands need.
type FleetConfig struct {
	Store *eventstore.Store
	// Runner gives read-your-writes (WaitFor) on the fleet's read models.
	Runner   *projections.Runner
	Backends Backends
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// FrameRetention is how long frames stay readable; zero means
	// DefaultFrameRetention.
	FrameRetention time.Duration
	// ActTimeout bounds one call to a backend's Act; past it the outcome is
	// unknown. Zero means DefaultActTimeout.
	ActTimeout time.Duration
	// WaitForReceipts makes an action answer only once the receipts read
	// model shows its outcome, so a following receipt read agrees with it.
	WaitForReceipts bool
}

// Defaults of FleetConfig.
const (
	DefaultFrameRetention = 7 * 24 * time.Hour
	DefaultActTimeout     = 30 * time.Second
)

// Fleet is the device fleet's one entry point for every surface: the REST
// routes, and the MCP tools (list and read devices, lease, observe, act,
// frames, receipts). Each method takes the caller's authorization context,
// enforces its scopes and device subset, and runs one command handler or
// one read.
type Fleet struct {
	cfg    FleetConfig
	store  *eventstore.Store
	pool   *pgxpool.Pool
	runner *projections.Runner
	repo   *deviceRepo
	frames *frameStore
	queue  ActionQueue

	requests groupCommit[requestWrite, bool]
	outcomes groupCommit[outcomeWrite, eventstore.Appended]

	lastMu sync.Mutex
	// last is each device's last stored frame: an action whose screen has
	// not changed since uses it as its before frame.
	last map[string]frameRow
}

// NewFleet returns the fleet over cfg. It takes work through UseQueue's
// executor, which must be set before actions, wake or stop are asked for.
func NewFleet(cfg FleetConfig) *Fleet {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FrameRetention <= 0 {
		cfg.FrameRetention = DefaultFrameRetention
	}
	if cfg.ActTimeout <= 0 {
		cfg.ActTimeout = DefaultActTimeout
	}
	f := &Fleet{cfg: cfg, store: cfg.Store, pool: cfg.Store.Pool(), runner: cfg.Runner}
	f.repo = newDeviceRepo(cfg.Store)
	f.frames = newFrameStore(f.pool)
	f.last = map[string]frameRow{}
	f.requests.flush = f.flushRequests
	f.outcomes.flush = f.flushOutcomes
	return f
}

// UseQueue sets the executor that runs device work.
func (f *Fleet) UseQueue(q ActionQueue) { f.queue = q }

// Store returns the event store.
func (f *Fleet) Store() *eventstore.Store { return f.store }

// now is the clock at the event store's precision (microseconds, UTC), so
// that times recorded in events equal the read models' copies.
func (f *Fleet) now() time.Time { return f.cfg.Now().UTC().Truncate(time.Microsecond) }

// waitFor gives read-your-writes on the named read models.
func (f *Fleet) waitFor(ctx context.Context, a eventstore.Appended, names ...string) error {
	if f.runner == nil || a.LastPosition == 0 {
		return nil
	}
	for _, n := range names {
		if err := f.runner.WaitFor(ctx, n, a); err != nil {
			return fmt.Errorf("wait for %s: %w", n, err)
		}
	}
	return nil
}

// fleetMeta is the metadata recorded with events caused by actor.
func fleetMeta(actor domain.Actor, correlation string) eventstore.Metadata {
	return eventstore.Metadata{ActorKind: actor.Kind, ActorID: actor.ID, CorrelationID: correlation}
}

// fleetSystemActor causes events no person or key asked for (expiry, sweeps).
var fleetSystemActor = domain.Actor{Kind: "system", ID: "phonefleet"}

// fleetEncode turns domain events into events to append.
func fleetEncode(orgID string, m eventstore.Metadata, evs ...domain.Event) ([]eventstore.NewEvent, error) {
	out := make([]eventstore.NewEvent, len(evs))
	for i, e := range evs {
		name, version, data, err := domain.Events.Encode(e)
		if err != nil {
			return nil, err
		}
		out[i] = eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: orgID, Data: data, Metadata: m}
	}
	return out, nil
}

// visibleDevice loads a device the caller may use: in its organisation and
// in its device subset. Anything else is domain.ErrDeviceNotFound.
func (f *Fleet) visibleDevice(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error) {
	if !domain.HasPrefix(deviceID, domain.PrefixDevice) || !auth.CanSeeDevice(deviceID) {
		return domain.Device{}, domain.ErrDeviceNotFound(deviceID)
	}
	d, err := f.repo.load(ctx, deviceID)
	if err != nil {
		return d, err
	}
	if !d.Registered() || d.OrgID != auth.OrgID {
		return domain.Device{}, domain.ErrDeviceNotFound(deviceID)
	}
	return d, nil
}
