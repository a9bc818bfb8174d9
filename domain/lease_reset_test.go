package domain

import (
	"testing"
	"time"
)

// TestResetOwedByEveryLeaseEnd: a lease with resetOnRelease makes a reset
// due however it ends — released, expired, given up by a run — and a
// hand-over passes the option on instead; the device refuses new leases
// (resetting) until ResetDone is applied, which is recorded once.
func TestResetOwedByEveryLeaseEnd(t *testing.T) {
	now := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	alice := Actor{Kind: ActorUser, ID: "u1"}
	run := Actor{Kind: ActorRun, ID: "run_1"}
	for _, tt := range []struct {
		name string
		end  func(d *Device) []Event
	}{
		{"released", func(d *Device) []Event { evs, _ := d.ReleaseLease(now, alice, "lse_1"); return evs }},
		{"expired", func(d *Device) []Event { return d.ExpireLease(now.Add(time.Hour)) }},
		{"given up", func(d *Device) []Event { return d.GiveUpLease(now, "lse_1") }},
		{"handed to a run, then given up", func(d *Device) []Event {
			evs, err := d.HandLease(now, alice, run, "lse_2", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range evs {
				d.Apply(e, d.Version+int64(i)+1)
			}
			if d.ResetDue != "" || !d.Lease.ResetOnRelease {
				t.Fatalf("after the hand-over: due %q, new lease resets %v; want none due, the option carried", d.ResetDue, d.Lease.ResetOnRelease)
			}
			return d.GiveUpLease(now, "lse_2")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &Device{}
			d.Apply(DeviceRegistered{DeviceID: "dev_1", OrgID: "org_1", Name: "p", Backend: BackendSim}, 1)
			evs, err := d.AcquireLeaseWith(now, alice, "lse_1", time.Minute, LeaseOptions{ResetOnRelease: true})
			if err != nil {
				t.Fatal(err)
			}
			d.Apply(evs[0], 2)
			for _, e := range tt.end(d) {
				d.Apply(e, d.Version+1)
			}
			if d.ResetDue == "" {
				t.Fatal("no reset is due after the lease ended")
			}
			if _, err := d.AcquireLease(now.Add(2*time.Hour), alice, "lse_3", time.Minute); ErrorCode(err) != CodeDeviceUnavailable || AsError(err).Extra["reason"] != ReasonResetting {
				t.Fatalf("acquire while owed: got %v; want device_unavailable (resetting)", err)
			}
			done := d.ResetDone(now)
			if len(done) == 0 {
				t.Fatal("ResetDone recorded nothing")
			}
			for _, e := range done {
				d.Apply(e, d.Version+1)
			}
			if d.ResetDue != "" || len(d.ResetDone(now)) != 0 {
				t.Errorf("after device.reset: still due %q", d.ResetDue)
			}
		})
	}
}
