package devices

import (
	"testing"
	"time"

	"phonefleet/domain"
)

// TestFrameFor: a device's last stored frame names the same screen again
// until it expires; another screen, or an expired frame, gets a new frame
// that is not stored yet.
func TestFrameFor(t *testing.T) {
	r := newRuntime(t, Config{FrameRetention: time.Hour})
	d := &domain.Device{ID: "dev_a", OrgID: "org_a", Backend: domain.BackendSim}
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	first, stored := r.FrameFor(d, domain.Observation{ScreenHash: "home", Width: 10, Height: 20}, t0)
	if stored || first.ID == "" || !first.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("first frame: got %+v, stored %v; want a new frame readable for an hour", first, stored)
	}
	r.RememberFrames(first)
	tests := []struct {
		name   string
		hash   string
		at     time.Time
		reused bool
	}{
		{"same screen", "home", t0.Add(time.Minute), true},
		{"another screen", "notes", t0.Add(time.Minute), false},
		{"same screen, expired", "home", t0.Add(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, stored := r.FrameFor(d, domain.Observation{ScreenHash: tt.hash}, tt.at)
			if stored != tt.reused || (got.ID == first.ID) != tt.reused {
				t.Errorf("got frame %s, stored %v; want reused %v (of %s)", got.ID, stored, tt.reused, first.ID)
			}
		})
	}
}

// TestRecentFramesAreBounded: the recent-frames index keeps the newest
// frames only; an evicted one is left to the frames table.
func TestRecentFramesAreBounded(t *testing.T) {
	r := newRuntime(t, Config{})
	r.frames = newFrameCache(2)
	ids := []string{"frm_1", "frm_2", "frm_3"}
	for _, id := range ids {
		r.RememberFrames(domain.StoredFrame{ID: id, DeviceID: "dev_a"})
	}
	for i, id := range ids {
		_, ok := r.RecentFrame(id)
		if want := i > 0; ok != want {
			t.Errorf("RecentFrame(%s): got %v; want %v", id, ok, want)
		}
	}
	if last, ok := r.frames.last("dev_a"); !ok || last.ID != "frm_3" {
		t.Errorf("last frame of dev_a: got %s, %v; want frm_3", last.ID, ok)
	}
}
