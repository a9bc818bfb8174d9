package domain

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// A replayed script is a guarded plan: each step says what it needs to
// find again on the phone it is replayed on — the screen it was decided on
// (ScreenGuard: the app in front and a few of its elements, matched without
// their bounds, so another phone of another size still matches) and the
// element it acted on (ElementAnchor). The replay waits for that screen,
// acts bound to that element, and compares the effect with the original's;
// the first step where any of these fails is the run's divergence.

// Why a replay diverged (RunDiverged.Reason).
const (
	// DivergedScreenNotReached: the step's screen never came within the
	// replay's wait.
	DivergedScreenNotReached = "screen_not_reached"
	// DivergedElementGone and DivergedElementMoved: the element the step
	// acts on is not on the screen, or moved between looking and acting
	// (ResolveBound's reasons).
	DivergedElementGone  = ReasonElementGone
	DivergedElementMoved = ReasonElementMoved
	// DivergedEffectDiffers: the action's effect (changed, unchanged)
	// differs from the original's.
	DivergedEffectDiffers = "effect_differs"
	// DivergedStepFailed: the device refused or failed the step's action.
	DivergedStepFailed = "step_failed"
)

// RunReasonReplayDiverged ends a replay that diverged (its run.diverged
// event says where and why).
const RunReasonReplayDiverged = "replay_diverged"

// Bounds of a guard.
const (
	maxGuardAnchors  = 20
	maxAnchorRunes   = 200
	screenGuardTaken = 8
)

// ElementAnchor names an element by what it shows, not where: its resource
// id, text, description and class (the short name). Every non-empty part
// must be equal for an element to match.
type ElementAnchor struct {
	ID    string `json:"id,omitempty"`
	Text  string `json:"text,omitempty"`
	Desc  string `json:"desc,omitempty"`
	Class string `json:"class,omitempty"`
}

// ScreenGuard is what a step's screen must show for the step to be taken:
// App in front (the package of the tree's root), and every anchor visible.
type ScreenGuard struct {
	App     string          `json:"app,omitempty"`
	Anchors []ElementAnchor `json:"anchors,omitempty"`
}

func (a ElementAnchor) empty() bool { return a == ElementAnchor{} }

func (a ElementAnchor) String() string {
	var parts []string
	for _, p := range [][2]string{{"id", a.ID}, {"text", a.Text}, {"desc", a.Desc}, {"class", a.Class}} {
		if p[1] != "" {
			parts = append(parts, fmt.Sprintf("%s %q", p[0], p[1]))
		}
	}
	return strings.Join(parts, " ")
}

// matches reports whether e shows the anchor.
func (a ElementAnchor) matches(e UIElement) bool {
	return !a.empty() && e.visible() && e.Package != systemUIPackage &&
		(a.ID == "" || a.ID == e.ResourceID) && (a.Text == "" || a.Text == e.Text) &&
		(a.Desc == "" || a.Desc == e.ContentDesc) && (a.Class == "" || a.Class == shortClass(e.Class))
}

// FindAnchor returns the first visible element of the tree, in tree order,
// that shows the anchor.
func FindAnchor(root UIElement, a ElementAnchor) (UIElement, bool) {
	if a.matches(root) {
		return root, true
	}
	for _, c := range root.Children {
		if f, ok := FindAnchor(c, a); ok {
			return f, true
		}
	}
	return UIElement{}, false
}

// Missing says what of the guard the screen whose tree is root does not
// show — another app in front, or the first anchors missing — and is
// empty when the guard holds.
func (g ScreenGuard) Missing(root UIElement) string {
	if g.App != "" && root.Package != g.App {
		return fmt.Sprintf("app %q is not in front (%q is)", g.App, root.Package)
	}
	var missing []string
	for _, a := range g.Anchors {
		if _, ok := FindAnchor(root, a); !ok {
			missing = append(missing, "no element with "+a.String())
		}
	}
	if len(missing) > 3 {
		missing = append(missing[:3], fmt.Sprintf("and %d more", len(missing)-3))
	}
	return strings.Join(missing, "; ")
}

// anchorOf is what an element shows, as an anchor: an editable field's
// text is what was typed and is left out.
func anchorOf(e UIElement) ElementAnchor {
	a := ElementAnchor{ID: e.ResourceID, Desc: e.ContentDesc, Class: shortClass(e.Class)}
	if !strings.Contains(e.Class, "EditText") {
		a.Text = e.Text
	}
	return a
}

func shortClass(c string) string {
	if i := strings.LastIndexByte(c, '.'); i >= 0 {
		return c[i+1:]
	}
	return c
}

// GuardStep returns what a step decided on the screen whose tree is root
// needs to find again: the screen (the app in front and up to 8 of its
// interactive elements that show an id, a text or a description, the acted
// element first) and, for a tap, the element it acted on (named by ref, or
// the innermost clickable element under its point). element is nil when the
// action names no element.
func GuardStep(root UIElement, action Action) (guard ScreenGuard, element *ElementAnchor) {
	guard.App = root.Package
	if action.Type == ActionTap {
		var target UIElement
		ok := false
		if action.Ref != "" {
			target, ok = root.Find(action.Ref)
		} else {
			target, ok = clickableAt(root, action.X, action.Y)
		}
		if a := anchorOf(target); ok && (a.ID != "" || a.Text != "" || a.Desc != "") {
			element = &a
			guard.Anchors = append(guard.Anchors, a)
		}
	}
	seen := map[ElementAnchor]bool{}
	for _, a := range guard.Anchors {
		seen[a] = true
	}
	var walk func(e UIElement)
	walk = func(e UIElement) {
		if len(guard.Anchors) >= screenGuardTaken || e.Package == systemUIPackage {
			return
		}
		interactive := e.Clickable || e.LongClickable || e.Checkable || e.Scrollable || strings.Contains(e.Class, "EditText")
		if a := anchorOf(e); interactive && e.visible() && (a.ID != "" || a.Text != "" || a.Desc != "") && !seen[a] {
			seen[a] = true
			guard.Anchors = append(guard.Anchors, a)
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	return guard, element
}

// clickableAt is the innermost visible clickable element containing the
// point.
func clickableAt(e UIElement, x, y int) (UIElement, bool) {
	if !e.visible() || x < e.Bounds[0] || x >= e.Bounds[2] || y < e.Bounds[1] || y >= e.Bounds[3] {
		return UIElement{}, false
	}
	for i := len(e.Children) - 1; i >= 0; i-- {
		if f, ok := clickableAt(e.Children[i], x, y); ok {
			return f, true
		}
	}
	if e.Clickable || e.LongClickable {
		return e, true
	}
	return UIElement{}, false
}

// checkGuard refuses a guard too large or with an anchor naming nothing.
func (g *ScreenGuard) check() error {
	if g == nil {
		return nil
	}
	if len(g.Anchors) > maxGuardAnchors {
		return Errorf(CodeInvalidArgument, "waitFor.anchors holds at most %d anchors", maxGuardAnchors)
	}
	if utf8.RuneCountInString(g.App) > maxAnchorRunes {
		return Errorf(CodeInvalidArgument, "waitFor.app is longer than %d characters", maxAnchorRunes)
	}
	for _, a := range g.Anchors {
		if err := a.check(); err != nil {
			return err
		}
	}
	return nil
}

func (a *ElementAnchor) check() error {
	if a == nil {
		return nil
	}
	if a.empty() {
		return Errorf(CodeInvalidArgument, "an element anchor needs an id, text, desc or class")
	}
	for _, s := range []string{a.ID, a.Text, a.Desc, a.Class} {
		if utf8.RuneCountInString(s) > maxAnchorRunes {
			return Errorf(CodeInvalidArgument, "an element anchor's parts are at most %d characters", maxAnchorRunes)
		}
	}
	return nil
}

// RunDiverged records where a replayed script first diverged from the run
// it was exported from: the step (its 1-based index in the script), why,
// the frame the original step was decided on and the replay's frame at
// that step, and for effect_differs both effects. It is appended with the
// run's end.
type RunDiverged struct {
	RunID  string `json:"runId"`
	Step   int    `json:"step"`
	Action string `json:"action,omitempty"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// ExpectedFrame is the original's frame (empty when the script did not
	// name it); ActualFrame the replay's (empty when it saw none).
	ExpectedFrame  string    `json:"expectedFrame,omitempty"`
	ActualFrame    string    `json:"actualFrame,omitempty"`
	ExpectedEffect string    `json:"expectedEffect,omitempty"`
	ActualEffect   string    `json:"actualEffect,omitempty"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (RunDiverged) EventName() string { return "run.diverged" }

// Diverge ends a running replay failed (replay_diverged), recording where
// and why it diverged first. Errors: invalid_argument for a run not
// following a script, or a divergence without step or reason.
func (r *Run) Diverge(now time.Time, d RunDiverged) ([]Event, error) {
	if len(r.Script) == 0 {
		return nil, Errorf(CodeInvalidArgument, "run %s follows no script; it cannot diverge from one", r.RunID)
	}
	if d.Step < 1 || d.Reason == "" {
		return nil, Errorf(CodeInvalidArgument, "a divergence names its step and reason")
	}
	detail := fmt.Sprintf("step %d: %s", d.Step, d.Reason)
	if d.Detail != "" {
		detail += ": " + d.Detail
	}
	if utf8.RuneCountInString(detail) > MaxRunDetailRunes {
		detail = string([]rune(detail)[:MaxRunDetailRunes])
	}
	ended, err := r.End(now, RunStateFailed, RunReasonReplayDiverged, detail, nil)
	if err != nil || len(ended) == 0 {
		return ended, err
	}
	d.RunID, d.At = r.RunID, now
	return append([]Event{d}, ended...), nil
}
