package domain

import (
	"encoding/json"
	"fmt"
)

// Whether an action had an effect (ActionEffect.State): the screen
// changed, it did not, or the device could not tell.
const (
	EffectChanged   = "changed"
	EffectUnchanged = "unchanged"
	EffectUnknown   = "unknown"
)

// Why an action bound to an element was refused (stale_frame's reason):
// the element is not on the screen any more, or it is somewhere else.
const (
	ReasonElementGone  = "element_gone"
	ReasonElementMoved = "element_moved"
)

// ElementMoveTolerance is how far, in screen pixels along either axis, an
// element's centre may lie from where the observed frame showed it and
// still count as not moved. Bounds of an element that did not move are
// equal to the pixel on sim and adb phones (measured by the executor's
// tests and `make bench`); the margin absorbs a pixel of rounding in a
// backend's layout, and is far below any element's half-size.
const ElementMoveTolerance = 4

// EffectSample is what the executor saw of the screen on one side of an
// action.
type EffectSample struct {
	// ScreenHash is the picture's hash; empty when none was taken.
	ScreenHash string
	ScreenOn   bool
	// Layout digests the UI tree as LayoutSignature does (what the screen
	// shows outside the system bars), with each element's focus, and
	// Foreground is the package in front, when a tree was taken.
	Layout     string
	Foreground string
}

// SampleOf is what obs shows of the screen (its tree, when it carries one).
func SampleOf(obs Observation) EffectSample {
	s := EffectSample{ScreenHash: obs.ScreenHash, ScreenOn: obs.ScreenOn}
	if root, ok, err := obs.UITree(); ok && err == nil {
		s.Layout, s.Foreground = layoutDigest(*root, true), root.Package
	}
	return s
}

// UITree returns the observation's UI tree, whichever form it came in
// (Tree, or Snapshot decoded); ok is false when it carries none.
func (obs Observation) UITree() (root *UIElement, ok bool, err error) {
	if obs.Tree != nil {
		return obs.Tree, true, nil
	}
	if len(obs.Snapshot) == 0 {
		return nil, false, nil
	}
	root = &UIElement{}
	if err := json.Unmarshal(obs.Snapshot, root); err != nil {
		return nil, true, err
	}
	return root, true, nil
}

// ActionEffect says whether a committed action had an effect, with the
// evidence it was judged on: the picture's hash and, where the device gave
// a UI tree on both sides, its layout signature and the app in front,
// before the action and after the screen settled.
type ActionEffect struct {
	State            string `json:"state"`
	ScreenBefore     string `json:"screenBefore,omitempty"`
	ScreenAfter      string `json:"screenAfter,omitempty"`
	LayoutBefore     string `json:"layoutBefore,omitempty"`
	LayoutAfter      string `json:"layoutAfter,omitempty"`
	ForegroundBefore string `json:"foregroundBefore,omitempty"`
	ForegroundAfter  string `json:"foregroundAfter,omitempty"`
	// Why says, for unknown, what kept the device from telling.
	Why string `json:"why,omitempty"`
}

// JudgeEffect decides an action's effect from the screen before and after
// it settled. With a UI tree on both sides the layout outside the system
// bars and the app in front are compared (a clock ticking in the status
// bar is no effect); otherwise the whole picture. Changed: the screen's
// power, the app in front or what it shows differs. Unchanged: all equal on
// a lit screen. Unknown: no picture on one side, or the screen off
// throughout (an off screen shows nothing). Only equal evidence on a lit
// screen is unchanged, so an agent retrying an unchanged action never
// repeats one that showed any effect.
func JudgeEffect(before, after EffectSample) ActionEffect {
	e := ActionEffect{ScreenBefore: before.ScreenHash, ScreenAfter: after.ScreenHash}
	trees := before.Layout != "" && after.Layout != ""
	if trees {
		e.LayoutBefore, e.LayoutAfter = before.Layout, after.Layout
		e.ForegroundBefore, e.ForegroundAfter = before.Foreground, after.Foreground
	}
	switch {
	case before.ScreenHash == "" || after.ScreenHash == "":
		e.State, e.Why = EffectUnknown, "no picture of the screen on both sides of the action"
	case before.ScreenOn != after.ScreenOn:
		e.State = EffectChanged
	case !after.ScreenOn:
		e.State, e.Why = EffectUnknown, "the screen was off before and after the action"
	case trees && (before.Layout != after.Layout || before.Foreground != after.Foreground):
		e.State = EffectChanged
	case !trees && before.ScreenHash != after.ScreenHash:
		e.State = EffectChanged
	default:
		e.State = EffectUnchanged
	}
	return e
}

// Find returns the element of the tree with the given ref.
func (e UIElement) Find(ref string) (UIElement, bool) {
	if e.Ref == ref {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := c.Find(ref); ok {
			return f, true
		}
	}
	return UIElement{}, false
}

// Centre is the middle of the element's bounds, where a tap activates it.
func (e UIElement) Centre() (int, int) {
	return (e.Bounds[0] + e.Bounds[2]) / 2, (e.Bounds[1] + e.Bounds[3]) / 2
}

// visible reports whether the element occupies any of the screen.
func (e UIElement) visible() bool { return e.Bounds[2] > e.Bounds[0] && e.Bounds[3] > e.Bounds[1] }

// ResolveBound finds the element an action is bound to (ref) in the tree
// of the screen now, and returns where to tap it: its current centre. seen
// is the element as the frame the action was decided on showed it, when
// that frame's tree is known. The refusals are stale_frame, before anything
// is sent to the device: reason element_gone when the screen has no such
// element (or none visible), element_moved when its centre lies more than
// ElementMoveTolerance from where seen showed it.
func ResolveBound(now UIElement, ref string, seen *UIElement) (x, y int, err error) {
	cur, ok := now.Find(ref)
	if !ok || !cur.visible() {
		return 0, 0, Errorf(CodeStaleFrame, "element %s is no longer on the screen; observe again and decide anew", ref).
			With("reason", ReasonElementGone).With("ref", ref)
	}
	x, y = cur.Centre()
	if seen != nil {
		sx, sy := seen.Centre()
		if abs(x-sx) > ElementMoveTolerance || abs(y-sy) > ElementMoveTolerance {
			return 0, 0, Errorf(CodeStaleFrame, "element %s moved from %s to %s since it was observed; observe again and decide anew",
				ref, boundsText(seen.Bounds), boundsText(cur.Bounds)).
				With("reason", ReasonElementMoved).With("ref", ref).With("from", seen.Bounds).With("to", cur.Bounds)
		}
	}
	return x, y, nil
}

func boundsText(b [4]int) string { return fmt.Sprintf("[%d,%d][%d,%d]", b[0], b[1], b[2], b[3]) }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
