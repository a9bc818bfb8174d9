package domain

import (
	"testing"
	"time"
)

var fleetBob = Actor{Kind: ActorUser, ID: "user_bob"}

func applySession(s *LiveSession, evs []Event) {
	for _, e := range evs {
		s.Apply(e)
	}
}

func eventNames(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventName())
	}
	return out
}

func sameNames(got []Event, want ...string) bool {
	g := eventNames(got)
	if len(g) != len(want) {
		return false
	}
	for i := range g {
		if g[i] != want[i] {
			return false
		}
	}
	return true
}

// TestLiveSessionDriving walks one session through its rules: the first
// participant opens it, driving takes the device's lease, a second driver
// takes the wheel over in one append, a lease outside the session is not
// taken, and ending releases the session's lease.
func TestLiveSessionDriving(t *testing.T) {
	d := registeredDevice()
	s := &LiveSession{DeviceID: d.ID}
	now := fleetT0

	evs, err := s.Join(d, now, "lvs_1", fleetAlice)
	if err != nil || !sameNames(evs, "live_session.started", "live_session.joined") {
		t.Fatalf("alice joins: got %v, %v; want started and joined", eventNames(evs), err)
	}
	applySession(s, evs)
	if evs, _ := s.Join(d, now, "lvs_2", fleetAlice); len(evs) != 0 {
		t.Fatalf("alice joins again: got %v; want nothing", eventNames(evs))
	}
	if _, _, err := s.Drive(d, now, fleetBob, "lse_b", time.Minute); codeOf(err) != CodeInvalidArgument {
		t.Fatalf("bob drives before joining: got %v; want invalid_argument", err)
	}

	sev, dev, err := s.Drive(d, now, fleetAlice, "lse_a", time.Minute)
	if err != nil || !sameNames(sev, "live_session.driver_changed") || !sameNames(dev, "lease.acquired") {
		t.Fatalf("alice drives: got %v %v, %v", eventNames(sev), eventNames(dev), err)
	}
	applySession(s, sev)
	applyDevice(d, dev)
	if got := s.DriverNow(d, now); got == nil || *got != fleetAlice {
		t.Fatalf("got driver %v; want alice", got)
	}

	evs, _ = s.Join(d, now, "lvs_3", fleetBob)
	if !sameNames(evs, "live_session.joined") {
		t.Fatalf("bob joins: got %v; want joined", eventNames(evs))
	}
	applySession(s, evs)
	sev, dev, err = s.Drive(d, now, fleetBob, "lse_b", time.Minute)
	if err != nil || !sameNames(dev, "lease.released", "lease.acquired") {
		t.Fatalf("bob takes the wheel: got %v %v, %v; want the lease handed over", eventNames(sev), eventNames(dev), err)
	}
	applySession(s, sev)
	applyDevice(d, dev)
	if got := s.DriverNow(d, now); got == nil || *got != fleetBob || d.Lease.Holder != fleetBob {
		t.Fatalf("got driver %v, lease holder %v; want bob", got, d.Lease.Holder)
	}

	// The lease runs out: nobody drives, though the session remembers bob.
	later := d.Lease.ExpiresAt
	if got := s.DriverNow(d, later); got != nil {
		t.Fatalf("after the lease ran out: got driver %v; want nobody", got)
	}
	// A key outside the session leases the device: the session cannot take it.
	applyDevice(d, d.ExpireLease(later))
	ev, _ := d.AcquireLease(later, fleetKey, "lse_k", time.Minute)
	applyDevice(d, ev)
	if _, _, err := s.Drive(d, later, fleetAlice, "lse_a2", time.Minute); codeOf(err) != CodeDeviceUnavailable {
		t.Fatalf("alice drives over the key's lease: got %v; want device_unavailable", err)
	}
	applyDevice(d, []Event{LeaseReleased{DeviceID: d.ID, LeaseID: "lse_k", ReleasedAt: later}})

	sev, dev, _ = s.Drive(d, later, fleetAlice, "lse_a2", time.Minute)
	applySession(s, sev)
	applyDevice(d, dev)
	if _, _, err := s.End(d, later, fleetKey); codeOf(err) != CodePermissionDenied {
		t.Fatalf("an outsider ends it: got %v; want permission_denied", err)
	}
	sev, dev, err = s.End(d, later, fleetBob)
	if err != nil || !sameNames(sev, "live_session.ended") || !sameNames(dev, "lease.released") {
		t.Fatalf("bob ends it: got %v %v, %v; want ended and the lease released", eventNames(sev), eventNames(dev), err)
	}
	applySession(s, sev)
	applyDevice(d, dev)
	if s.Open() || d.Lease != nil {
		t.Fatalf("got session open %v, lease %v; want neither", s.Open(), d.Lease)
	}
	if _, _, err := s.End(d, later, fleetBob); codeOf(err) != CodeNotFound {
		t.Fatalf("ending twice: got %v; want not_found", err)
	}
}

// TestLiveSessionStopDriving proves a driver who goes back to watching
// gives the lease up, and a watcher asking changes nothing.
func TestLiveSessionStopDriving(t *testing.T) {
	d := registeredDevice()
	s := &LiveSession{DeviceID: d.ID}
	for _, a := range []Actor{fleetAlice, fleetBob} {
		evs, _ := s.Join(d, fleetT0, "lvs_1", a)
		applySession(s, evs)
	}
	sev, dev, _ := s.Drive(d, fleetT0, fleetAlice, "lse_a", time.Minute)
	applySession(s, sev)
	applyDevice(d, dev)
	if sev, dev := s.StopDriving(d, fleetT0, fleetBob); len(sev)+len(dev) != 0 {
		t.Fatalf("bob stops: got %v %v; want nothing", eventNames(sev), eventNames(dev))
	}
	sev, dev = s.StopDriving(d, fleetT0, fleetAlice)
	if !sameNames(sev, "live_session.driver_changed") || !sameNames(dev, "lease.released") {
		t.Fatalf("alice stops: got %v %v", eventNames(sev), eventNames(dev))
	}
	applySession(s, sev)
	applyDevice(d, dev)
	if s.Driver != nil || d.Lease != nil || len(s.Participants) != 2 {
		t.Fatalf("got driver %v, lease %v, %d participants; want none, none, 2", s.Driver, d.Lease, len(s.Participants))
	}
}
