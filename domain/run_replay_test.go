package domain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func replayTree() UIElement {
	return UIElement{Ref: "r", Class: "android.widget.FrameLayout", Package: "com.example.counter", Bounds: [4]int{0, 0, 1080, 2400}, Enabled: true,
		Children: []UIElement{
			{Ref: "bar", Class: "android.widget.TextView", Package: systemUIPackage, Text: "09:00", Bounds: [4]int{0, 0, 1080, 80}, Clickable: true},
			{Ref: "inc", Class: "android.widget.Button", Package: "com.example.counter", ResourceID: "com.example.counter:id/increment",
				Text: "+", Bounds: [4]int{700, 1800, 940, 2040}, Clickable: true, Enabled: true},
			{Ref: "field", Class: "android.widget.EditText", Package: "com.example.counter", ResourceID: "com.example.counter:id/name",
				Text: "typed", Bounds: [4]int{100, 400, 980, 520}, Clickable: true, Enabled: true},
		}}
}

// TestGuardStep: a tap by point or by ref binds the element under it; the
// guard names the app and the interactive elements (never the system bars,
// never a field's typed text) and holds on the same screen elsewhere.
func TestGuardStep(t *testing.T) {
	root := replayTree()
	for name, a := range map[string]Action{"by point": {Type: ActionTap, X: 800, Y: 1900}, "by ref": {Type: ActionTap, Ref: "inc"}} {
		g, el := GuardStep(root, a)
		if el == nil || el.ID != "com.example.counter:id/increment" || el.Text != "+" || el.Class != "Button" {
			t.Errorf("%s: got element %+v; want the + button", name, el)
		}
		if g.App != "com.example.counter" || len(g.Anchors) != 2 || g.Anchors[0] != *el || g.Anchors[1].Text != "" {
			t.Errorf("%s: got guard %+v; want the app, the button first, the field without its text", name, g)
		}
		if m := g.Missing(root); m != "" {
			t.Errorf("%s: the guard misses %q on its own screen", name, m)
		}
	}
	// Another phone: other bounds, other typed text, other clock.
	other := replayTree()
	other.Children[0].Text, other.Children[1].Bounds, other.Children[2].Text = "10:41", [4]int{500, 1500, 700, 1700}, "else"
	g, el := GuardStep(root, Action{Type: ActionTap, X: 800, Y: 1900})
	if m := g.Missing(other); m != "" {
		t.Errorf("on another phone the guard misses %q", m)
	}
	if found, ok := FindAnchor(other, *el); !ok || found.Ref != "inc" {
		t.Errorf("on another phone: got %+v %v; want the + button", found, ok)
	}
	if _, el := GuardStep(root, Action{Type: ActionTap, X: 5, Y: 1000}); el != nil {
		t.Errorf("a tap on empty space: got element %+v; want none", el)
	}
	gone := replayTree()
	gone.Children = gone.Children[:1]
	if m := g.Missing(gone); !strings.Contains(m, "increment") {
		t.Errorf("without the button: got %q; want it named", m)
	}
	gone.Package = "com.android.settings"
	if m := g.Missing(gone); m != `app "com.example.counter" is not in front ("com.android.settings" is)` {
		t.Errorf("another app: got %q", m)
	}
}

// TestGuardedScripts: old scripts are accepted unchanged; guard members are
// checked; a divergence ends only a replay, failed replay_diverged.
func TestGuardedScripts(t *testing.T) {
	for _, tc := range []struct{ name, script, err string }{
		{"old", `{"version":1,"steps":[{"action":"key","arguments":{"key":"HOME"},"expectScreen":"abc"}]}`, ""},
		{"guarded", `{"steps":[{"action":"tap","arguments":{"x":1,"y":2},"frameId":"frm_1","waitFor":{"app":"a","anchors":[{"id":"b"}]},"element":{"id":"b"},"effect":"changed"}]}`, ""},
		{"empty anchor", `{"steps":[{"action":"key","arguments":{"key":"HOME"},"waitFor":{"anchors":[{}]}}]}`, "anchor needs"},
		{"element on a key", `{"steps":[{"action":"key","arguments":{"key":"HOME"},"element":{"id":"b"}}]}`, "binds a tap only"},
		{"bad effect", `{"steps":[{"action":"key","arguments":{"key":"HOME"},"effect":"maybe"}]}`, "effect must be"},
	} {
		_, err := ParseRunScript(json.RawMessage(tc.script))
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %v; want %q", tc.name, err, tc.err)
		}
	}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	run := Run{RunID: "run_1", State: RunStateRunning, Script: json.RawMessage(`{}`)}
	evs, err := run.Diverge(now, RunDiverged{Step: 2, Reason: DivergedScreenNotReached, Detail: "no element"})
	if err != nil || len(evs) != 2 {
		t.Fatalf("got %v %v; want run.diverged and run.ended", evs, err)
	}
	for _, e := range evs {
		run.Apply("org", e, 2)
	}
	if run.State != RunStateFailed || *run.Reason != RunReasonReplayDiverged || *run.Detail != "step 2: screen_not_reached: no element" ||
		run.Divergence == nil || run.Divergence.Step != 2 || run.Divergence.RunID != "run_1" {
		t.Errorf("got run %+v; want failed replay_diverged with its divergence", run)
	}
	plain := Run{RunID: "run_2", State: RunStateRunning}
	if _, err := plain.Diverge(now, RunDiverged{Step: 1, Reason: DivergedStepFailed}); err == nil {
		t.Error("a run following no script diverged; want invalid_argument")
	}
}
