// Package workers holds phonefleet's background loops: each reads read
// models or streams and issues commands (lease expiry, the per-device
// action executor, the frame retention sweep, …).
package workers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"phonefleet/commands"
	"phonefleet/domain"
)

// Host is the claim on driving the devices (internal/backends.SimHost):
// only the process holding it executes device work.
type Host interface {
	// TryHost takes the claim if it is free (or keeps it) and reports
	// whether this process holds it.
	TryHost(ctx context.Context) (bool, error)
	// Hosting reports whether this process holds the claim.
	Hosting() bool
	// Release gives the claim back.
	Release()
}

// ExecutorOptions configure an Executor.
type ExecutorOptions struct {
	// QueueLimit is how many jobs (running and waiting) one device takes
	// before answering device_busy; zero means DefaultQueueLimit.
	QueueLimit int
	// HostRetry is how often a process that is not the host tries to
	// become it; zero means 5 seconds.
	HostRetry time.Duration
	Logger    *slog.Logger
}

// DefaultQueueLimit is a device's default queue bound.
const DefaultQueueLimit = 16

// Executor runs device work: one goroutine per device, taking that
// device's jobs one at a time in arrival order from a bounded queue. It
// implements commands.ActionQueue.
//
// When it becomes the host (Prepare, or later in Run when another process
// gave the claim up) it first marks every action left requested but
// unfinished as outcome unknown: such an action is never run again.
type Executor struct {
	fleet *commands.Fleet
	host  Host
	opts  ExecutorOptions

	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	devices map[string]*deviceQueue
	stopped bool
}

// NewExecutor returns an executor of fleet's jobs and sets itself as the
// fleet's queue.
func NewExecutor(fleet *commands.Fleet, host Host, opts ExecutorOptions) *Executor {
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = DefaultQueueLimit
	}
	if opts.HostRetry <= 0 {
		opts.HostRetry = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Executor{fleet: fleet, host: host, opts: opts, devices: map[string]*deviceQueue{}}
	e.base, e.cancel = context.WithCancel(context.Background())
	fleet.UseQueue(e)
	return e
}

// Prepare tries to become the host and, if it does, marks abandoned
// actions as outcome unknown. Call it before serving requests.
func (e *Executor) Prepare(ctx context.Context) error {
	ok, err := e.host.TryHost(ctx)
	if err != nil || !ok {
		return err
	}
	n, err := e.fleet.MarkAbandonedActions(ctx)
	if n > 0 {
		e.opts.Logger.Warn("actions left unfinished by an earlier process marked outcome unknown", "count", n)
	}
	return err
}

// Run keeps trying to become the host while it is not, and when ctx ends
// stops every device goroutine (jobs still waiting fail as never started)
// and gives the claim back.
func (e *Executor) Run(ctx context.Context) {
	t := time.NewTicker(e.opts.HostRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			e.Stop()
			return
		case <-t.C:
		}
		was := e.host.Hosting()
		ok, err := e.host.TryHost(ctx)
		if err != nil && ctx.Err() == nil {
			e.opts.Logger.Warn("device host claim failed", "err", err)
			continue
		}
		if ok && !was {
			e.opts.Logger.Info("this process now drives the sim devices")
			if n, err := e.fleet.MarkAbandonedActions(ctx); err != nil {
				e.opts.Logger.Error("marking abandoned actions failed", "err", err)
			} else if n > 0 {
				e.opts.Logger.Warn("actions left unfinished by an earlier process marked outcome unknown", "count", n)
			}
		}
	}
}

// Stop ends every device goroutine after its current job, fails the jobs
// still waiting, and gives the host claim back.
func (e *Executor) Stop() {
	e.mu.Lock()
	e.stopped = true
	e.cancel() // under the lock: a Reserve refused as stopping sees jobs cancelled
	e.mu.Unlock()
	e.wg.Wait()
	e.host.Release()
}

// Reserve implements commands.ActionQueue. The reservation fixes the
// job's place: jobs run in the order their places were reserved (the
// order the requests arrived, once checked), whatever order their
// recording finishes in.
func (e *Executor) Reserve(deviceID string) (commands.Slot, error) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, domain.Errorf(domain.CodeDeviceUnavailable, "the service is stopping").
			With("reason", domain.ReasonOffline).With("deviceId", deviceID).WithRetryable(true)
	}
	q, ok := e.devices[deviceID]
	if !ok {
		q = &deviceQueue{wake: make(chan struct{}, 1), avg: 20 * time.Millisecond}
		e.devices[deviceID] = q
		e.wg.Add(1)
		go e.drive(q)
	}
	e.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if taken := len(q.slots) + q.running; taken >= e.opts.QueueLimit {
		wait := max(50*time.Millisecond, time.Duration(taken)*q.avg)
		return nil, domain.Errorf(domain.CodeDeviceBusy, "%d actions are already waiting on device %s; retry later", taken, deviceID).
			WithRetryable(true).With("deviceId", deviceID).With("retryAfterMs", wait.Milliseconds())
	}
	s := &slot{e: e, q: q}
	q.slots = append(q.slots, s)
	return s, nil
}

// Waiting reports how many places are taken (not yet running) on a device.
func (e *Executor) Waiting(deviceID string) int {
	e.mu.Lock()
	q, ok := e.devices[deviceID]
	e.mu.Unlock()
	if !ok {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.slots)
}

// deviceQueue is one device's bounded FIFO of reserved places.
type deviceQueue struct {
	mu      sync.Mutex
	slots   []*slot // in reservation order
	running int     // 1 while a job runs
	wake    chan struct{}
	avg     time.Duration // moving average of a job's duration
	// closed is set once the device goroutine has stopped; a job submitted
	// later is answered as never started.
	closed bool
}

// slot is one reserved place; it holds its job once submitted.
type slot struct {
	e         *Executor
	q         *deviceQueue
	job       *commands.Job
	cancelled bool
}

// Submit implements commands.Slot.
func (s *slot) Submit(job commands.Job) {
	s.q.mu.Lock()
	if s.q.closed {
		s.q.mu.Unlock()
		job.Done <- s.e.fleet.AbandonJob(s.e.base, job)
		return
	}
	s.job = &job
	s.q.mu.Unlock()
	s.q.signal()
}

// Cancel implements commands.Slot.
func (s *slot) Cancel() {
	s.q.mu.Lock()
	if s.job == nil {
		s.cancelled = true
	}
	s.q.mu.Unlock()
	s.q.signal()
}

func (q *deviceQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the job of the first place once it is submitted; cancelled
// places are dropped. ok is false while the first place is still empty.
func (q *deviceQueue) next() (job commands.Job, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.slots) > 0 && q.slots[0].cancelled {
		q.slots = q.slots[1:]
	}
	if len(q.slots) == 0 || q.slots[0].job == nil {
		return job, false
	}
	job = *q.slots[0].job
	q.slots = q.slots[1:]
	q.running = 1
	return job, true
}

// drive runs one device's jobs in reservation order until the executor
// stops.
func (e *Executor) drive(q *deviceQueue) {
	defer e.wg.Done()
	for {
		job, ok := q.next()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-e.base.Done():
				e.drain(q)
				return
			}
		}
		if e.base.Err() != nil {
			job.Done <- e.fleet.AbandonJob(e.base, job)
			e.finish(q, 0)
			continue
		}
		start := time.Now()
		res := e.fleet.Execute(e.base, job)
		job.Done <- res
		e.finish(q, time.Since(start))
	}
}

func (e *Executor) finish(q *deviceQueue, took time.Duration) {
	q.mu.Lock()
	q.running = 0
	if took > 0 {
		q.avg = (q.avg*7 + took) / 8
	}
	q.mu.Unlock()
}

// drain fails the jobs still waiting when the executor stops: they never
// started, so they are recorded as failed, not as unknown outcomes. A place
// reserved but not yet submitted is answered when it is.
func (e *Executor) drain(q *deviceQueue) {
	q.mu.Lock()
	q.closed = true
	slots := q.slots
	q.slots = nil
	q.mu.Unlock()
	for _, s := range slots {
		q.mu.Lock()
		job := s.job
		q.mu.Unlock()
		if job != nil {
			job.Done <- e.fleet.AbandonJob(e.base, *job)
		}
	}
}

var _ commands.ActionQueue = (*Executor)(nil)
