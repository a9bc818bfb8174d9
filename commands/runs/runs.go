package runs

import (
	"context"
	"encoding/json"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config is what the run commands need.
type Config struct {
	Store *eventstore.Store
	// ReadModels gives read-your-writes on the runs, leases and devices
	// read models.
	ReadModels cqrs.ReadModels
	// Devices is the fleet, which holds a run's device and acts on it.
	Devices Devices
	// BaseURL returns the service's public origin; a run's vrxBaseUrl is
	// BaseURL()/vrx/<run token>.
	BaseURL func() string
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
}

// Devices is what runs need of the fleet (commands.Fleet satisfies
// it): a device the starter may use, its state, holding it for a run in
// the unit that starts the run, giving it back in the unit that ends or
// parks the run, and observing and acting on it as the run.
type Devices interface {
	// Visible loads a device the caller may use; anything else is
	// device_unavailable (not_found).
	Visible(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error)
	// State returns a device's state.
	State(ctx context.Context, deviceID string) (domain.Device, int64, error)
	// UpdateDevice decides on a device, other streams' events joining the
	// unit (the run's first events beside its lease).
	UpdateDevice(ctx context.Context, deviceID string, decide func(d *domain.Device, u *eventstore.Unit) ([]domain.Event, error)) (eventstore.Committed, error)
	// DecideInto adds a device's events to a unit the run commits.
	DecideInto(ctx context.Context, u *eventstore.Unit, deviceID string, decide func(d *domain.Device) ([]domain.Event, error)) error
	// FrameOf names the device and the screen a frame of the organisation
	// shows.
	FrameOf(ctx context.Context, orgID, frameID string, now time.Time) (deviceID, screenHash string, ok bool, err error)
	// Observe, Act and Frame look at, act on and read frames of a device
	// (the fleet's ObserveDevice, PerformAction and GetFrame).
	Observe(ctx context.Context, cmd fleet.ObserveDevice) (fleet.Observation, error)
	Act(ctx context.Context, cmd fleet.PerformAction) (fleet.ActOutcome, error)
	Frame(ctx context.Context, q fleet.GetFrame) (fleet.Frame, error)
}

// Runs is the run capability: starting, watching and ending runs (REST
// /v1/runs, the MCP run tools), and acting as a run (the device surface
// /vrx and the built-in executor).
type Runs struct {
	cfg     Config
	devices Devices
	pool    *pgxpool.Pool
	runs    *eventstore.Repository[domain.Run, domain.Event]
}

// runAggregate folds a run's stream. Every device-surface call loads its
// run, so runs are cached and caught up on each load.
var runAggregate = eventstore.Aggregate[domain.Run, domain.Event]{
	Stream: domain.RunStream,
	Codec:  domain.Events,
	New:    func(string) domain.Run { return domain.Run{} },
	Apply:  func(r *domain.Run, e domain.Event, at eventstore.Recorded) { r.Apply(at.OrgID, e, at.Version) },
	OrgID:  func(r *domain.Run) string { return r.OrgID },
	Clone: func(r domain.Run) domain.Run {
		if r.SuccessCheck != nil {
			c := *r.SuccessCheck
			r.SuccessCheck = &c
		}
		if r.Divergence != nil {
			d := *r.Divergence
			r.Divergence = &d
		}
		return r
	},
	Keep: func(r *domain.Run) bool { return r.Exists() },
}

// New returns the run capability over the fleet.
func New(cfg Config) *Runs {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	return &Runs{cfg: cfg, devices: cfg.Devices, pool: cfg.Store.Pool(), runs: eventstore.NewRepository(cfg.Store, runAggregate)}
}

// wait gives read-your-writes on the read models a run's change shows in:
// a transition may start, end, give up or hand over the device's lease in
// the same unit.
func (r *Runs) wait(ctx context.Context, a eventstore.Appended) error {
	return cqrs.Await(ctx, r.cfg.ReadModels, a, projections.RunsName, projections.LeasesName, projections.DevicesName)
}

func (r *Runs) now() time.Time { return r.cfg.Now().UTC().Truncate(time.Microsecond) }

// StartRun hands a device to an autonomous run (POST /v1/runs).
type StartRun struct {
	Auth domain.Auth
	// DeviceID is the device; empty means any free device of the
	// organisation the caller can see.
	DeviceID string
	Goal     string
	// MaxSteps bounds the run's actions; 0 means the default (50).
	MaxSteps int
	// DeadlineSeconds ends the run failed when it has not ended by then; 0
	// means the default (1800).
	DeadlineSeconds int
	// Executor is builtin (the default) or external.
	Executor     string
	SuccessCheck *domain.SuccessCheck
	// Script, when present, is followed by the built-in executor's
	// scripted planner (a run's exported script, or steps written by hand).
	Script json.RawMessage
	// ScheduleID names the schedule starting the run (schedules only).
	ScheduleID string
}

// StartedRun is a started run as its starter sees it: with the run token
// inside VrxBaseURL (shown once, to the starter only).
type StartedRun struct {
	Run        projections.RunView
	VrxBaseURL string
}

// RunRef names a run by its runId or agentRunId (GET /v1/runs/{runId}
// and the pause, resume, cancel routes).
type RunRef struct {
	Auth  domain.Auth
	RunID string
}

// PauseRun stops a run between steps (POST /v1/runs/{runId}/pause).
type PauseRun RunRef

// ResumeRun continues a paused run, or a parked one: its device goes back
// to the run (POST /v1/runs/{runId}/resume). A person who took the
// device while the run was parked hands it back by resuming.
type ResumeRun RunRef

// CancelRun ends a run cancelled (POST /v1/runs/{runId}/cancel); its run
// token stops working at once.
type CancelRun RunRef

// GetRun reads one run (GET /v1/runs/{runId}, also by agentRunId).
type GetRun RunRef

// GetRunScript exports a run's steps as a script the scripted planner
// follows (GET /v1/runs/{runId}/script).
type GetRunScript RunRef

// GetRunDivergence reads whether and where a replay diverged from the
// script it follows (GET /v1/runs/{runId}/divergence).
type GetRunDivergence RunRef

// RunDivergence is a run's divergence report: whether it replays a script
// (Replay), how many of its steps were taken (Steps), and the first step
// where it diverged (nil while it has not).
type RunDivergence struct {
	Run        projections.RunView
	Replay     bool
	Steps      int
	Divergence *domain.RunDiverged
}

// ListRuns pages through the organisation's runs, newest first
// (GET /v1/runs).
type ListRuns struct {
	Auth domain.Auth
	projections.RunQuery
}

// ListRunFrames pages through the frames a run saw, oldest first
// (GET /v1/runs/{runId}/frames).
type ListRunFrames struct {
	Auth  domain.Auth
	RunID string
	projections.RunFrameQuery
}

// RunAccess is a run's credential on the device surface: the run token
// from the path (Token), or, for the built-in executor, the run id and
// the worker holding the run's claim.
type RunAccess struct {
	Token  string
	RunID  string
	Worker string
}

// RunInfo reads the run its credential names (GET /vrx/{token}/v1/run).
type RunInfo struct {
	Access RunAccess
}

// RunObserve looks at the run's device (GET /vrx/{token}/v1/observe and
// /screenshot).
type RunObserve struct {
	Access RunAccess
	// Image is png, jpeg or none (the default is png).
	Image string
	// MaxWidth shrinks the picture to at most that width when positive.
	MaxWidth int
	// Quality is the JPEG quality (1–100; 0 means 70).
	Quality int
	// Elements is all, interactive (the default) or none.
	Elements string
}

// RunObservation is what a run saw: the stored frame, its picture in the
// asked format and its elements.
type RunObservation struct {
	Frame       domain.FrameRef
	DeviceID    string
	Width       int
	Height      int
	ScreenOn    bool
	ContentType string
	Image       []byte
	// ImageWidth and ImageHeight are the picture's size (it may be scaled).
	ImageWidth  int
	ImageHeight int
	Elements    []domain.Element
	// Layout is the screen's layout signature (domain.LayoutSignature), when the
	// elements were asked for.
	Layout string
	// Tree is the screen's whole UI tree, when the elements were asked for
	// (a replay's guards are matched on it; the device surface does not
	// send it).
	Tree    *domain.UIElement
	StepSeq int
}

// RunAct acts on the run's device (POST /vrx/{token}/v1/actions).
type RunAct struct {
	Access         RunAccess
	Action         string
	Arguments      json.RawMessage
	IdempotencyKey string
	ObservedFrame  string
	// FencingToken, when not zero, must be the fencing token of the run's
	// lease.
	FencingToken int64
	// DeviceID, when not empty, must be the run's device.
	DeviceID string
}

// RunGetFrame reads a frame of the run's device (GET
// /vrx/{token}/v1/frames/{frameId}).
type RunGetFrame struct {
	Access  RunAccess
	FrameID string
	fleet.FrameOptions
}

// RunNeedsUser parks the run for a person (POST /vrx/{token}/v1/needs-user).
type RunNeedsUser struct {
	Access RunAccess
	Reason string
	// DeadlineSeconds is how long to wait for the person; 0 means 15 min.
	DeadlineSeconds int
	// Step, from the built-in executor following a script, is the 1-based
	// script step asking; 0 when none. A step that already parked the run
	// does not park it again: the run goes on as it is.
	Step int
}

// RunFinish ends the run as its worker reports (POST /vrx/{token}/v1/finish).
type RunFinish struct {
	Access RunAccess
	// State is succeeded or failed.
	State  string
	Reason string
	Detail string
	// Divergence, from the built-in executor replaying a guarded script,
	// ends the run failed (replay_diverged) recording where it diverged;
	// State, Reason and Detail are then not read.
	Divergence *domain.RunDiverged
}

// ClaimRun gives a queued built-in run to a worker, or renews the
// worker's claim (the built-in executor).
type ClaimRun struct {
	RunID  string
	Worker string
	TTL    time.Duration
}

// EndOverdueRun ends a run whose deadline (or whose wait for a person)
// passed: failed with deadline_exceeded or user_control_timeout (the run
// deadline worker). ended is false when it was not overdue.
type EndOverdueRun struct {
	RunID string
}

// ErrRunTokenRefused is the one answer of the device surface for a token
// that is unknown, expired, ended or names another device.
var errRunTokenRefused = domain.ErrDeviceNotFound("")

// runNotFound is a run the caller cannot see.
func runNotFound(id string) error { return domain.ErrRunNotFound(id) }

// Handlers are the run capability's entry points of the application
// object: /v1/runs, the device surface and the built-in executor's.
type Handlers struct {
	StartRun      cqrs.Handler[StartRun, StartedRun]
	PauseRun      cqrs.Handler[PauseRun, projections.RunView]
	ResumeRun     cqrs.Handler[ResumeRun, projections.RunView]
	CancelRun     cqrs.Handler[CancelRun, projections.RunView]
	ClaimRun      cqrs.Handler[ClaimRun, domain.Run]
	EndOverdueRun cqrs.Handler[EndOverdueRun, bool]
	// The device surface: a run acting on its device.
	RunObserve   cqrs.Handler[RunObserve, RunObservation]
	RunAct       cqrs.Handler[RunAct, fleet.ActOutcome]
	RunNeedsUser cqrs.Handler[RunNeedsUser, projections.RunView]
	RunFinish    cqrs.Handler[RunFinish, projections.RunView]

	ListRuns      cqrs.Handler[ListRuns, projections.RunPage]
	GetRun        cqrs.Handler[GetRun, projections.RunView]
	ListRunFrames cqrs.Handler[ListRunFrames, projections.RunFramePage]
	GetRunScript  cqrs.Handler[GetRunScript, domain.RunScript]
	// GetRunDivergence is a replay's divergence report.
	GetRunDivergence cqrs.Handler[GetRunDivergence, RunDivergence]
	// The device surface's reads.
	RunInfo     cqrs.Handler[RunInfo, projections.RunView]
	RunGetFrame cqrs.Handler[RunGetFrame, fleet.Frame]
}

// Handlers returns the run capability's entry points, each behind d.
func (r *Runs) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		StartRun:         cqrs.Serve(d, StartRunHandler{r}),
		PauseRun:         cqrs.Serve(d, PauseRunHandler{r}),
		ResumeRun:        cqrs.Serve(d, ResumeRunHandler{r}),
		CancelRun:        cqrs.Serve(d, CancelRunHandler{r}),
		ClaimRun:         cqrs.Serve(d, ClaimRunHandler{r}),
		EndOverdueRun:    cqrs.Serve(d, EndOverdueRunHandler{r}),
		RunObserve:       cqrs.Serve(d, RunObserveHandler{r}),
		RunAct:           cqrs.Serve(d, RunActHandler{r}),
		RunNeedsUser:     cqrs.Serve(d, RunNeedsUserHandler{r}),
		RunFinish:        cqrs.Serve(d, RunFinishHandler{r}),
		ListRuns:         cqrs.Serve(d, ListRunsHandler{r}),
		GetRun:           cqrs.Serve(d, GetRunHandler{r}),
		ListRunFrames:    cqrs.Serve(d, ListRunFramesHandler{r}),
		GetRunScript:     cqrs.Serve(d, GetRunScriptHandler{r}),
		GetRunDivergence: cqrs.Serve(d, GetRunDivergenceHandler{r}),
		RunInfo:          cqrs.Serve(d, RunInfoHandler{r}),
		RunGetFrame:      cqrs.Serve(d, RunGetFrameHandler{r}),
	}
}
