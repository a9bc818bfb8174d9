package fleet_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// freshScreenshot is the screenshot of a new sim phone of the device's
// model and serial.
func freshScreenshot(t *testing.T, env *fleettest.Env, dev string) []byte {
	t.Helper()
	p := env.Phone(t, dev).Phone()
	fresh, err := sim.New(p.Model().Name, p.Serial())
	if err != nil {
		t.Fatal(err)
	}
	b, err := fresh.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func screenshot(t *testing.T, env *fleettest.Env, dev string) []byte {
	t.Helper()
	obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Image: true})
	if err != nil {
		t.Fatal(err)
	}
	return obs.PNG
}

// dirty leases nothing itself: it installs an app and opens Notes under
// lease, so the phone differs from a fresh one.
func dirty(t *testing.T, env *fleettest.Env, dev, lease string) {
	t.Helper()
	if _, err := act(env, dev, lease, lease+"-install", "install_app", `{"package":"com.example.calculator"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := act(env, dev, lease, lease+"-open", "open_app", `{"package":"com.example.notes"}`); err != nil {
		t.Fatal(err)
	}
}

// resetEvents counts the device.reset events of a device's stream.
func resetEvents(t *testing.T, env *fleettest.Env, dev string) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(bg, `SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'device.reset'`,
		domain.DeviceStream(dev)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestResetOnRelease: a lease asked with resetOnRelease leaves, once
// released, a phone whose screenshot is byte-identical to a fresh phone's
// of the same model and serial, and records device.reset once; a lease
// without it leaves the phone as it was.
func TestResetOnRelease(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 2})
	for _, tt := range []struct {
		name      string
		dev       string
		reset     bool
		wantFresh bool
	}{
		{"resetOnRelease", env.DeviceIDs[0], true, true},
		{"plain lease", env.DeviceIDs[1], false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := freshScreenshot(t, env, tt.dev)
			l, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: tt.dev, ResetOnRelease: tt.reset})
			if err != nil {
				t.Fatal(err)
			}
			dirty(t, env, tt.dev, l.LeaseID)
			if bytes.Equal(screenshot(t, env, tt.dev), want) {
				t.Fatal("the phone looks fresh while leased; the test proves nothing")
			}
			if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(bg, fleet.ReleaseLease{Auth: env.Auth, DeviceID: tt.dev, LeaseID: l.LeaseID})); err != nil {
				t.Fatal(err)
			}
			if got := bytes.Equal(screenshot(t, env, tt.dev), want); got != tt.wantFresh {
				t.Errorf("screenshot after release equals a fresh phone's: %v; want %v", got, tt.wantFresh)
			}
			wantEvents := map[bool]int{true: 1, false: 0}[tt.reset]
			if got := resetEvents(t, env, tt.dev); got != wantEvents {
				t.Errorf("got %d device.reset events; want %d", got, wantEvents)
			}
			// The next holder gets the device at once.
			l2, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: tt.dev})
			if err != nil {
				t.Fatalf("acquire after release: %v", err)
			}
			if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(bg, fleet.ReleaseLease{Auth: env.Auth, DeviceID: tt.dev, LeaseID: l2.LeaseID})); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestResetOnExpiry: a lease with resetOnRelease that runs out (injected
// clock, expiry recorded by the lease-expiry worker) resets the phone too.
func TestResetOnExpiry(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Clock: clock})
	dev := env.DeviceIDs[0]
	want := freshScreenshot(t, env, dev)
	l, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, TTLSeconds: 30, ResetOnRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	dirty(t, env, dev, l.LeaseID)
	clock.Advance(31 * time.Second)
	// Run out but not yet recorded: nobody may take the phone before it
	// is clean.
	if _, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); codeOf(err) != domain.CodeDeviceUnavailable ||
		domain.AsError(err).Extra["reason"] != domain.ReasonResetting {
		t.Fatalf("acquire of a run-out lease owing a reset: got %v; want device_unavailable (resetting)", err)
	}
	n, err := workers.LeaseExpiry{Expire: env.App.Fleet.ExpireLease, Pool: env.Pool, Now: clock.Now}.RunOnce(bg)
	if err != nil || n != 1 {
		t.Fatalf("expiry sweep: got %d, %v; want 1 lease expired", n, err)
	}
	if !bytes.Equal(screenshot(t, env, dev), want) {
		t.Error("screenshot after expiry differs from a fresh phone's")
	}
	if got := resetEvents(t, env, dev); got != 1 {
		t.Errorf("got %d device.reset events; want 1", got)
	}
}

// flakyReset fails the first n resets, as a device (or a process that
// crashed after recording the lease's end) that did not reset.
type flakyReset struct {
	domain.Backend
	fails *atomic.Int32
}

func (f flakyReset) Reset(ctx context.Context) error {
	if f.fails.Add(-1) >= 0 {
		return domain.Errorf(domain.CodeBackendCommandFailed, "injected reset failure")
	}
	return f.Backend.Reset(ctx)
}

// TestResetOwedIsDoneLater: when the reset cannot run as the lease ends,
// it stays owed (recorded on lease.released): the device refuses new
// leases with reason resetting, and the device-resets worker — which
// reads only the database, as a restarted process would — performs it
// once; sweeping again does nothing.
func TestResetOwedIsDoneLater(t *testing.T) {
	fails := &atomic.Int32{}
	fails.Store(1)
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return flakyReset{Backend: b, fails: fails}
	}})
	dev := env.DeviceIDs[0]
	want := freshScreenshot(t, env, dev)
	l, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, ResetOnRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	dirty(t, env, dev, l.LeaseID)
	if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(bg, fleet.ReleaseLease{Auth: env.Auth, DeviceID: dev, LeaseID: l.LeaseID})); err != nil {
		t.Fatalf("release: %v (the lease's end stands even when the reset fails)", err)
	}
	if bytes.Equal(screenshot(t, env, dev), want) || resetEvents(t, env, dev) != 0 {
		t.Fatal("the reset happened although it was made to fail")
	}
	_, err = env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev})
	if codeOf(err) != domain.CodeDeviceUnavailable || domain.AsError(err).Extra["reason"] != domain.ReasonResetting {
		t.Fatalf("acquire while a reset is owed: got %v; want device_unavailable (resetting)", err)
	}
	env.Settle(t)
	w := workers.DeviceResets{Reset: env.App.Fleet.ResetDevice, Pool: env.Pool}
	if n, err := w.RunOnce(bg); err != nil || n != 1 {
		t.Fatalf("reset sweep: got %d, %v; want 1 reset", n, err)
	}
	if !bytes.Equal(screenshot(t, env, dev), want) {
		t.Error("screenshot after the owed reset differs from a fresh phone's")
	}
	env.Settle(t)
	if n, err := w.RunOnce(bg); err != nil || n != 0 {
		t.Errorf("second sweep: got %d, %v; want nothing to do", n, err)
	}
	if got := resetEvents(t, env, dev); got != 1 {
		t.Errorf("got %d device.reset events; want 1", got)
	}
	if _, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
		t.Errorf("acquire after the reset: %v", err)
	}
}

type noReset struct{ domain.Backend }

func (n noReset) Capabilities() domain.Capabilities {
	c := n.Backend.Capabilities()
	c.Reset = false
	return c
}

// TestResetOnReleaseUnsupported: a backend that cannot reset refuses the
// option up front, before any lease is granted.
func TestResetOnReleaseUnsupported(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend { return noReset{b} }})
	dev := env.DeviceIDs[0]
	_, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, ResetOnRelease: true})
	if codeOf(err) != domain.CodeCapabilityUnsupported || domain.AsError(err).Extra["capability"] != "reset" {
		t.Fatalf("got %v; want capability_unsupported (reset)", err)
	}
	if _, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev}); err != nil {
		t.Errorf("a plain lease after the refusal: %v", err)
	}
}
