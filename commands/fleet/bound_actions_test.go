package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil/fleettest"
)

// observeTree observes dev with its UI tree: the frame and the tree.
func observeTree(t *testing.T, env *fleettest.Env, dev string) (string, domain.UIElement) {
	t.Helper()
	obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		t.Fatal(err)
	}
	return obs.Frame.FrameID, root
}

// findElement returns the first element of the tree that match accepts.
func findElement(t *testing.T, root domain.UIElement, what string, match func(domain.UIElement) bool) domain.UIElement {
	t.Helper()
	var found *domain.UIElement
	var walk func(e domain.UIElement)
	walk = func(e domain.UIElement) {
		if found == nil && match(e) {
			found = &e
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	if found == nil {
		t.Fatalf("no %s on the screen", what)
	}
	return *found
}

// actOn performs action on dev under lease, decided on frame (may be
// empty).
func actOn(env *fleettest.Env, dev, lease, frame, key, action, args string) (fleet.ActOutcome, error) {
	return env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: action,
		Arguments: json.RawMessage(args), IdempotencyKey: key, LeaseID: lease, ObservedFrame: frame})
}

func reasonOf(err error) string {
	r, _ := domain.AsError(err).Extra["reason"].(string)
	return r
}

// TestTapByRefFollowsItsElement: a tap naming an element is bound to that
// element, not to the whole screen. When the element scrolled away from
// where the observed frame showed it, the tap is refused (stale_frame,
// element_moved) and the phone takes no input; when it left the screen,
// element_gone; when the screen changed but the element stayed, it is
// tapped at its current centre (where a whole-screen check would have
// refused); without an observed frame it is tapped wherever it is now.
func TestTapByRefFollowsItsElement(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	if _, err := act(env, dev, lease, "open-settings", "open_app", `{"package":"com.android.settings"}`); err != nil {
		t.Fatal(err)
	}
	frame, root := observeTree(t, env, dev)
	scroller := findElement(t, root, "scrolling list", func(e domain.UIElement) bool { return e.Scrollable })
	row := findElement(t, scroller, "row low in the list", func(e domain.UIElement) bool {
		return e.Clickable && e.Bounds[1] > (scroller.Bounds[1]+scroller.Bounds[3])/2 && e.Bounds[3] < scroller.Bounds[3]
	})
	tap := `{"ref":"` + row.Ref + `"}`

	// Scroll the list a little: the row moves up but stays on screen.
	cx := (scroller.Bounds[0] + scroller.Bounds[2]) / 2
	swipe, _ := json.Marshal(map[string]int{"x1": cx, "y1": scroller.Bounds[3] - 20, "x2": cx, "y2": scroller.Bounds[3] - 120})
	if _, err := act(env, dev, lease, "scroll", "swipe", string(swipe)); err != nil {
		t.Fatal(err)
	}
	_, now := observeTree(t, env, dev)
	moved, ok := now.Find(row.Ref)
	if !ok || moved.Bounds == row.Bounds {
		t.Fatalf("the swipe did not move %s (was %v, now %v, %v)", row.Ref, row.Bounds, moved.Bounds, ok)
	}
	before := inputs(t, env, dev)
	_, err := actOn(env, dev, lease, frame, "moved", "tap", tap)
	if codeOf(err) != domain.CodeStaleFrame || reasonOf(err) != domain.ReasonElementMoved {
		t.Fatalf("tap on a moved element: got %v; want stale_frame element_moved", err)
	}
	if got := inputs(t, env, dev) - before; got != 0 {
		t.Errorf("the phone took %d inputs for a refused tap; want none", got)
	}

	// The element where it is now: a fresh frame binds it there.
	frame, _ = observeTree(t, env, dev)
	out, err := actOn(env, dev, lease, frame, "fresh", "tap", tap)
	if err != nil {
		t.Fatalf("tap on the element where it is: %v", err)
	}
	if r := out.Receipt.Result; r == nil || r.Target != row.Ref {
		t.Errorf("the tap reached %+v; want %s", out.Receipt.Result, row.Ref)
	}
	if e := out.Receipt.Effect; e == nil || e.State != domain.EffectChanged {
		t.Errorf("opening a settings page: effect %+v; want changed", e)
	}

	// Gone: the element's page is no longer on the screen.
	if _, err := act(env, dev, lease, "home", "key", `{"key":"HOME"}`); err != nil {
		t.Fatal(err)
	}
	before = inputs(t, env, dev)
	if _, err := actOn(env, dev, lease, "", "gone", "tap", tap); codeOf(err) != domain.CodeStaleFrame || reasonOf(err) != domain.ReasonElementGone {
		t.Fatalf("tap on an element that left: got %v; want stale_frame element_gone", err)
	}
	if got := inputs(t, env, dev) - before; got != 0 {
		t.Errorf("the phone took %d inputs for a refused tap; want none", got)
	}
	rc, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: "gone"})
	if err != nil || rc.Error == nil || rc.Error.Reason != domain.ReasonElementGone {
		t.Errorf("the refused tap's receipt: %+v, %v; want failed with element_gone", rc, err)
	}

	// The screen changed, the element did not move: a toggle's own row is
	// tapped twice on the frame from before the first tap.
	if _, err := act(env, dev, lease, "settings-again", "open_app", `{"package":"com.android.settings"}`); err != nil {
		t.Fatal(err)
	}
	frame, root = observeTree(t, env, dev)
	toggle := findElement(t, root, "toggle", func(e domain.UIElement) bool { return e.Checkable && e.Clickable })
	tap = `{"ref":"` + toggle.Ref + `"}`
	for _, key := range []string{"toggle-1", "toggle-2"} {
		if _, err := actOn(env, dev, lease, frame, key, "tap", tap); err != nil {
			t.Fatalf("%s: a tap on an element that stayed put: %v", key, err)
		}
	}
	if _, err := actOn(env, dev, lease, frame, "whole-screen", "key", `{"key":"BACK"}`); codeOf(err) != domain.CodeStaleFrame {
		t.Errorf("an action not bound to an element on a changed screen: got %v; want stale_frame", err)
	}
	// A ref the observed frame does not show is a bad argument.
	if _, err := actOn(env, dev, lease, frame, "no-such", "tap", `{"ref":"zz9"}`); codeOf(err) != domain.CodeInvalidArgument {
		t.Errorf("a ref the frame does not show: got %v; want invalid_argument", err)
	}
}

// emptySpot returns a point of the screen no element wants a touch on.
func emptySpot(t *testing.T, root domain.UIElement) (int, int) {
	t.Helper()
	var wants [][4]int
	var walk func(e domain.UIElement)
	walk = func(e domain.UIElement) {
		if e.Clickable || e.LongClickable || e.Focusable || e.Checkable {
			wants = append(wants, e.Bounds)
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	for y := root.Bounds[3] / 4; y < root.Bounds[3]*3/4; y += 20 {
	next:
		for x := root.Bounds[2] / 4; x < root.Bounds[2]*3/4; x += 20 {
			for _, b := range wants {
				if x >= b[0] && x < b[2] && y >= b[1] && y < b[3] {
					continue next
				}
			}
			return x, y
		}
	}
	t.Fatal("no empty space on the screen")
	return 0, 0
}

// blind is a device that cannot see its screen (a robot without a camera
// would be one): its observations carry no picture.
type blind struct{ domain.Backend }

func (b blind) Observe(ctx context.Context, opts domain.ObserveOptions) (domain.Observation, error) {
	obs, err := b.Backend.Observe(ctx, opts)
	obs.ScreenHash, obs.Snapshot, obs.PNG, obs.Replay = "", nil, nil, nil
	return obs, err
}

// TestActionEffect: a committed action says whether it changed the
// screen, from its layout and the app in front (a clock ticking is no
// effect): a tap on empty space did not, opening an app and turning the
// screen off did; a device that cannot see its screen cannot tell.
func TestActionEffect(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	check := func(key, action, args, want string) {
		t.Helper()
		out, err := act(env, dev, lease, key, action, args)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		e := out.Receipt.Effect
		if e == nil || e.State != want {
			t.Fatalf("%s: effect %+v; want %s", key, e, want)
		}
		if e.ScreenBefore == "" || e.ScreenAfter == "" || e.LayoutBefore == "" || e.LayoutAfter == "" ||
			(e.LayoutBefore == e.LayoutAfter && e.ForegroundBefore == e.ForegroundAfter) != (want == domain.EffectUnchanged) {
			t.Errorf("%s: evidence %+v does not bear out %s", key, e, want)
		}
		// The receipt read back says the same.
		rc, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: key})
		if err != nil || rc.Effect == nil || *rc.Effect != *e {
			t.Errorf("%s: receipt read back %+v, %v; want effect %+v", key, rc.Effect, err, e)
		}
	}
	check("open", "open_app", `{"package":"com.example.notes"}`, domain.EffectChanged)
	_, root := observeTree(t, env, dev)
	x, y := emptySpot(t, root)
	check("empty", "tap", fmt.Sprintf(`{"x":%d,"y":%d}`, x, y), domain.EffectUnchanged)
	// Focusing a field changes no text or bounds, only its focus: an effect.
	field := findElement(t, root, "note field", func(e domain.UIElement) bool { return e.Focusable && !e.Focused })
	check("focus", "tap", `{"ref":"`+field.Ref+`"}`, domain.EffectChanged)
	check("sleep", "key", `{"key":"SLEEP"}`, domain.EffectChanged)

	dark := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend { return blind{b} }})
	dev = dark.DeviceIDs[0]
	out, err := act(dark, dev, dark.Lease(t, dev).LeaseID, "blind", "key", `{"key":"HOME"}`)
	if err != nil {
		t.Fatal(err)
	}
	if e := out.Receipt.Effect; e == nil || e.State != domain.EffectUnknown || e.Why == "" {
		t.Errorf("a device that cannot see: effect %+v; want unknown, saying why", e)
	}
}
