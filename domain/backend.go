package domain

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Backend drives one device. Adapters (internal/backends) implement it for
// each backend kind; the executor is its only caller for Act, Wake and Stop,
// one call at a time per device, outside any database transaction. Observe
// may be called concurrently with the others and must be safe for that.
//
// Every error an implementation returns is a *Error with one of the codes
// named on the method, so callers never classify by message.
type Backend interface {
	// Capabilities says what the device can do. It never fails and does not
	// touch the device.
	Capabilities() Capabilities

	// Observe looks at the screen now. It returns the screen hash always,
	// and the PNG and UI snapshot when asked for (or Replay, from which a
	// FrameRenderer draws them later). Errors: device_disconnected (the
	// device dropped off its transport), backend_command_failed (the
	// transport failed), capability_unsupported (screenshots or snapshots
	// asked of a device that has none), invalid_argument (a bad MaxWidth).
	Observe(ctx context.Context, opts ObserveOptions) (Observation, error)

	// Act performs one action. It never receives a Ref: the executor
	// resolves an action bound to an element to the element's current
	// centre first (ResolveBound). A refused action changes nothing. Errors:
	// invalid_argument (the device refused the arguments or, with a
	// reason, the action in its current state: no_focused_field,
	// app_not_installed, not_in_catalog),
	// device_unavailable with reason asleep (the screen is off),
	// capability_unsupported, device_disconnected (dropped before the
	// action was dispatched: it did not happen), action_outcome_unknown
	// (dispatched, no outcome came back: it may have happened),
	// backend_command_failed.
	Act(ctx context.Context, a Action) (ActionResult, error)

	// Wake turns the screen on. Errors: capability_unsupported,
	// device_disconnected, backend_command_failed.
	Wake(ctx context.Context) error

	// Stop puts the device to sleep (screen off). Errors:
	// capability_unsupported, device_disconnected, backend_command_failed.
	Stop(ctx context.Context) error

	// Reset returns the device to its baseline: the state of a fresh
	// device of the same model and serial (apps' data cleared, screen on).
	// A clean hand-over (a lease's resetOnRelease) calls it through the
	// device's queue. Errors: capability_unsupported (Capabilities.Reset is
	// false), device_disconnected, backend_command_failed.
	Reset(ctx context.Context) error
}

// SoftwareReader is a Backend that can say what software its device runs
// (the app library's capabilities and inventory): its Android release and
// API level, ABIs, free storage and installed apps. Errors:
// device_disconnected, backend_command_failed. A backend that is not one
// cannot report its software (capability_unsupported).
type SoftwareReader interface {
	Software(ctx context.Context) (DeviceSoftware, error)
}

// StatefulBackend is a Backend whose whole device state can be saved, so
// that it survives a restart of the service (the sim). The executor saves
// it in the same transaction that records an action's outcome.
type StatefulBackend interface {
	Backend
	// SaveState returns the device's state as opaque bytes. An
	// Observation's Replay, when the backend gives one, is these bytes at
	// the moment observed: the executor saves the state it observed after
	// an action instead of asking for it again.
	SaveState() ([]byte, error)
}

// FrameRenderer draws a frame later from the Replay bytes an Observation
// carried, so a backend that can re-render a past screen exactly (the sim)
// need not encode a PNG for every action. Errors: internal_error when the
// bytes are not a state this renderer wrote.
type FrameRenderer interface {
	RenderFrame(ctx context.Context, replay []byte, opts ObserveOptions) (Observation, error)
}

// Resolver finds the backend of a device: backend_resolution_failed when
// the device names no valid kind, backend_not_implemented when the kind has
// no adapter yet, device_unavailable (offline) when this instance does not
// host it.
type Resolver interface {
	Resolve(ctx context.Context, d *Device) (Backend, error)
}

// Picture formats of an observation's image.
const (
	ImagePNG  = "png"
	ImageJPEG = "jpeg"
)

// DefaultJPEGQuality is the JPEG quality used when none is asked for.
const DefaultJPEGQuality = 70

// ObserveOptions says what an observation should include.
type ObserveOptions struct {
	// Image asks for a screenshot.
	Image bool
	// MaxWidth, when positive and smaller than the screen, shrinks the
	// picture to that width, keeping the aspect ratio.
	MaxWidth int
	// Format is the picture's encoding: ImagePNG (or empty) or ImageJPEG.
	// A JPEG is encoded from the rendered screen, never from a PNG.
	Format string
	// Quality is the JPEG quality, 1–100; 0 means DefaultJPEGQuality.
	Quality int
	// Marks, when not nil and Image is asked, makes the picture a
	// set-of-marks image: the backend passes it the UI tree of the very
	// screen it pictures, and draws a box labelled Mark.N at the bounds of
	// each mark it returns (scaled with the picture). The marks drawn come
	// back in Observation.Marks and the tree in Observation.Snapshot. It
	// is called at most once per observation and must not call the
	// backend.
	Marks func(root UIElement) []Mark
	// Snapshot asks for the UI element tree.
	Snapshot bool
	// Tree, with Snapshot, says the caller reads the tree in Go and
	// neither stores nor sends it: a backend that holds the tree as a
	// value (the sim) may then answer it in Observation.Tree instead of
	// as JSON in Snapshot. Any backend may ignore it.
	Tree bool
	// Replay asks for replay bytes (from which FrameRenderer draws the PNG
	// and snapshot later) where the backend supports it.
	Replay bool
}

// Observation is what a device showed at one moment.
type Observation struct {
	// ScreenHash changes exactly when the picture does.
	ScreenHash string
	Width      int
	Height     int
	ScreenOn   bool
	// PNG is the screenshot when a plain PNG was asked for (no marks); a
	// frame stores it as captured.
	PNG []byte
	// Image is the picture as asked for (format, width, marks), when one
	// was; it is PNG when that is set. ImageType is its media type
	// (image/png or image/jpeg), ImageWidth and ImageHeight its size.
	Image       []byte
	ImageType   string
	ImageWidth  int
	ImageHeight int
	// Marks are the boxes drawn on a set-of-marks picture.
	Marks []Mark
	// Snapshot is the UI element tree as JSON (UIElement), when asked for.
	Snapshot json.RawMessage
	// Tree is the UI element tree as a value, in place of Snapshot, when
	// ObserveOptions.Tree was set and the backend had it so; UITree reads
	// whichever is there.
	Tree *UIElement
	// Replay, when not nil, lets the backend's FrameRenderer draw PNG and
	// Snapshot of this moment later.
	Replay []byte
}

// ActionResult says what an action did, as the device reports it.
type ActionResult struct {
	// Description says in words what happened, e.g. "turned Wi-Fi off".
	Description string `json:"description"`
	// Target is the element that received the input, if any.
	Target     string `json:"target,omitempty"`
	TargetID   string `json:"targetId,omitempty"`
	TargetText string `json:"targetText,omitempty"`
	// Changed reports whether the device's lasting state changed.
	Changed bool `json:"changed"`
	// Foreground is the package in front after the action.
	Foreground string `json:"foreground,omitempty"`
	// ScreenHash is the screen after the action.
	ScreenHash string `json:"screenHash,omitempty"`
	// ScreenOn reports whether the screen is on after the action (a POWER
	// key turns it off).
	ScreenOn bool `json:"screenOn"`
}

// Mark is one box of a set-of-marks picture: the number drawn on it and
// the element it frames, whose bounds (in screen pixels) the box is drawn
// at. N is 1-based and unique within one picture.
type Mark struct {
	N      int    `json:"mark"`
	Ref    string `json:"ref"`
	Bounds [4]int `json:"bounds"`
}

// FrameRef names a stored frame and what it showed.
type FrameRef struct {
	FrameID    string    `json:"frameId"`
	ScreenHash string    `json:"screenHash"`
	CapturedAt time.Time `json:"capturedAt"`
}

// Capabilities says what a device's backend can do.
type Capabilities struct {
	Actions    []ActionType `json:"actions"`
	Screenshot bool         `json:"screenshot"`
	UISnapshot bool         `json:"uiSnapshot"`
	// CheapSnapshot reports that a UI tree costs little beside the picture
	// and is redrawn from a frame's replay bytes on demand (a sim phone's,
	// not an adb dump's seconds): the executor then takes one on both sides
	// of every action to judge its effect, and stores none.
	CheapSnapshot bool `json:"-"`
	Wake          bool `json:"wake"`
	Stop          bool `json:"stop"`
	// Reset reports that the device can be returned to its baseline
	// (Backend.Reset), which a lease's resetOnRelease needs.
	Reset bool `json:"reset"`
	// Width and Height bound coordinates, when known (0 = unchecked).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Keys lists the key names the key action accepts (empty = any).
	Keys []string `json:"keys,omitempty"`
}

// Check refuses, before anything is recorded, an action the backend cannot
// do at all (capability_unsupported, naming the capability) or whose
// coordinates or key it cannot accept (invalid_argument).
func (c Capabilities) Check(a Action) error {
	if !slices.Contains(c.Actions, a.Type) {
		return Errorf(CodeCapabilityUnsupported, "this device cannot %s", strings.ReplaceAll(string(a.Type), "_", " ")).
			With("capability", string(a.Type))
	}
	inside := func(x, y int) bool { return c.Width == 0 || x < c.Width && y < c.Height }
	switch a.Type {
	case ActionTap, ActionDoubleTap, ActionLongPress:
		if a.Ref == "" && !inside(a.X, a.Y) {
			return Errorf(CodeInvalidArgument, "(%d, %d) is outside the %d×%d screen", a.X, a.Y, c.Width, c.Height).
				With("reason", ReasonOutOfReach)
		}
	case ActionSwipe:
		if !inside(a.X1, a.Y1) || !inside(a.X2, a.Y2) {
			return Errorf(CodeInvalidArgument, "the swipe leaves the %d×%d screen", c.Width, c.Height).
				With("reason", ReasonOutOfReach)
		}
	case ActionKey:
		k := strings.TrimPrefix(a.Key, "KEYCODE_")
		if len(c.Keys) > 0 && !slices.Contains(c.Keys, k) {
			return Errorf(CodeInvalidArgument, "unknown key %q; keys: %s", a.Key, strings.Join(c.Keys, ", "))
		}
	}
	return nil
}

// UIElement is one node of a UI snapshot, the accessibility-style element
// tree whose bounds match the screenshot. Observation.Snapshot holds a
// root UIElement as JSON.
type UIElement struct {
	Ref           string `json:"ref"`
	Class         string `json:"class"`
	Package       string `json:"package,omitempty"`
	ResourceID    string `json:"resourceId,omitempty"`
	Text          string `json:"text,omitempty"`
	Hint          string `json:"hint,omitempty"`
	ContentDesc   string `json:"contentDesc,omitempty"`
	Bounds        [4]int `json:"bounds"`
	Clickable     bool   `json:"clickable,omitempty"`
	LongClickable bool   `json:"longClickable,omitempty"`
	Focusable     bool   `json:"focusable,omitempty"`
	Focused       bool   `json:"focused,omitempty"`
	Enabled       bool   `json:"enabled"`
	Checkable     bool   `json:"checkable,omitempty"`
	Checked       bool   `json:"checked,omitempty"`
	Scrollable    bool   `json:"scrollable,omitempty"`
	// Password marks a field whose text is hidden (uiautomator's password
	// attribute): what is typed into it is sensitive.
	Password bool        `json:"password,omitempty"`
	Children []UIElement `json:"children,omitempty"`
}
