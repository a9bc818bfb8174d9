package devices

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"phonefleet/domain"
)

// host is a Host whose claim the test hands out.
type host struct {
	mu       sync.Mutex
	free     bool
	hosting  bool
	released int
}

func (h *host) TryHost(context.Context) (hosting, tookOver bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.free && !h.hosting {
		h.hosting, tookOver = true, true
	}
	return h.hosting, tookOver, nil
}

func (h *host) Hosting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hosting
}

func (h *host) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosting = false
	h.released++
}

func newRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	if cfg.Host == nil {
		cfg.Host = &host{free: true}
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	r := New(cfg)
	t.Cleanup(r.Stop)
	return r
}

func reserve(t *testing.T, r *Runtime, deviceID string) domain.QueueSlot {
	t.Helper()
	s, err := r.Reserve(deviceID)
	if err != nil {
		t.Fatalf("reserve on %s: %v", deviceID, err)
	}
	return s
}

// TestJobsRunInReservationOrder: a device runs its jobs one at a time, in
// the order their places were reserved, whatever order they were
// submitted in; a cancelled place is skipped.
func TestJobsRunInReservationOrder(t *testing.T) {
	r := newRuntime(t, Config{})
	slots := make([]domain.QueueSlot, 4)
	for i := range slots {
		slots[i] = reserve(t, r, "dev_a")
	}
	var mu sync.Mutex
	var order []int
	running := 0
	var wg sync.WaitGroup
	for i := len(slots) - 1; i >= 0; i-- {
		if i == 2 {
			slots[i].Cancel()
			continue
		}
		wg.Add(1)
		slots[i].Submit(func(context.Context) {
			defer wg.Done()
			mu.Lock()
			running++
			if running > 1 {
				t.Errorf("job %d runs beside another", i)
			}
			order = append(order, i)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
		}, func(context.Context) {
			defer wg.Done()
			t.Errorf("job %d abandoned; want it run", i)
		})
	}
	wg.Wait()
	if got, want := order, []int{0, 1, 3}; !slices.Equal(got, want) {
		t.Errorf("jobs ran in order %v; want %v", got, want)
	}
}

// TestFullQueueAnswersDeviceBusy: a device takes QueueLimit jobs, running
// and waiting; the next is refused with device_busy and retryAfterMs, and
// a place given back makes room. Other devices have queues of their own.
func TestFullQueueAnswersDeviceBusy(t *testing.T) {
	r := newRuntime(t, Config{QueueLimit: 2})
	first := reserve(t, r, "dev_a")
	reserve(t, r, "dev_a")
	_, err := r.Reserve("dev_a")
	e := domain.AsError(err)
	if e.Code != domain.CodeDeviceBusy || e.Extra["retryAfterMs"] == nil {
		t.Fatalf("third place: got %v; want device_busy with retryAfterMs", err)
	}
	if e.Retryable == nil || !*e.Retryable {
		t.Errorf("device_busy: got retryable %v; want true", e.Retryable)
	}
	reserve(t, r, "dev_b")
	first.Cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := r.Reserve("dev_a")
		if err == nil {
			s.Cancel()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a place was given back: got %v; want a place", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// noSettle is a takeover pass with nothing to settle.
func noSettle(context.Context, string) error { return nil }

// TestStopAbandonsWaitingJobs: stopping lets the running job finish and
// abandons the ones waiting, including one submitted after the stop;
// afterwards the runtime refuses work as offline and has given the host
// claim back.
func TestStopAbandonsWaitingJobs(t *testing.T) {
	h := &host{free: true}
	r := newRuntime(t, Config{Host: h})
	if err := r.Prepare(bg(), noSettle); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	type ending struct {
		job string
		ran bool
		ctx error
	}
	endings := make(chan ending, 3)
	job := func(name string) (run, abandon func(context.Context)) {
		return func(ctx context.Context) {
				if name == "running" {
					close(entered)
					<-release
				}
				endings <- ending{name, true, ctx.Err()}
			}, func(ctx context.Context) {
				endings <- ending{name, false, ctx.Err()}
			}
	}
	running, waiting, late := reserve(t, r, "dev_a"), reserve(t, r, "dev_a"), reserve(t, r, "dev_a")
	running.Submit(job("running"))
	<-entered
	waiting.Submit(job("waiting"))
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	// Once the runtime refuses new work it has cancelled the waiting jobs;
	// only then may the running one end.
	for {
		s, err := r.Reserve("dev_a")
		if e := domain.AsError(err); err != nil && e.Code == domain.CodeDeviceUnavailable {
			if e.Extra["reason"] != domain.ReasonOffline {
				t.Errorf("reserve while stopping: got %v; want device_unavailable, offline", err)
			}
			break
		}
		if s != nil {
			s.Cancel()
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-stopped
	late.Submit(job("late"))
	got := map[string]ending{}
	for range 3 {
		e := <-endings
		got[e.job] = e
	}
	tests := []struct {
		job string
		ran bool
	}{{"running", true}, {"waiting", false}, {"late", false}}
	for _, tt := range tests {
		t.Run(tt.job, func(t *testing.T) {
			e := got[tt.job]
			if e.ran != tt.ran {
				t.Errorf("got ran %v; want %v", e.ran, tt.ran)
			}
			if !tt.ran && e.ctx == nil {
				t.Errorf("abandoned with a live context; want it ended")
			}
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hosting || h.released == 0 {
		t.Errorf("after Stop: got hosting %v, released %d times; want the claim given back", h.hosting, h.released)
	}
}

// TestHostTakeover: the takeover pass runs, for the sim host, when this
// process becomes the host — at Prepare if the claim is free, else from
// Run once it frees up — and not while another process holds it.
func TestHostTakeover(t *testing.T) {
	h := &host{}
	took := make(chan struct{}, 4)
	settle := func(_ context.Context, host string) error {
		if host != domain.HostSim {
			t.Errorf("settled host %q; want %q", host, domain.HostSim)
		}
		took <- struct{}{}
		return nil
	}
	r := newRuntime(t, Config{Host: h, HostRetry: time.Millisecond})
	if err := r.Prepare(bg(), settle); err != nil {
		t.Fatal(err)
	}
	if len(took) != 0 {
		t.Fatalf("Prepare without the claim settled %d times; want 0", len(took))
	}
	ctx, cancel := context.WithCancel(bg())
	done := make(chan struct{})
	go func() { r.Run(ctx, settle); close(done) }()
	h.mu.Lock()
	h.free = true
	h.mu.Unlock()
	select {
	case <-took:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not take the freed claim")
	}
	time.Sleep(20 * time.Millisecond) // more ticks, still the host
	cancel()
	<-done
	if n := len(took); n != 0 {
		t.Errorf("the takeover ran %d more times while this process stayed the host; want 0", n)
	}
	if _, err := r.Reserve("dev_a"); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Errorf("reserve after Run ended: got %v; want device_unavailable", err)
	}
}

func bg() context.Context { return context.Background() }
