package sim

import (
	"fmt"
	"testing"
)

// screen is a named phone state for the element tests.
type screen struct {
	name string
	p    *Phone
}

// screens drives phones to a wide range of screens: every app, scrolled
// lists, a dialog, overlays, the dark theme and the other models.
func screens(t *testing.T) []screen {
	t.Helper()
	var out []screen
	add := func(name string, p *Phone) { out = append(out, screen{name, clone(t, p)}) }
	ok := must(t)

	p := newPhone(t)
	add("home", p)
	ok(p.OpenApp(PkgSettings))
	add("settings", p)
	ok(p.Swipe(540, 1800, 540, 1300, 300))
	add("settings_scrolled_partly", p)
	ok(p.Swipe(540, 2000, 540, 300, 300))
	ok(p.Swipe(540, 2000, 540, 300, 300))
	add("settings_scrolled_to_end", p)
	tapOn(t, p, byText("About phone"))
	add("settings_about", p)
	ok(p.PressKey("BACK"))
	tapOn(t, p, byText("Apps"))
	add("settings_apps", p)
	tapOn(t, p, byID(PkgSettings+":id/title", "Notes"))
	add("settings_app_info", p)
	ok(p.PressKey("HOME"))

	ok(p.OpenApp(PkgNotes))
	tapOn(t, p, byID(PkgNotes+":id/input"))
	for i, s := range []string{"first", "a note that is long enough to wrap onto a second line of its card", "三", "four", "five 🙂", "six", "seven"} {
		ok(p.TypeText(s))
		if i%2 == 0 {
			ok(p.PressKey("ENTER"))
		} else {
			tapOn(t, p, byID(PkgNotes+":id/save"))
		}
	}
	add("notes_many_with_toast", p)
	x, y := find(t, p, byID(PkgNotes+":id/note_card")).Bounds.Center()
	ok(p.LongPress(x, y, 0))
	add("notes_dialog", p)
	ok(p.PressKey("BACK"))

	ok(p.OpenApp(PkgBrowser))
	add("browser_start", p)
	tapOn(t, p, byID(PkgBrowser+":id/url_bar"))
	add("browser_editing_empty", p)
	ok(p.TypeText("example.com"))
	ok(p.PressKey("ENTER"))
	add("browser_page", p)
	ok(p.Swipe(540, 2000, 540, 800, 300))
	add("browser_scrolled", p)
	tapOn(t, p, byID(PkgBrowser+":id/url_bar"))
	add("browser_editing_selected", p)
	ok(p.TypeText("phone fleet"))
	ok(p.PressKey("ENTER"))
	add("browser_search", p)
	ok(p.InstallApp(PkgCalculator))
	add("browser_install_toast", p)
	ok(p.PressKey("VOLUME_UP"))
	add("volume_panel", p)

	ok(p.OpenApp(PkgStore))
	add("store", p)
	ok(p.OpenApp(PkgCalculator))
	for _, k := range []string{"digit_1", "digit_2", "op_add", "digit_3"} {
		tapOn(t, p, byID(PkgCalculator+":id/"+k))
	}
	add("calculator", p)
	ok(p.InstallApp(PkgCounter))
	ok(p.OpenApp(PkgCounter))
	tapOn(t, p, byID(PkgCounter+":id/increment"))
	add("counter", p)
	ok(p.PressKey("APP_SWITCH"))
	add("recents", p)
	ok(p.PressKey("HOME"))
	add("home_all_apps", p)

	d := newPhone(t)
	ok(d.OpenApp(PkgSettings))
	tapOn(t, d, byText("Dark theme"))
	add("dark_settings", d)
	ok(d.OpenApp(PkgNotes))
	tapOn(t, d, byID(PkgNotes+":id/input"))
	ok(d.TypeText("dark"))
	add("dark_notes", d)
	ok(d.PressKey("HOME"))
	add("dark_home", d)

	for _, m := range []string{"Compact", "Generic"} {
		q, err := New(m, "SIM-"+m)
		if err != nil {
			t.Fatal(err)
		}
		add(m+"_home", q)
		ok(q.OpenApp(PkgSettings))
		add(m+"_settings", q)
		ok(q.OpenApp(PkgNotes))
		tapOn(t, q, byID(PkgNotes+":id/input"))
		ok(q.TypeText("hello"))
		ok(q.PressKey("ENTER"))
		add(m+"_notes", q)
		ok(q.OpenApp(PkgBrowser))
		tapOn(t, q, byID(PkgBrowser+":id/url_bar"))
		ok(q.TypeText("news.example/today"))
		ok(q.PressKey("ENTER"))
		add(m+"_browser", q)
	}
	return out
}

// TestElementsMatchTheScreen checks, on every screen, that refs are unique,
// that every clickable element lies inside the screen, and that tapping the
// centre of its bounds reaches exactly that element (likewise long presses
// and swipes for long-clickable and scrollable elements).
func TestElementsMatchTheScreen(t *testing.T) {
	for _, sc := range screens(t) {
		t.Run(sc.name, func(t *testing.T) {
			m := sc.p.Model()
			root := sc.p.Snapshot()
			if got, want := root.Bounds, (Bounds{0, 0, m.Width, m.Height}); got != want {
				t.Errorf("root bounds %v; want %v", got, want)
			}
			refs := map[string]bool{}
			var clickable, long, scroll []Element
			root.Walk(func(e Element) bool {
				if refs[e.Ref] {
					t.Errorf("ref %s used twice", e.Ref)
				}
				refs[e.Ref] = true
				if e.Bounds.Empty() {
					t.Errorf("%s %s has empty bounds %v", e.Ref, e.ResourceID, e.Bounds)
				}
				if e.Clickable {
					clickable = append(clickable, e)
				}
				if e.LongClickable {
					long = append(long, e)
				}
				if e.Scrollable {
					scroll = append(scroll, e)
				}
				return true
			})
			if len(clickable) == 0 {
				t.Fatalf("no clickable element")
			}
			for _, e := range clickable {
				name := fmt.Sprintf("%s %s %q", e.Ref, e.ResourceID, e.Text+e.ContentDesc)
				b := e.Bounds
				if b[0] < 0 || b[1] < 0 || b[2] > m.Width || b[3] > m.Height {
					t.Errorf("%s: bounds %v outside the %d×%d screen", name, b, m.Width, m.Height)
				}
				x, y := b.Center()
				q := clone(t, sc.p)
				eff, err := q.Tap(x, y)
				if err != nil {
					t.Errorf("%s: tap (%d, %d): %v", name, x, y, err)
					continue
				}
				if eff.Target != e.Ref {
					t.Errorf("%s: tap at centre (%d, %d) reached %q (%s); want %q", name, x, y, eff.Target, eff.TargetID, e.Ref)
				}
				q = clone(t, sc.p)
				eff, err = q.TapElement(e.Ref)
				if err != nil || eff.Target != e.Ref {
					t.Errorf("%s: TapElement reached %q, %v; want %q", name, eff.Target, err, e.Ref)
				}
			}
			for _, e := range long {
				x, y := e.Bounds.Center()
				eff, err := clone(t, sc.p).LongPress(x, y, 0)
				if err != nil || eff.Target != e.Ref {
					t.Errorf("%s: long press reached %q, %v; want %q", e.Ref, eff.Target, err, e.Ref)
				}
			}
			for _, e := range scroll {
				x, y := e.Bounds.Center()
				eff, err := clone(t, sc.p).Swipe(x, y, x, y-100, 200)
				if err != nil || eff.Target != e.Ref {
					t.Errorf("%s: swipe reached %q, %v; want %q", e.Ref, eff.Target, err, e.Ref)
				}
			}
		})
	}
}

// TestRefsAreStable checks that an element keeps its Ref when its state
// changes or its list scrolls, and that equal trees get equal refs.
func TestRefsAreStable(t *testing.T) {
	p := newPhone(t)
	must(t)(p.OpenApp(PkgSettings))
	sw := find(t, p, byID(PkgSettings+":id/switch_widget"))
	bt := find(t, p, byID(PkgSettings+":id/title", "Bluetooth"))
	must(t)(p.TapElement(sw.Ref))
	if got := find(t, p, byID(PkgSettings+":id/switch_widget")); got.Ref != sw.Ref || got.Checked == sw.Checked {
		t.Errorf("after toggling: got ref %s checked %v; want ref %s checked %v", got.Ref, got.Checked, sw.Ref, !sw.Checked)
	}
	must(t)(p.Swipe(540, 1500, 540, 1400, 100))
	got := find(t, p, byID(PkgSettings+":id/title", "Bluetooth"))
	if got.Ref != bt.Ref {
		t.Errorf("after scrolling: got ref %s; want %s", got.Ref, bt.Ref)
	}
	if got.Bounds[1] != bt.Bounds[1]-100 {
		t.Errorf("after scrolling 100 px: got top %d; want %d", got.Bounds[1], bt.Bounds[1]-100)
	}
}
