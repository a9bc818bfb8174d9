package devices

import (
	"sync"
	"time"

	"phonefleet/domain"
)

// FrameFor names the frame showing a device's screen as observed at a
// moment: the device's last stored frame when it shows the same screen
// and is still readable then (stored is true: nothing to write), else a
// new frame, readable for the runtime's FrameRetention, that the caller
// stores and then passes to RememberFrames. Reusing the last frame keeps
// an agent that observes and acts on an unchanged screen from storing a
// copy of it per step.
func (r *Runtime) FrameFor(d *domain.Device, obs domain.Observation, at time.Time) (frame domain.StoredFrame, stored bool) {
	if last, ok := r.frames.last(d.ID); ok && last.ScreenHash == obs.ScreenHash && at.Before(last.ExpiresAt) {
		return last, true
	}
	return domain.StoredFrame{ID: domain.NewID(domain.PrefixFrame), OrgID: d.OrgID, DeviceID: d.ID, Backend: d.Backend,
		ScreenHash: obs.ScreenHash, Width: obs.Width, Height: obs.Height, CapturedAt: at,
		ExpiresAt: at.Add(r.cfg.FrameRetention), Tree: len(obs.Snapshot) > 0}, false
}

// RememberFrames records frames whose rows have committed, in the order
// they were captured: each becomes its device's last stored frame, and
// RecentFrame finds it. Call it only after the commit, so that no action
// names a frame that a failed transaction never stored.
func (r *Runtime) RememberFrames(frames ...domain.StoredFrame) { r.frames.remember(frames) }

// KeptTree records that the row of frame, which this process stored, now
// keeps its screen's UI tree: its Tree is true from now on.
func (r *Runtime) KeptTree(frame domain.StoredFrame) { r.frames.keptTree(frame.DeviceID, frame.ID) }

// RecentFrame returns a frame this process stored recently, so that an
// action's observedFrame is usually resolved without a query; ok is false
// for any other frame (the caller reads the frames table then).
func (r *Runtime) RecentFrame(frameID string) (domain.StoredFrame, bool) {
	return r.frames.recent(frameID)
}

// recentFramesCap bounds the index of frames this process stored.
const recentFramesCap = 20000

// frameCache indexes the frames this process stored: the newest
// recentFramesCap by id, in a ring, and each device's last one.
type frameCache struct {
	mu     sync.Mutex
	byID   map[string]domain.StoredFrame
	ring   []string
	next   int
	latest map[string]domain.StoredFrame
}

func newFrameCache(capacity int) *frameCache {
	return &frameCache{byID: map[string]domain.StoredFrame{}, ring: make([]string, capacity), latest: map[string]domain.StoredFrame{}}
}

func (c *frameCache) remember(frames []domain.StoredFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range frames {
		if old := c.ring[c.next]; old != "" {
			delete(c.byID, old)
		}
		c.ring[c.next] = f.ID
		c.next = (c.next + 1) % len(c.ring)
		c.byID[f.ID] = f
		c.latest[f.DeviceID] = f
	}
}

func (c *frameCache) keptTree(deviceID, frameID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.byID[frameID]; ok {
		f.Tree = true
		c.byID[frameID] = f
	}
	if f, ok := c.latest[deviceID]; ok && f.ID == frameID {
		f.Tree = true
		c.latest[deviceID] = f
	}
}

func (c *frameCache) recent(frameID string) (domain.StoredFrame, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.byID[frameID]
	return f, ok
}

func (c *frameCache) last(deviceID string) (domain.StoredFrame, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.latest[deviceID]
	return f, ok
}
