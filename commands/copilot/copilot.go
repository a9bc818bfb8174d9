// Package copilot is the copilot capability: a person drives a device, or
// their fleet (the model lists the devices and names the one each call is
// for), by chat. A message starts a turn; the turn asks an OpenAI-compatible model
// (streamed, with tools) and carries out the tool calls it answers with
// through the fleet's own commands (the application's PerformAction,
// ObserveDevice, AcquireLease), as the person, until the model answers
// without a tool call. Everything said and done is an event of the
// thread's stream; the threads read model is a projection of them.
package copilot

import (
	"context"
	"errors"
	"sync"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/chat"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Model is the copilot's model: one streamed completion with tools
// (*chat.Client implements it).
type Model interface {
	Stream(ctx context.Context, messages []chat.Message, tools []chat.Tool, text func(string) error) (chat.Completion, error)
}

// Config is what the copilot needs.
type Config struct {
	Store      *eventstore.Store
	ReadModels cqrs.ReadModels
	Queries    projections.CopilotQueries
	// Model is the provider; nil means the deployment has none, and the
	// chat entry points answer service_unavailable.
	Model Model
	// ModelName is recorded with the tokens each answer took.
	ModelName string
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
	// MaxSteps bounds the model's answers in one turn; zero means 12.
	MaxSteps int
	// Metered makes the copilot count its tokens against the monthly
	// allowance (a hosted deployment); false serves it unmetered.
	Metered bool
	// TokensPerDevice is the price list's monthly tokens per subscribed
	// device; nil means no allowance is configured (the allowance read of
	// a metered deployment answers checkout_unavailable, and chat is not
	// refused for an allowance that cannot be computed).
	TokensPerDevice *int64
	// LeaseTTL is the lease a turn takes when the person holds none; zero
	// means 10 minutes.
	LeaseTTL time.Duration
	// Policy is the deployment's approval policy; nil means
	// domain.DefaultCopilotPolicy (install, sensitive, payment).
	Policy *domain.CopilotPolicy
}

// Devices are the fleet's entry points the copilot acts through: the
// application's own, so an action of the copilot is exactly the REST and
// MCP one (lease rules, idempotency, stale-frame refusal, receipts whose
// actor is the person).
type Devices struct {
	GetDevice cqrs.Handler[fleet.GetDevice, projections.DeviceView]
	// ListDevices lists the person's devices (a fleet thread's
	// list_devices).
	ListDevices  cqrs.Handler[fleet.ListDevices, fleet.DevicePage]
	ListLeases   cqrs.Handler[fleet.ListLeases, fleet.LeasePage]
	AcquireLease cqrs.Handler[fleet.AcquireLease, projections.LeaseView]
	ReleaseLease cqrs.Handler[fleet.ReleaseLease, cqrs.Done]
	Observe      cqrs.Handler[fleet.ObserveDevice, fleet.Observation]
	Act          cqrs.Handler[fleet.PerformAction, fleet.ActOutcome]
	WaitFor      cqrs.Handler[fleet.WaitFor, fleet.WaitResult]
	// StartRun is the runs' entry point (POST /v1/runs): the copilot
	// starts a run as the person.
	StartRun cqrs.Handler[runs.StartRun, runs.StartedRun]
}

// Copilot is the capability.
type Copilot struct {
	cfg     Config
	threads *eventstore.Repository[*domain.CopilotThread, domain.Event]

	// base is cancelled when the service stops; turns run under it.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	// running are the turns this process runs, by thread id.
	running map[string]runningTurn
	// devices are the fleet's entry points, given by Handlers.
	devices Devices
}

type runningTurn struct {
	turnID string
	cancel context.CancelFunc
}

// New returns the copilot over cfg.
func New(cfg Config) *Copilot {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 12
	}
	if cfg.Policy == nil {
		p := domain.DefaultCopilotPolicy
		cfg.Policy = &p
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Minute
	}
	c := &Copilot{cfg: cfg, running: map[string]runningTurn{}}
	c.base, c.cancel = context.WithCancel(context.Background())
	c.threads = eventstore.NewRepository(cfg.Store, threadAggregate)
	c.threads.Now = c.now
	return c
}

func (c *Copilot) now() time.Time { return c.cfg.Now().UTC().Truncate(time.Microsecond) }

// Run waits until ctx ends, then stops the turns this process runs (each
// recorded failed, interrupted) and waits for them: the service's worker.
func (c *Copilot) Run(ctx context.Context) {
	<-ctx.Done()
	c.cancel()
	c.wg.Wait()
}

// Running reports whether this process is running a turn of the thread.
func (c *Copilot) Running(threadID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.running[threadID]
	return ok
}

// Handlers are the copilot's entry points of the application object.
type Handlers struct {
	PostMessage  cqrs.Handler[PostMessage, PostedMessage]
	StopTurn     cqrs.Handler[StopTurn, cqrs.Done]
	ListThreads  cqrs.Handler[ListThreads, []projections.CopilotThreadView]
	GetThread    cqrs.Handler[GetThread, Thread]
	StreamThread cqrs.Handler[StreamThread, *ThreadEvents]

	ListApprovals  cqrs.Handler[ListApprovals, []projections.CopilotApprovalView]
	DecideApproval cqrs.Handler[DecideApproval, DecidedApproval]

	// RunCommand is command mode: served with or without a model.
	RunCommand cqrs.Handler[RunCommand, CommandResult]

	// GetAllowance is the monthly token allowance (hosted).
	GetAllowance cqrs.Handler[GetAllowance, domain.CopilotAllowance]

	// SweepThread is the sweep's: expiries and lost turns.
	SweepThread cqrs.Handler[SweepThread, bool]
}

// Handlers returns the copilot's entry points, each behind d, acting on
// devices through dev.
func (c *Copilot) Handlers(d cqrs.Decorator, dev Devices) Handlers {
	c.devices = dev
	return Handlers{
		PostMessage:  cqrs.Serve(d, PostMessageHandler{c}),
		StopTurn:     cqrs.Serve(d, StopTurnHandler{c}),
		ListThreads:  cqrs.Serve(d, ListThreadsHandler{c}),
		GetThread:    cqrs.Serve(d, GetThreadHandler{c}),
		StreamThread: cqrs.Serve(d, StreamThreadHandler{c}),

		ListApprovals:  cqrs.Serve(d, ListApprovalsHandler{c}),
		DecideApproval: cqrs.Serve(d, DecideApprovalHandler{c}),

		RunCommand: cqrs.Serve(d, RunCommandHandler{c}),

		GetAllowance: cqrs.Serve(d, GetAllowanceHandler{c}),

		SweepThread: cqrs.Serve(d, SweepThreadHandler{c}),
	}
}

// threadAggregate folds a thread's stream.
var threadAggregate = eventstore.Aggregate[*domain.CopilotThread, domain.Event]{
	Stream: domain.CopilotThreadStream,
	Codec:  domain.Events,
	New:    domain.NewCopilotThread,
	Apply:  func(s **domain.CopilotThread, e domain.Event, _ eventstore.Recorded) { (*s).Apply(e) },
	OrgID:  func(s **domain.CopilotThread) string { return (*s).OrgID },
	// A turn loads its thread after every action: kept in memory, a load
	// reads only the events after the cached version.
	Clone: func(t *domain.CopilotThread) *domain.CopilotThread { return t.Clone() },
	Keep:  func(t **domain.CopilotThread) bool { return (*t).Exists() },
}

// access is every copilot entry point's first check: a person's session
// (an API key cannot reach the copilot; an OAuth app is told to use the
// console).
func access(a domain.Auth) error { return a.RequireSession("the copilot's routes") }

// chatServed answers service_unavailable when the deployment has no model.
func (c *Copilot) chatServed() error {
	if c.cfg.Model == nil {
		return domain.Errorf(domain.CodeServiceUnavailable,
			"this deployment has no copilot model configured (SERVICE_COPILOT_URL or SERVICE_PLANNER_URL); direct commands are still served")
	}
	return nil
}

// visibleThread loads a thread the caller may see; any other id answers
// not_found, the same as one that names nothing.
func (c *Copilot) visibleThread(ctx context.Context, a domain.Auth, id string) (*domain.CopilotThread, int64, error) {
	if !domain.HasPrefix(id, domain.PrefixCopilotThread) {
		return nil, 0, domain.ErrCopilotThreadNotFound(id)
	}
	t, v, err := c.threads.Load(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if !t.VisibleTo(a) {
		return nil, 0, domain.ErrCopilotThreadNotFound(id)
	}
	return t, v, nil
}

func (c *Copilot) wait(ctx context.Context, a eventstore.Appended) error {
	return cqrs.Await(ctx, c.cfg.ReadModels, a, projections.CopilotName)
}

// errTurnOver is what a turn's runner meets when its turn ended under it
// (stopped): it records nothing more.
var errTurnOver = errors.New("the turn is over")
