package workers_test

import (
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

var bg = testutil.Background

// TestLeaseExpirySweep: leases past their expiry are recorded as expired
// by the worker, once, and the devices show as free.
func TestLeaseExpirySweep(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 3, Clock: clock})
	w := workers.LeaseExpiry{Expire: env.App.Fleet.ExpireLease, Pool: env.Pool, Now: clock.Now}
	for i, dev := range env.DeviceIDs {
		ttl := 30
		if i == 2 {
			ttl = 600 // still in force after the sweep
		}
		if _, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, TTLSeconds: ttl}); err != nil {
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
	page, err := env.App.Fleet.ListLeases.Handle(bg, fleet.ListLeases{Auth: env.Auth, LeaseQuery: fleet.LeaseQuery{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Leases) != 1 || page.Leases[0].DeviceID != env.DeviceIDs[2] {
		t.Errorf("got leases %+v; want only the long one", page.Leases)
	}
	d, err := env.App.Fleet.GetDevice.Handle(bg, fleet.GetDevice{Auth: env.Auth, DeviceID: env.DeviceIDs[0]})
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
	obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Image: true})
	if err != nil {
		t.Fatal(err)
	}
	id := obs.Frame.FrameID
	if _, err := env.App.Fleet.GetFrame.Handle(bg, fleet.GetFrame{Auth: env.Auth, FrameID: id, FrameOptions: fleet.FrameOptions{Image: true}}); err != nil {
		t.Fatalf("fresh frame: %v", err)
	}
	sweep := workers.FrameRetention{Pool: env.Pool, Now: clock.Now}
	if n, err := sweep.RunOnce(bg); err != nil || n != 0 {
		t.Fatalf("sweep of fresh frames: got %d, %v; want 0", n, err)
	}
	clock.Advance(time.Hour)
	if _, err := env.App.Fleet.GetFrame.Handle(bg, fleet.GetFrame{Auth: env.Auth, FrameID: id, FrameOptions: fleet.FrameOptions{}}); domain.ErrorCode(err) != domain.CodeFrameNotFound {
		t.Fatalf("expired frame before the sweep: got %v; want frame_not_found", err)
	}
	if n, err := sweep.RunOnce(bg); err != nil || n != 1 {
		t.Fatalf("sweep: got %d, %v; want 1", n, err)
	}
	if _, err := env.App.Fleet.GetFrame.Handle(bg, fleet.GetFrame{Auth: env.Auth, FrameID: id, FrameOptions: fleet.FrameOptions{}}); domain.ErrorCode(err) != domain.CodeFrameNotFound {
		t.Fatalf("swept frame: got %v; want frame_not_found", err)
	}
}
