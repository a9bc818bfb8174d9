// Package devices is the device runtime: where each device is hosted and
// how a call reaches the process holding it (routing.go, with
// internal/cluster as the transport), which backend adapter drives it, one
// bounded first-in-first-out queue per device that runs the device's work
// one job at a time, and the caches of the frames stored recently.
//
// The runtime runs jobs as closures and carries calls as bytes, and knows
// nothing of actions, events or commands: the fleet's commands
// (commands/fleet) decide what a job or a call does to its device and
// record what came of it. The runtime never calls back into them; what it
// runs for others — the takeover pass (Settle) and the calls forwarded to
// it (Calls) — are functions the wiring gives it.
package devices

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"phonefleet/domain"
)

// Backends resolves devices to their adapters and finds the frame renderer
// of a backend kind (internal/backends.Registry implements it).
type Backends interface {
	domain.Resolver
	// Renderer returns the frame renderer of a backend kind, if it has one.
	Renderer(kind string) (domain.FrameRenderer, bool)
}

// Host is the claim on driving the devices (internal/backends.SimHost):
// only the process holding it runs device work, since two processes
// driving copies of one phone would let them diverge.
type Host interface {
	// TryHost takes the claim if it is free (or keeps it) and reports
	// whether this process holds it, and whether it has just taken it
	// over: another process may have driven the devices since this one
	// last did, so what was left unfinished must be settled. Errors are
	// the database's.
	TryHost(ctx context.Context) (hosting, tookOver bool, err error)
	// Hosting reports whether this process holds the claim.
	Hosting() bool
	// Release gives the claim back.
	Release()
}

// HostSet is a set of hosts other than the sim host that this process
// may hold: the gateways whose tunnels end here (the gateway hub).
type HostSet interface {
	// Holds reports whether this process holds host key now.
	Holds(key string) bool
	// Held lists the host keys this process holds now.
	Held() []string
}

// Config configures a Runtime.
type Config struct {
	Backends Backends
	Host     Host
	// Gateways holds the gateways' hosts; nil means none end here.
	Gateways HostSet
	// Transport carries calls to the processes holding the hosts this one
	// does not (internal/cluster.Node); nil means there are none: one
	// instance.
	Transport Transport
	// HostState tells who holds a host now, so that a call whose holder is
	// changing is sent again, and one whose holder went away is given up;
	// nil means it cannot be told.
	HostState HostState
	// QueueLimit is how many jobs (running and waiting) one device takes
	// before answering device_busy; zero means DefaultQueueLimit.
	QueueLimit int
	// HostRetry is how often a process that is not the host tries to
	// become it; zero means DefaultHostRetry.
	HostRetry time.Duration
	// FrameRetention is how long a new frame stays readable; zero means
	// DefaultFrameRetention.
	FrameRetention time.Duration
	Logger         *slog.Logger
}

// Defaults of Config.
const (
	DefaultQueueLimit     = 16
	DefaultHostRetry      = 5 * time.Second
	DefaultFrameRetention = 7 * 24 * time.Hour
)

// Runtime is the device runtime of one process. It is safe for concurrent
// use.
type Runtime struct {
	cfg Config

	// base is the context jobs run with; Stop cancels it.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	queues  map[string]*queue
	stopped bool

	frames *frameCache
}

// New returns a runtime over cfg. It drives nothing until Prepare or Run
// makes this process the host.
func New(cfg Config) *Runtime {
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = DefaultQueueLimit
	}
	if cfg.HostRetry <= 0 {
		cfg.HostRetry = DefaultHostRetry
	}
	if cfg.FrameRetention <= 0 {
		cfg.FrameRetention = DefaultFrameRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runtime{cfg: cfg, queues: map[string]*queue{}, frames: newFrameCache(recentFramesCap)}
	r.base, r.cancel = context.WithCancel(context.Background())
	return r
}

// Settle settles what an earlier holder of host left unfinished. The
// wiring passes the pass that marks the actions it left requested as
// outcome unknown (workers.AbandonedActions.Settle): whoever drives the
// devices next must settle them before it takes new work, and only the
// new holder knows when that is.
type Settle func(ctx context.Context, host string) error

// Prepare tries to become the host and, if it does, settles what the
// earlier host left. Call it before serving requests, so that no new job
// meets an action an earlier process left unsettled.
func (r *Runtime) Prepare(ctx context.Context, settle Settle) error {
	_, tookOver, err := r.cfg.Host.TryHost(ctx)
	if err != nil || !tookOver {
		return err
	}
	return settle(ctx, domain.HostSim)
}

// Run keeps trying to become the host while another process is, settling
// what the earlier host left each time it does, and when ctx ends stops
// the runtime (Stop).
func (r *Runtime) Run(ctx context.Context, settle Settle) {
	t := time.NewTicker(r.cfg.HostRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Stop()
			return
		case <-t.C:
		}
		_, tookOver, err := r.cfg.Host.TryHost(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("device host claim failed", "err", err)
			continue
		}
		if tookOver {
			r.cfg.Logger.Info("this process now drives the sim devices")
			if err := settle(ctx, domain.HostSim); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Error("taking over the devices failed", "err", err)
			}
		}
	}
}

// Stop lets every device finish the job it is running, abandons the jobs
// still waiting (each runs its abandon function instead), refuses new
// ones, and gives the host claim back. It may be called more than once.
func (r *Runtime) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.cancel() // under the lock: a Reserve refused as stopping sees jobs cancelled
	r.mu.Unlock()
	r.wg.Wait()
	r.cfg.Host.Release()
}

// Hosting reports whether this process hosts the devices now.
func (r *Runtime) Hosting() bool { return r.cfg.Host.Hosting() }

// Locate names the host d is driven under (domain.Device.HostKey) and
// reports whether this process holds it now.
func (r *Runtime) Locate(d *domain.Device) (host string, local bool) {
	host = d.HostKey()
	if host == domain.HostSim {
		return host, r.cfg.Host.Hosting()
	}
	return host, r.cfg.Gateways != nil && r.cfg.Gateways.Holds(host)
}

// HeldHosts lists the hosts this process holds now: the sim host, when it
// holds it, and its gateways'.
func (r *Runtime) HeldHosts() []string {
	var held []string
	if r.cfg.Host.Hosting() {
		held = append(held, domain.HostSim)
	}
	if r.cfg.Gateways != nil {
		held = append(held, r.cfg.Gateways.Held()...)
	}
	return held
}

// fencer is a host claim whose writes are fenced in the database
// (internal/backends.SimHost; the gateway hub per gateway key).
type fencer interface {
	Fence() (domain.HostFence, bool)
	Lose()
}

// keyFencer is a set of fenced host claims (the gateway hub).
type keyFencer interface {
	Fence(key string) (domain.HostFence, bool)
	Lose(key string)
}

// Fence returns this process's claim on host as its writes carry it (see
// domain.HostFence); ok is false when this process does not hold host.
// A host whose claim is not fenced (a Host or HostSet without Fence)
// answers Epoch 0 while held.
func (r *Runtime) Fence(host string) (domain.HostFence, bool) {
	if host == domain.HostSim {
		if f, ok := r.cfg.Host.(fencer); ok {
			return f.Fence()
		}
		return domain.HostFence{Host: host}, r.cfg.Host.Hosting()
	}
	if r.cfg.Gateways == nil {
		return domain.HostFence{}, false
	}
	if f, ok := r.cfg.Gateways.(keyFencer); ok {
		return f.Fence(host)
	}
	return domain.HostFence{Host: host}, r.cfg.Gateways.Holds(host)
}

// Lose gives up host at once, because the database refused a write made
// under this process's claim on it (another process holds it now): this
// process stops driving its devices until it takes the claim again.
func (r *Runtime) Lose(host string) {
	r.cfg.Logger.Warn("this process lost its claim on a device host; it stops driving its devices", "host", host)
	if host == domain.HostSim {
		if f, ok := r.cfg.Host.(fencer); ok {
			f.Lose()
		}
		return
	}
	if f, ok := r.cfg.Gateways.(keyFencer); ok {
		f.Lose(host)
	}
}

// Resolve returns the adapter of a device. Errors:
// backend_resolution_failed (the device names no valid kind),
// backend_not_implemented (the kind has no adapter yet),
// device_unavailable with reason offline (this process does not host it),
// internal_error (its saved state cannot be read).
func (r *Runtime) Resolve(ctx context.Context, d *domain.Device) (domain.Backend, error) {
	return r.cfg.Backends.Resolve(ctx, d)
}

// Renderer returns the frame renderer of a backend kind, if it has one:
// it draws a stored frame's pictures from the state it was taken in.
func (r *Runtime) Renderer(kind string) (domain.FrameRenderer, bool) {
	return r.cfg.Backends.Renderer(kind)
}
