package devices

import (
	"context"
	"sync"
	"time"

	"phonefleet/domain"
)

// Reserve claims a place at the end of a device's queue. The place fixes
// the job's turn: jobs run in the order their places were reserved (the
// order requests arrived, once checked), whatever order the callers get
// round to submitting them in, so a caller reserves first and records its
// request after. Errors: device_busy (retryable, with retryAfterMs: the
// queue's length times the device's average job) when QueueLimit jobs are
// running or waiting; device_unavailable with reason offline (retryable)
// once the runtime is stopping.
func (r *Runtime) Reserve(deviceID string) (domain.QueueSlot, error) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil, domain.Errorf(domain.CodeDeviceUnavailable, "the service is stopping").
			With("reason", domain.ReasonOffline).With("deviceId", deviceID).WithRetryable(true)
	}
	q, ok := r.queues[deviceID]
	if !ok {
		q = &queue{wake: make(chan struct{}, 1), avg: 20 * time.Millisecond}
		r.queues[deviceID] = q
		r.wg.Add(1)
		go r.drive(q)
	}
	r.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if taken := len(q.slots) + q.running; taken >= r.cfg.QueueLimit {
		wait := max(50*time.Millisecond, time.Duration(taken)*q.avg)
		return nil, domain.Errorf(domain.CodeDeviceBusy, "%d actions are already waiting on device %s; retry later", taken, deviceID).
			WithRetryable(true).With("deviceId", deviceID).With("retryAfterMs", wait.Milliseconds())
	}
	s := &Slot{r: r, q: q}
	q.slots = append(q.slots, s)
	return s, nil
}

// Slot is a reserved place in a device's queue. Exactly one of Submit and
// Cancel must be called on it, once.
type Slot struct {
	r *Runtime
	q *queue
	// job is set by Submit; cancelled by Cancel before it.
	job       *job
	cancelled bool
}

// job is one unit of device work: run when its turn comes, or abandon
// instead when the runtime stops before then.
type job struct {
	run, abandon func(ctx context.Context)
}

// Submit fills the place with a job. When the place's turn comes, run is
// called with a context that ends when the runtime stops (a job that must
// outlive it detaches itself). If the runtime stops before the job
// started, abandon is called instead, with that ended context: the job
// never touched its device. Submit never blocks on the job; either
// function may run on the caller's goroutine (abandon, when the runtime
// has already stopped) or on the device's.
func (s *Slot) Submit(run, abandon func(ctx context.Context)) {
	s.q.mu.Lock()
	if s.q.closed {
		s.q.mu.Unlock()
		abandon(s.r.base)
		return
	}
	s.job = &job{run: run, abandon: abandon}
	s.q.mu.Unlock()
	s.q.signal()
}

// Cancel gives the place back unused: the jobs behind it move up.
func (s *Slot) Cancel() {
	s.q.mu.Lock()
	if s.job == nil {
		s.cancelled = true
	}
	s.q.mu.Unlock()
	s.q.signal()
}

// queue is one device's bounded FIFO of reserved places.
type queue struct {
	mu      sync.Mutex
	slots   []*Slot // in reservation order
	running int     // 1 while a job runs
	wake    chan struct{}
	avg     time.Duration // moving average of a job's duration, for retryAfterMs
	// closed is set once the device goroutine has stopped; a job submitted
	// later is abandoned at once.
	closed bool
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the job of the first place once it is submitted; cancelled
// places are dropped. ok is false while the first place is still empty.
func (q *queue) next() (j job, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.slots) > 0 && q.slots[0].cancelled {
		q.slots = q.slots[1:]
	}
	if len(q.slots) == 0 || q.slots[0].job == nil {
		return j, false
	}
	j = *q.slots[0].job
	q.slots = q.slots[1:]
	q.running = 1
	return j, true
}

// drive runs one device's jobs in reservation order until the runtime
// stops.
func (r *Runtime) drive(q *queue) {
	defer r.wg.Done()
	for {
		j, ok := q.next()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-r.base.Done():
				r.drain(q)
				return
			}
		}
		if r.base.Err() != nil {
			j.abandon(r.base)
			q.finish(0)
			continue
		}
		start := time.Now()
		j.run(r.base)
		q.finish(time.Since(start))
	}
}

func (q *queue) finish(took time.Duration) {
	q.mu.Lock()
	q.running = 0
	if took > 0 {
		q.avg = (q.avg*7 + took) / 8
	}
	q.mu.Unlock()
}

// drain abandons the jobs still waiting when the runtime stops. A place
// reserved but not yet submitted is abandoned when it is (Submit).
func (r *Runtime) drain(q *queue) {
	q.mu.Lock()
	q.closed = true
	slots := q.slots
	q.slots = nil
	q.mu.Unlock()
	for _, s := range slots {
		q.mu.Lock()
		j := s.job
		q.mu.Unlock()
		if j != nil {
			j.abandon(r.base)
		}
	}
}
