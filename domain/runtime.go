package domain

import (
	"context"
	"errors"
	"image"
	"time"
)

// The types the device runtime (internal/devices) and the fleet's commands
// speak to each other in: the commands see the runtime through a port of
// their own (commands/fleet.DeviceRuntime) written in these, so no
// capability names the runtime's own types.

// StoredFrame is what the device runtime remembers of a stored frame:
// enough to name it again as an action's before frame and to resolve it as
// an observedFrame, without its pictures.
type StoredFrame struct {
	ID         string
	OrgID      string
	DeviceID   string
	Backend    string
	ScreenHash string
	Width      int
	Height     int
	CapturedAt time.Time
	ExpiresAt  time.Time
	// Tree is whether the frame's row keeps the screen's UI tree.
	Tree bool
}

// QueueSlot is a reserved place in a device's queue: jobs run one at a time,
// in the order their places were reserved. Exactly one of Submit and Cancel
// must be called on it, once.
type QueueSlot interface {
	// Submit fills the place with a job. When the place's turn comes, run
	// is called with a context that ends when the runtime stops; if the
	// runtime stops before the job started, abandon is called instead, and
	// the job never touched its device. Submit never blocks on the job.
	Submit(run, abandon func(ctx context.Context))
	// Cancel gives the place back unused: the jobs behind it move up.
	Cancel()
}

// LiveScreen is what a backend offers for live screens without a PNG
// round trip (a sim phone): a cheap hash of what is on screen, and the
// screen painted no wider than maxWidth with the hash it shows. A backend
// offers one through a method LiveScreen() LiveScreen.
type LiveScreen interface {
	ScreenHash() string
	LiveFrame(maxWidth int) (*image.RGBA, string, error)
}

// ErrUnanswered is wrapped by the device runtime's error for a call it
// carried to the process holding a device that was sent and not answered:
// the call may have run there, and what that means is the caller's to say
// (an action is settled from what was recorded; any other call answers
// device_disconnected).
var ErrUnanswered = errors.New("the instance holding the device did not answer")
