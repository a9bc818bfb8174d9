package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

var (
	update = flag.Bool("update", false, "rewrite the golden files under testdata")
	pngDir = flag.String("png-dir", "", "write full-size screenshots of the scripted session into this directory, to look at")
)

var bg = context.Background()

func newPhone(t *testing.T) *SimDevice {
	t.Helper()
	p, err := sim.New("Pixel7", "SIM-TEST0001")
	if err != nil {
		t.Fatal(err)
	}
	return newSimDevice(p)
}

func snapshotOf(t *testing.T, s *SimDevice) domain.UIElement {
	t.Helper()
	obs, err := s.Observe(bg, domain.ObserveOptions{Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		t.Fatal(err)
	}
	return root
}

func find(e domain.UIElement, match func(domain.UIElement) bool) (domain.UIElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := find(c, match); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

func byText(text string) func(domain.UIElement) bool {
	return func(e domain.UIElement) bool { return e.Text == text || e.ContentDesc == text }
}

func center(e domain.UIElement) (int, int) {
	return (e.Bounds[0] + e.Bounds[2]) / 2, (e.Bounds[1] + e.Bounds[3]) / 2
}

// step is one input of the scripted session; target, when set, names the
// element (by text) the input goes to, found in the current snapshot.
type step struct {
	name   string
	action domain.Action
	target string
	golden bool // compare a small PNG and the element tree with testdata
}

func session() []step {
	return []step{
		{name: "home", golden: true},
		{name: "open_settings", action: domain.Action{Type: domain.ActionTap}, target: "Settings"},
		{name: "toggle_wifi", action: domain.Action{Type: domain.ActionTap}, target: "Wi-Fi", golden: true},
		{name: "scroll_settings", action: domain.Action{Type: domain.ActionSwipe, X1: 540, Y1: 1800, X2: 540, Y2: 900, DurationMs: 300}, golden: true},
		{name: "home_key", action: domain.Action{Type: domain.ActionKey, Key: "HOME"}},
		{name: "open_notes", action: domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgNotes}},
		{name: "focus_field", action: domain.Action{Type: domain.ActionTap}, target: "focusable"},
		{name: "type_note", action: domain.Action{Type: domain.ActionTypeText, Text: "Buy milk — 牛乳 🥛"}},
		{name: "save_note", action: domain.Action{Type: domain.ActionTap}, target: "Save", golden: true},
		{name: "install_calculator", action: domain.Action{Type: domain.ActionInstallApp, Package: sim.PkgCalculator}},
		{name: "open_browser", action: domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgBrowser}},
		{name: "focus_address", action: domain.Action{Type: domain.ActionTap}, target: "focusable"},
		{name: "type_url", action: domain.Action{Type: domain.ActionTypeText, Text: "phonefleet.test/garden"}},
		{name: "go", action: domain.Action{Type: domain.ActionKey, Key: "ENTER"}, golden: true},
		{name: "back", action: domain.Action{Type: domain.ActionKey, Key: "BACK"}},
	}
}

// compact is the part of an element tree the golden files keep: every
// element that shows text or has an id, with its bounds and flags.
type compact struct {
	Class      string    `json:"class"`
	ResourceID string    `json:"id,omitempty"`
	Text       string    `json:"text,omitempty"`
	Bounds     [4]int    `json:"bounds"`
	Flags      string    `json:"flags,omitempty"`
	Children   []compact `json:"children,omitempty"`
}

func compactTree(e domain.UIElement) compact {
	c := compact{Class: strings.TrimPrefix(e.Class, "android.widget."), ResourceID: e.ResourceID, Text: e.Text + e.ContentDesc, Bounds: e.Bounds}
	for _, f := range []struct {
		on   bool
		name string
	}{{e.Clickable, "click"}, {e.Focusable, "focusable"}, {e.Focused, "focused"}, {e.Checkable, "checkable"}, {e.Checked, "checked"}, {e.Scrollable, "scroll"}, {!e.Enabled, "disabled"}} {
		if f.on {
			c.Flags += f.name + " "
		}
	}
	c.Flags = strings.TrimSpace(c.Flags)
	for _, ch := range e.Children {
		c.Children = append(c.Children, compactTree(ch))
	}
	return c
}

// play runs the session on s, calling at after each step.
func play(t *testing.T, s *SimDevice, at func(st step, res domain.ActionResult)) {
	t.Helper()
	for _, st := range session() {
		var res domain.ActionResult
		if st.action.Type != "" {
			a := st.action
			if st.target != "" {
				root := snapshotOf(t, s)
				match := byText(st.target)
				if st.target == "focusable" {
					match = func(e domain.UIElement) bool { return e.Focusable }
				}
				el, ok := find(root, match)
				if !ok {
					t.Fatalf("%s: no element %q on screen", st.name, st.target)
				}
				a.X, a.Y = center(el)
			}
			var err error
			if res, err = s.Act(bg, a); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		at(st, res)
	}
}

// TestSimScriptedSession plays a session through the adapter and compares
// small screenshots and element trees with the golden files; a second run
// gives byte-identical full-size screenshots.
func TestSimScriptedSession(t *testing.T) {
	first := map[string][]byte{}
	s := newPhone(t)
	play(t, s, func(st step, res domain.ActionResult) {
		obs, err := s.Observe(bg, domain.ObserveOptions{Image: true, Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.ScreenHash != "" && res.ScreenHash != obs.ScreenHash {
			t.Errorf("%s: the action reported screen %s; the screen shows %s", st.name, res.ScreenHash, obs.ScreenHash)
		}
		first[st.name] = obs.PNG
		if *pngDir != "" {
			if err := os.WriteFile(filepath.Join(*pngDir, "pf-sim-"+st.name+".png"), obs.PNG, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if !st.golden {
			return
		}
		small, err := s.Observe(bg, domain.ObserveOptions{Image: true, MaxWidth: 180})
		if err != nil {
			t.Fatal(err)
		}
		var root domain.UIElement
		if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
			t.Fatal(err)
		}
		tree, err := json.MarshalIndent(compactTree(root), "", " ")
		if err != nil {
			t.Fatal(err)
		}
		golden(t, st.name+".png", small.PNG)
		golden(t, st.name+".json", append(tree, '\n'))
	})

	again := newPhone(t)
	play(t, again, func(st step, _ domain.ActionResult) {
		obs, err := again.Observe(bg, domain.ObserveOptions{Image: true})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(obs.PNG, first[st.name]) {
			t.Errorf("%s: the second run drew a different screenshot", st.name)
		}
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "session", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update after checking the change)", name)
	}
}

// TestSimBoundsMatchWhatATapHits: tapping the centre of an element's
// bounds, as the snapshot gives them, lands on that element.
func TestSimBoundsMatchWhatATapHits(t *testing.T) {
	for _, label := range []string{"Settings", "Notes", "Browser", "Store"} {
		t.Run(label, func(t *testing.T) {
			s := newPhone(t)
			el, ok := find(snapshotOf(t, s), byText(label))
			if !ok {
				t.Fatalf("no %s icon on the home screen", label)
			}
			x, y := center(el)
			res, err := s.Act(bg, domain.Action{Type: domain.ActionTap, X: x, Y: y})
			if err != nil {
				t.Fatal(err)
			}
			if res.Target != el.Ref {
				t.Errorf("got target %s; want the %s icon %s", res.Target, label, el.Ref)
			}
		})
	}
}

// TestSimRenderFrameRedrawsExactly: a frame redrawn from the replay state
// equals the screenshot and snapshot taken live, byte for byte.
func TestSimRenderFrameRedrawsExactly(t *testing.T) {
	s := newPhone(t)
	if _, err := s.Act(bg, domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgSettings}); err != nil {
		t.Fatal(err)
	}
	live, err := s.Observe(bg, domain.ObserveOptions{Image: true, Snapshot: true, Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Act(bg, domain.Action{Type: domain.ActionKey, Key: "HOME"}); err != nil {
		t.Fatal(err) // the phone moves on; the frame must not
	}
	again, err := simRenderer{}.RenderFrame(bg, live.Replay, domain.ObserveOptions{Image: true, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.ScreenHash != live.ScreenHash || !bytes.Equal(again.PNG, live.PNG) || !bytes.Equal(again.Snapshot, live.Snapshot) {
		t.Errorf("the redrawn frame differs from the live one (hash %s vs %s)", again.ScreenHash, live.ScreenHash)
	}
	img, err := png.Decode(bytes.NewReader(again.PNG))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1080 || b.Dy() != 2400 {
		t.Errorf("got a %v picture; want 1080×2400", b)
	}
}

// TestSimRefusals maps each of the phone's refusals to its domain code.
func TestSimRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  []domain.Action
		action domain.Action
		code   domain.Code
		reason string
	}{
		{name: "off screen", action: domain.Action{Type: domain.ActionTap, X: 2000, Y: 10}, code: domain.CodeInvalidArgument, reason: "out_of_bounds"},
		{name: "unknown key", action: domain.Action{Type: domain.ActionKey, Key: "F13"}, code: domain.CodeInvalidArgument},
		{name: "typing with no field focused", action: domain.Action{Type: domain.ActionTypeText, Text: "hi"}, code: domain.CodeInvalidArgument, reason: "no_focused_field"},
		{name: "app not installed", action: domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgCounter}, code: domain.CodeInvalidArgument, reason: "app_not_installed"},
		{name: "app not in the catalog", action: domain.Action{Type: domain.ActionInstallApp, Package: "com.evil.app"}, code: domain.CodeInvalidArgument, reason: "not_in_catalog"},
		{name: "asleep", setup: []domain.Action{{Type: domain.ActionKey, Key: "SLEEP"}}, action: domain.Action{Type: domain.ActionTap, X: 10, Y: 10}, code: domain.CodeDeviceUnavailable, reason: "asleep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newPhone(t)
			for _, a := range tt.setup {
				if _, err := s.Act(bg, a); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Phone().ScreenHash()
			_, err := s.Act(bg, tt.action)
			e := domain.AsError(err)
			if e.Code != tt.code {
				t.Fatalf("got %v; want %s", err, tt.code)
			}
			if got, _ := e.Extra["reason"].(string); got != tt.reason {
				t.Errorf("got reason %q; want %q", got, tt.reason)
			}
			if got := s.Phone().ScreenHash(); got != before {
				t.Errorf("a refused action changed the screen")
			}
		})
	}
}

// TestSimWakeAndStop: stop turns the screen off (black frames), wake turns
// it back on showing what it showed.
func TestSimWakeAndStop(t *testing.T) {
	s := newPhone(t)
	on, _ := s.Observe(bg, domain.ObserveOptions{})
	if err := s.Stop(bg); err != nil {
		t.Fatal(err)
	}
	off, _ := s.Observe(bg, domain.ObserveOptions{})
	if off.ScreenOn || off.ScreenHash == on.ScreenHash {
		t.Errorf("after stop: screen on %v, hash unchanged %v; want off and a different (black) screen", off.ScreenOn, off.ScreenHash == on.ScreenHash)
	}
	if err := s.Wake(bg); err != nil {
		t.Fatal(err)
	}
	woke, _ := s.Observe(bg, domain.ObserveOptions{Snapshot: true})
	if !woke.ScreenOn {
		t.Errorf("after wake the screen is off")
	}
}

// TestCheckKind resolves backend kinds without touching a device.
func TestCheckKind(t *testing.T) {
	tests := []struct {
		kind string
		want domain.Code
	}{
		{"sim", ""},
		{"adb", ""},
		{"robot", domain.CodeBackendNotImplemented},
		{"quantum", domain.CodeBackendResolutionFailed},
		{"", domain.CodeBackendResolutionFailed},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("kind %q", tt.kind), func(t *testing.T) {
			err := CheckKind(&domain.Device{ID: "dev_x", Backend: tt.kind})
			got := domain.Code("")
			if err != nil {
				got = domain.ErrorCode(err)
			}
			if got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

// TestCapabilitiesCheck refuses what the sim cannot take before anything
// is recorded.
func TestCapabilitiesCheck(t *testing.T) {
	caps := newPhone(t).Capabilities()
	tests := []struct {
		name string
		a    domain.Action
		want domain.Code
	}{
		{"tap inside", domain.Action{Type: domain.ActionTap, X: 1079, Y: 2399}, ""},
		{"tap outside", domain.Action{Type: domain.ActionTap, X: 1080, Y: 0}, domain.CodeInvalidArgument},
		{"swipe leaves the screen", domain.Action{Type: domain.ActionSwipe, X1: 10, Y1: 10, X2: 10, Y2: 2400}, domain.CodeInvalidArgument},
		{"known key", domain.Action{Type: domain.ActionKey, Key: "KEYCODE_HOME"}, ""},
		{"alias", domain.Action{Type: domain.ActionKey, Key: "BACKSPACE"}, ""},
		{"unknown key", domain.Action{Type: domain.ActionKey, Key: "F1"}, domain.CodeInvalidArgument},
		{"capability the backend lacks", domain.Action{Type: "fly"}, domain.CodeCapabilityUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := caps.Check(tt.a)
			got := domain.Code("")
			if err != nil {
				got = domain.ErrorCode(err)
			}
			if got != tt.want {
				t.Errorf("got %q (%v); want %q", got, err, tt.want)
			}
		})
	}
}

// TestSimTreeObservation: an observation without a picture, taken from one
// layout, says what the separate calls say, and its tree as a value
// (ObserveOptions.Tree) is exactly the JSON tree decoded, on every screen
// of the scripted session.
func TestSimTreeObservation(t *testing.T) {
	s := newPhone(t)
	play(t, s, func(st step, _ domain.ActionResult) {
		viaJSON, err := s.Observe(bg, domain.ObserveOptions{Snapshot: true, Replay: true})
		if err != nil {
			t.Fatal(err)
		}
		asValue, err := s.Observe(bg, domain.ObserveOptions{Snapshot: true, Tree: true, Replay: true})
		if err != nil {
			t.Fatal(err)
		}
		if asValue.Tree == nil || asValue.Snapshot != nil {
			t.Fatalf("%s: asked for the tree as a value, got Tree %v and %d bytes of JSON", st.name, asValue.Tree != nil, len(asValue.Snapshot))
		}
		var decoded domain.UIElement
		if err := json.Unmarshal(viaJSON.Snapshot, &decoded); err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(asValue.Tree)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := json.Marshal(decoded); !bytes.Equal(again, want) {
			t.Errorf("%s: the tree as a value differs from the JSON tree:\n%s\nwant\n%s", st.name, again, want)
		}
		state, _ := s.phone.State()
		for _, obs := range []domain.Observation{viaJSON, asValue} {
			if obs.ScreenHash != s.phone.ScreenHash() || obs.ScreenOn != s.phone.ScreenOn() || !bytes.Equal(obs.Replay, state) {
				t.Errorf("%s: the observation's hash, power or state is not the phone's", st.name)
			}
		}
		if a, b := domain.SampleOf(viaJSON), domain.SampleOf(asValue); a != b || a.Layout == "" {
			t.Errorf("%s: effect samples differ: %+v vs %+v", st.name, a, b)
		}
	})
}
