package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/domain"
	"phonefleet/internal/fleettest"
	"phonefleet/workers"
)

var bg = context.Background()

// TestLeaseExpirySweep: leases past their expiry are recorded as expired
// by the worker, once, and the devices show as free.
func TestLeaseExpirySweep(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 3, Clock: clock})
	w := workers.LeaseExpiry{Fleet: env.Fleet, Pool: env.Pool, Now: clock.Now}
	for i, dev := range env.DeviceIDs {
		ttl := 30
		if i == 2 {
			ttl = 600 // still in force after the sweep
		}
		if _, err := env.Fleet.AcquireLease().Handle(bg, commands.AcquireLease{Auth: env.Auth, DeviceID: dev, TTLSeconds: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	env.Settle(t)
	tests := []struct {
		name    string
		advance time.Duration
		want    int
	}{
		{"before expiry", 29 * time.Second, 0},
		{"past expiry", 2 * time.Second, 2},
		{"already expired", time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.Advance(tt.advance)
			env.Settle(t)
			n, err := w.RunOnce(bg)
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want {
				t.Errorf("got %d leases expired; want %d", n, tt.want)
			}
		})
	}
	env.Settle(t)
	page, err := env.Fleet.ListLeases(bg, env.Auth, commands.LeaseQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Leases) != 1 || page.Leases[0].DeviceID != env.DeviceIDs[2] {
		t.Errorf("got leases %+v; want only the long one", page.Leases)
	}
	d, err := env.Fleet.GetDevice(bg, env.Auth, env.DeviceIDs[0])
	if err != nil || d.Leased {
		t.Errorf("got device %+v, %v; want it free", d, err)
	}
}

// TestFrameRetention: a frame past retention is unreadable at once, as if
// it never existed, and the sweep deletes it.
func TestFrameRetention(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Clock: clock, FrameRetention: time.Hour})
	dev := env.DeviceIDs[0]
	obs, err := env.Fleet.ObserveDevice().Handle(bg, commands.ObserveDevice{Auth: env.Auth, DeviceID: dev, Image: true})
	if err != nil {
		t.Fatal(err)
	}
	id := obs.Frame.FrameID
	if _, err := env.Fleet.GetFrame(bg, env.Auth, id, commands.FrameOptions{Image: true}); err != nil {
		t.Fatalf("fresh frame: %v", err)
	}
	sweep := workers.FrameRetention{Pool: env.Pool, Now: clock.Now}
	if n, err := sweep.RunOnce(bg); err != nil || n != 0 {
		t.Fatalf("sweep of fresh frames: got %d, %v; want 0", n, err)
	}
	clock.Advance(time.Hour)
	if _, err := env.Fleet.GetFrame(bg, env.Auth, id, commands.FrameOptions{}); domain.ErrorCode(err) != domain.CodeFrameNotFound {
		t.Fatalf("expired frame before the sweep: got %v; want frame_not_found", err)
	}
	if n, err := sweep.RunOnce(bg); err != nil || n != 1 {
		t.Fatalf("sweep: got %d, %v; want 1", n, err)
	}
	if _, err := env.Fleet.GetFrame(bg, env.Auth, id, commands.FrameOptions{}); domain.ErrorCode(err) != domain.CodeFrameNotFound {
		t.Fatalf("swept frame: got %v; want frame_not_found", err)
	}
}

// held blocks Act until released.
type held struct {
	domain.Backend
	entered, release chan struct{}
}

func (h held) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.Backend.Act(ctx, a)
}

// TestStoppingFailsWaitingActions: when the executor stops, the running
// action finishes and the ones still waiting fail as never started
// (device_unavailable, offline) — not as unknown outcomes.
func TestStoppingFailsWaitingActions(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return held{b, entered, release}
	}})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = env.Fleet.PerformAction().Handle(bg, commands.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
				Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: fmt.Sprintf("stop-%d", i), LeaseID: lease})
		}()
		if i == 0 {
			<-entered
			continue
		}
		for env.Executor.Waiting(dev) != i {
			time.Sleep(time.Millisecond)
		}
	}
	stopped := make(chan struct{})
	go func() { env.Executor.Stop(); close(stopped) }()
	// Once the executor refuses new work it has cancelled the waiting jobs;
	// only then may the running action end.
	for {
		s, err := env.Executor.Reserve(dev)
		if err != nil {
			break
		}
		s.Cancel()
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-stopped
	wg.Wait()
	if errs[0] != nil {
		t.Errorf("the running action: %v; want it committed", errs[0])
	}
	for i := 1; i < len(errs); i++ {
		e := domain.AsError(errs[i])
		if e.Code != domain.CodeDeviceUnavailable || e.Extra["reason"] != domain.ReasonOffline {
			t.Errorf("waiting action %d: got %v; want device_unavailable, offline", i, errs[i])
		}
	}
	env.Settle(t)
	for i := 1; i < len(errs); i++ {
		r, err := env.Fleet.GetReceipt(bg, env.Auth, fmt.Sprintf("stop-%d", i))
		if err != nil || r.State != domain.ReceiptFailed || r.OutcomeUnknown {
			t.Errorf("receipt stop-%d: got %+v, %v; want failed, outcome known", i, r, err)
		}
	}
}
