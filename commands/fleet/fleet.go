package fleet

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// DeviceRuntime is the device runtime as the fleet's commands use it
// (internal/devices.Runtime implements it), in domain types: where each
// device is hosted and how a call reaches the process holding it, its
// backend adapter, its queue, and the caches of recently stored frames.
// Commands run their device work as closures submitted to a device's
// queue and record the outcome themselves; the runtime never calls back
// into them.
type DeviceRuntime interface {
	// Reserve claims a place at the end of the device's queue; jobs run
	// one at a time in the order their places were reserved. Nothing has
	// been recorded yet when it refuses. Errors: device_busy (retryable,
	// with retryAfterMs) when the queue is full; device_unavailable with
	// reason offline (retryable) when the runtime is stopping.
	Reserve(deviceID string) (domain.QueueSlot, error)
	// Resolve returns the adapter of a device. Errors:
	// backend_resolution_failed, backend_not_implemented,
	// device_unavailable with reason offline (another process hosts it),
	// internal_error.
	Resolve(ctx context.Context, d *domain.Device) (domain.Backend, error)
	// Locate names the host a device is driven under (domain.HostKey) and
	// whether this process holds it now. It never fails.
	Locate(d *domain.Device) (host string, local bool)
	// Route names the host a device is driven under and whether a call on
	// it goes to the process holding it (remote), when there is a way
	// there. It fails only for a call forwarded here for a device held
	// elsewhere, which its caller then asks again.
	Route(ctx context.Context, d *domain.Device) (host string, remote bool, err error)
	// Call sends cmd as op to the process holding host and decodes its
	// answer into result. Errors: the holder's; device_unavailable
	// (offline, retryable) when no holder took the call (nothing ran);
	// one wrapping domain.ErrUnanswered when it was sent and not answered.
	Call(ctx context.Context, host, op string, cmd, result any) error
	// CallWatched is Call that also gives up, as unanswered, once the
	// holder of host went away (an action, settled from its record then).
	CallWatched(ctx context.Context, host, op string, cmd, result any) error
	// Renderer returns the frame renderer of a backend kind, if it has
	// one. It never fails.
	Renderer(kind string) (domain.FrameRenderer, bool)
	// FrameFor names the frame showing obs: the device's last stored frame
	// when it shows the same screen (stored is true), else a new one to
	// store. It never fails.
	FrameFor(d *domain.Device, obs domain.Observation, at time.Time) (frame domain.StoredFrame, stored bool)
	// RememberFrames records frames whose rows have committed. It never
	// fails.
	RememberFrames(frames ...domain.StoredFrame)
	// KeptTree records that the row of a frame this process stored now
	// keeps its screen's UI tree. It never fails.
	KeptTree(frame domain.StoredFrame)
	// RecentFrame returns a frame this process stored recently; ok is
	// false for any other (then the frames table answers). It never fails.
	RecentFrame(frameID string) (frame domain.StoredFrame, ok bool)
	// Fence returns this process's claim on host as its writes carry it
	// (domain.HostFence); ok is false when it does not hold host. It never
	// fails.
	Fence(host string) (fence domain.HostFence, ok bool)
	// Lose gives up host at once: the database refused a write made under
	// this process's claim on it, so another process drives its devices
	// now. It never fails.
	Lose(host string)
}

// Config is what the fleet's commands need.
type Config struct {
	Store *eventstore.Store
	// ReadModels gives read-your-writes on the fleet's read models; nil
	// waits for none (an operator command registering devices).
	ReadModels cqrs.ReadModels
	// Runtime runs device work. Only a fleet that registers devices and
	// nothing else (the operator command) may go without one.
	Runtime DeviceRuntime
	// NewSimState returns a new sim phone's starting state, saved beside
	// its registration so that whichever process drives it restores the
	// same phone, and fills in the registration's model and screen size
	// (internal/backends.NewSimState). Errors: invalid_argument for an
	// unknown model. Nil means the fleet registers no sim phones
	// (service_unavailable).
	NewSimState func(reg *domain.DeviceRegistered) ([]byte, error)
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// ActTimeout bounds one call to a backend's Act; past it the outcome is
	// unknown. Zero means DefaultActTimeout.
	ActTimeout time.Duration
	// WaitForReceipts makes an action answer only once the receipts read
	// model shows its outcome, so a following receipt read agrees with it.
	WaitForReceipts bool
}

// DefaultActTimeout is Config.ActTimeout's default.
const DefaultActTimeout = 30 * time.Second

// Fleet is the device fleet's one entry point for every surface: the REST
// routes, and the MCP tools (list and read devices, lease, observe, act,
// frames, receipts). Each method takes the caller's authorization context,
// enforces its scopes and device subset, and runs one command handler or
// one read. It holds only what those share; device work goes through the
// runtime.
type Fleet struct {
	cfg        Config
	store      *eventstore.Store
	pool       *pgxpool.Pool
	readModels cqrs.ReadModels
	runtime    DeviceRuntime

	devices *eventstore.Repository[domain.Device, domain.Event]
	actions *eventstore.Repository[domain.ActionRecord, domain.Event]
}

// New returns the fleet over cfg.
func New(cfg Config) *Fleet {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.ActTimeout <= 0 {
		cfg.ActTimeout = DefaultActTimeout
	}
	f := &Fleet{cfg: cfg, store: cfg.Store, pool: cfg.Store.Pool(), readModels: cfg.ReadModels, runtime: cfg.Runtime}
	f.devices = eventstore.NewRepository(cfg.Store, deviceAggregate)
	f.actions = eventstore.NewRepository(cfg.Store, actionAggregate)
	return f
}

// now is the clock at the event store's precision (microseconds, UTC), so
// that times recorded in events equal the read models' copies.
func (f *Fleet) now() time.Time { return f.cfg.Now().UTC().Truncate(time.Microsecond) }

// waitFor gives read-your-writes on the named read models.
func (f *Fleet) waitFor(ctx context.Context, a eventstore.Appended, names ...string) error {
	return cqrs.Await(ctx, f.readModels, a, names...)
}

// visibleDevice loads a device the caller may use: in its organisation and
// in its device subset. Anything else is domain.ErrDeviceNotFound.
func (f *Fleet) visibleDevice(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error) {
	d, _, err := f.loadVisible(ctx, auth, deviceID)
	return d, err
}

// loadVisible is visibleDevice with the stream version it was loaded at.
func (f *Fleet) loadVisible(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, int64, error) {
	if !domain.HasPrefix(deviceID, domain.PrefixDevice) || !auth.CanSeeDevice(deviceID) {
		return domain.Device{}, 0, domain.ErrDeviceNotFound(deviceID)
	}
	d, version, err := f.devices.Load(ctx, deviceID)
	if err != nil {
		return d, 0, err
	}
	if !d.Registered() || d.OrgID != auth.OrgID {
		return domain.Device{}, 0, domain.ErrDeviceNotFound(deviceID)
	}
	return d, version, nil
}

// Handlers are the fleet's entry points of the application object.
type Handlers struct {
	AcquireLease    cqrs.Handler[AcquireLease, projections.LeaseView]
	RenewLease      cqrs.Handler[RenewLease, projections.LeaseView]
	ReleaseLease    cqrs.Handler[ReleaseLease, cqrs.Done]
	ExpireLease     cqrs.Handler[ExpireLease, bool]
	ResetDevice     cqrs.Handler[ResetDevice, bool]
	PerformAction   cqrs.Handler[PerformAction, ActOutcome]
	ObserveDevice   cqrs.Handler[ObserveDevice, Observation]
	WaitFor         cqrs.Handler[WaitFor, WaitResult]
	PowerDevice     cqrs.Handler[PowerDevice, projections.DeviceView]
	RenameDevice    cqrs.Handler[RenameDevice, projections.DeviceView]
	ReviewReceipt   cqrs.Handler[ReviewReceipt, domain.Receipt]
	RegisterDevices cqrs.Handler[RegisterDevices, []string]
	// RecordDeviceConnection is sent by device discovery.
	RecordDeviceConnection cqrs.Handler[RecordDeviceConnection, bool]
	// SetDeviceNetworkProxy applies a device's network proxy setting
	// (managed proxies; forwarded to the device's holder).
	SetDeviceNetworkProxy cqrs.Handler[SetDeviceNetworkProxy, cqrs.Done]
	// RegisterGatewayDevices is sent by the gateway hub for the devices a
	// gateway reports.
	RegisterGatewayDevices cqrs.Handler[RegisterGatewayDevices, map[string]string]
	// ListGatewayDevices is asked by the gateway hub and the orphaned
	// gateway sweep for a gateway's devices.
	ListGatewayDevices cqrs.Handler[ListGatewayDevices, map[string]string]
	// MarkAbandonedActions is sent by the process that takes a host over.
	MarkAbandonedActions cqrs.Handler[MarkAbandonedActions, int]
	// LiveFrame is sent by the instance that does not drive a device, for
	// a live screen opened there (a forwarded call).
	LiveFrame cqrs.Handler[LiveFrame, LiveFrameAnswer]
	// ReadSoftware is asked by the app library for a device's software.
	ReadSoftware cqrs.Handler[ReadSoftware, domain.DeviceSoftware]
	// Live sessions: join (or open) in a role, end.
	JoinLiveSession cqrs.Handler[JoinLiveSession, JoinedLiveSession]
	EndLiveSession  cqrs.Handler[EndLiveSession, cqrs.Done]

	ListDevices  cqrs.Handler[ListDevices, DevicePage]
	GetDevice    cqrs.Handler[GetDevice, projections.DeviceView]
	GetDriving   cqrs.Handler[GetDriving, Driving]
	ListLeases   cqrs.Handler[ListLeases, LeasePage]
	GetFrame     cqrs.Handler[GetFrame, Frame]
	ListReceipts cqrs.Handler[ListReceipts, ReceiptPage]
	GetReceipt   cqrs.Handler[GetReceipt, domain.Receipt]
	// ExportReceipts answers the receipt chain (GET /v1/receipts/export).
	ExportReceipts cqrs.Handler[ExportReceipts, ReceiptExport]
	// Live screens and sessions.
	OpenStream     cqrs.Handler[OpenStream, *ScreenStream]
	GetLiveSession cqrs.Handler[GetLiveSession, LiveSessionView]
}

// Handlers returns the fleet's entry points, each behind d. Live screens
// share one feed per device among their watchers, so call it once.
func (f *Fleet) Handlers(d cqrs.Decorator) Handlers {
	live, streams := NewLiveSessions(f), NewStreams(f)
	return Handlers{
		AcquireLease:           cqrs.Serve(d, f.AcquireLease()),
		RenewLease:             cqrs.Serve(d, f.RenewLease()),
		ReleaseLease:           cqrs.Serve(d, f.ReleaseLease()),
		ExpireLease:            cqrs.Serve(d, f.ExpireLease()),
		ResetDevice:            cqrs.Serve(d, f.ResetDevice()),
		SetDeviceNetworkProxy:  cqrs.Serve(d, f.SetDeviceNetworkProxy()),
		PerformAction:          cqrs.Serve(d, f.PerformAction()),
		ReadSoftware:           cqrs.Serve(d, f.ReadSoftware()),
		ObserveDevice:          cqrs.Serve(d, f.ObserveDevice()),
		WaitFor:                cqrs.Serve(d, f.WaitFor()),
		PowerDevice:            cqrs.Serve(d, f.PowerDevice()),
		RenameDevice:           cqrs.Serve(d, f.RenameDevice()),
		ReviewReceipt:          cqrs.Serve(d, f.ReviewReceipt()),
		RegisterDevices:        cqrs.Serve(d, f.RegisterDevices()),
		RecordDeviceConnection: cqrs.Serve(d, f.RecordDeviceConnection()),
		RegisterGatewayDevices: cqrs.Serve(d, f.RegisterGatewayDevices()),
		ListGatewayDevices:     cqrs.Serve(d, ListGatewayDevicesHandler{f}),
		MarkAbandonedActions:   cqrs.Serve(d, f.MarkAbandonedActions()),
		LiveFrame:              cqrs.Serve(d, f.LiveFrame()),
		JoinLiveSession:        cqrs.Serve(d, live.JoinLiveSession()),
		EndLiveSession:         cqrs.Serve(d, live.EndLiveSession()),
		ListDevices:            cqrs.Serve(d, ListDevicesHandler{f}),
		GetDevice:              cqrs.Serve(d, GetDeviceHandler{f}),
		GetDriving:             cqrs.Serve(d, GetDrivingHandler{live}),
		ListLeases:             cqrs.Serve(d, ListLeasesHandler{f}),
		GetFrame:               cqrs.Serve(d, GetFrameHandler{f}),
		ListReceipts:           cqrs.Serve(d, ListReceiptsHandler{f}),
		GetReceipt:             cqrs.Serve(d, GetReceiptHandler{f}),
		ExportReceipts:         cqrs.Serve(d, ExportReceiptsHandler{f}),
		OpenStream:             cqrs.Serve(d, streams.OpenStream()),
		GetLiveSession:         cqrs.Serve(d, live.GetLiveSession()),
	}
}
