package sim

import (
	"fmt"
	"strings"
	"testing"
)

func text(t testing.TB, p *Phone, id string) string {
	t.Helper()
	return find(t, p, byID(id)).Text
}

func switchFor(t testing.TB, p *Phone, title string) Element {
	t.Helper()
	var row Element
	found := false
	p.Snapshot().Walk(func(e Element) bool {
		for _, c := range e.Children {
			if c.ResourceID == PkgSettings+":id/title" && c.Text == title {
				row, found = e, true
				return false
			}
		}
		return true
	})
	if !found {
		t.Fatalf("no settings row %q on screen", title)
	}
	sw, ok := row.Find(byID(PkgSettings + ":id/switch_widget"))
	if !ok {
		t.Fatalf("row %q has no switch", title)
	}
	return sw
}

func TestSettings(t *testing.T) {
	t.Run("toggles flip and stay flipped", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgSettings))
		if got := switchFor(t, p, "Bluetooth").Checked; got {
			t.Fatalf("got Bluetooth on; want off at start")
		}
		e := tapOn(t, p, byText("Bluetooth")) // the row, not the switch
		if !e.Changed || e.Description != "turned Bluetooth on" {
			t.Errorf("got effect %+v; want Bluetooth turned on", e)
		}
		must(t)(p.PressKey("HOME"))
		must(t)(p.OpenApp(PkgSettings))
		if got := switchFor(t, p, "Bluetooth").Checked; !got {
			t.Errorf("got Bluetooth off after reopening; want on")
		}
		x, y := switchFor(t, p, "Bluetooth").Bounds.Center()
		must(t)(p.Tap(x, y))
		if got := switchFor(t, p, "Bluetooth").Checked; got {
			t.Errorf("got Bluetooth on after a second tap; want off")
		}
	})
	t.Run("airplane mode switches radios off and back", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgSettings))
		tapOn(t, p, byText("Airplane mode"))
		for title, want := range map[string]bool{"Wi-Fi": false, "Mobile data": false, "Airplane mode": true} {
			if got := switchFor(t, p, title).Checked; got != want {
				t.Errorf("%s: got %v; want %v", title, got, want)
			}
		}
		if _, ok := p.Snapshot().Find(byText("Airplane mode on")); !ok {
			t.Errorf("status bar shows no airplane icon")
		}
		if _, ok := p.Snapshot().Find(byText("Wi-Fi signal full")); ok {
			t.Errorf("status bar still shows Wi-Fi")
		}
		tapOn(t, p, byText("Airplane mode"))
		for title, want := range map[string]bool{"Wi-Fi": true, "Mobile data": true, "Bluetooth": false} {
			if got := switchFor(t, p, title).Checked; got != want {
				t.Errorf("%s after airplane off: got %v; want %v", title, got, want)
			}
		}
	})
	t.Run("the list scrolls and stops at its ends", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgSettings))
		if _, ok := p.Snapshot().Find(byText("About phone")); ok {
			t.Fatalf("About phone visible before scrolling; the list should not fit one screen")
		}
		e := must(t)(p.Swipe(540, 1800, 540, 1000, 300))
		if !e.Changed {
			t.Errorf("got no change from the first swipe")
		}
		for i := 0; i < 3; i++ {
			must(t)(p.Swipe(540, 2000, 540, 400, 300))
		}
		find(t, p, byText("About phone"))
		e = must(t)(p.Swipe(540, 2000, 540, 400, 300))
		if e.Changed || !strings.Contains(e.Description, "at the end") {
			t.Errorf("got %+v; want a no-op at the end of the list", e)
		}
		for i := 0; i < 4; i++ {
			must(t)(p.Swipe(540, 400, 540, 2000, 300))
		}
		find(t, p, byText("Wi-Fi"))
		e = must(t)(p.Swipe(540, 400, 540, 2000, 300))
		if e.Changed || !strings.Contains(e.Description, "at the top") {
			t.Errorf("got %+v; want a no-op at the top", e)
		}
	})
	t.Run("subpage opens and BACK returns to the same scroll position", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgSettings))
		for i := 0; i < 4; i++ {
			must(t)(p.Swipe(540, 2000, 540, 400, 300))
		}
		before := find(t, p, byText("About phone")).Bounds
		tapOn(t, p, byText("About phone"))
		if got := text(t, p, PkgSettings+":id/action_bar_title"); got != "About phone" {
			t.Errorf("got title %q; want About phone", got)
		}
		find(t, p, byText("SIM-TEST-1"))
		find(t, p, byText("Google Pixel 7"))
		e := must(t)(p.PressKey("BACK"))
		if e.Description != "back to Settings" {
			t.Errorf("got %q; want back to Settings", e.Description)
		}
		if got := find(t, p, byText("About phone")).Bounds; got != before {
			t.Errorf("got About phone at %v after BACK; want %v", got, before)
		}
		tapOn(t, p, byText("About phone"))
		tapOn(t, p, byText("Navigate up"))
		find(t, p, byText("About phone"))
		must(t)(p.PressKey("BACK"))
		if got := p.Foreground(); got != PkgLauncher {
			t.Errorf("got %s in front after BACK from the main page; want the launcher", got)
		}
	})
	t.Run("dark theme recolours every app", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgNotes))
		light := p.ScreenHash()
		must(t)(p.OpenApp(PkgSettings))
		tapOn(t, p, byText("Dark theme"))
		must(t)(p.OpenApp(PkgNotes))
		if p.ScreenHash() == light {
			t.Errorf("Notes looks the same in the dark theme")
		}
	})
}

func TestNotes(t *testing.T) {
	open := func(t *testing.T) *Phone {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgNotes))
		tapOn(t, p, byID(PkgNotes+":id/input"))
		return p
	}
	t.Run("typing and DEL", func(t *testing.T) {
		p := open(t)
		if !find(t, p, byID(PkgNotes+":id/input")).Focused {
			t.Fatalf("field not focused after tapping it")
		}
		must(t)(p.TypeText("héllo 世界 🙂"))
		if got := text(t, p, PkgNotes+":id/input"); got != "héllo 世界 🙂" {
			t.Errorf("got %q; want %q", got, "héllo 世界 🙂")
		}
		must(t)(p.PressKey("DEL"))
		if got := text(t, p, PkgNotes+":id/input"); got != "héllo 世界 " {
			t.Errorf("after DEL got %q; want the emoji removed as one rune", got)
		}
		must(t)(p.PressKey("BACKSPACE"))
		must(t)(p.PressKey("KEYCODE_DEL"))
		if got := text(t, p, PkgNotes+":id/input"); got != "héllo 世" {
			t.Errorf("after two more DELs got %q; want %q", got, "héllo 世")
		}
	})
	t.Run("save appends, empty save is disabled", func(t *testing.T) {
		p := open(t)
		save := find(t, p, byID(PkgNotes+":id/save"))
		if save.Enabled {
			t.Errorf("Save enabled with an empty note")
		}
		if e := tapOn(t, p, byID(PkgNotes+":id/save")); e.Changed {
			t.Errorf("got a change from a disabled Save: %+v", e)
		}
		for _, s := range []string{"one", "two", "three"} {
			must(t)(p.TypeText(s))
			tapOn(t, p, byID(PkgNotes+":id/save"))
		}
		var got []string
		p.Snapshot().Walk(func(e Element) bool {
			if e.ResourceID == PkgNotes+":id/note" {
				got = append(got, e.Text)
			}
			return true
		})
		if strings.Join(got, ",") != "one,two,three" {
			t.Errorf("got notes %q; want one,two,three", got)
		}
		if got := text(t, p, PkgNotes+":id/input"); got != "" {
			t.Errorf("got draft %q after saving; want it cleared", got)
		}
	})
	t.Run("long press asks, Delete deletes, Cancel keeps", func(t *testing.T) {
		p := open(t)
		for _, s := range []string{"keep me", "drop me"} {
			must(t)(p.TypeText(s))
			must(t)(p.PressKey("ENTER"))
		}
		card := func(text string) Element {
			var out Element
			p.Snapshot().Walk(func(e Element) bool {
				if e.ResourceID == PkgNotes+":id/note_card" {
					if _, ok := e.Find(byText(text)); ok {
						out = e
						return false
					}
				}
				return true
			})
			if out.Ref == "" {
				t.Fatalf("no card for %q", text)
			}
			return out
		}
		x, y := card("drop me").Bounds.Center()
		must(t)(p.LongPress(x, y, 1000))
		if got := text(t, p, "android:id/alertTitle"); got != "Delete note?" {
			t.Fatalf("got dialog %q; want Delete note?", got)
		}
		if e := must(t)(p.Tap(540, 2150)); e.Changed {
			t.Errorf("a tap on the scrim changed something: %+v", e)
		}
		tapOn(t, p, byText("Cancel"))
		card("drop me")
		x, y = card("drop me").Bounds.Center()
		must(t)(p.LongPress(x, y, 0))
		e := tapOn(t, p, byText("Delete"))
		if e.Description != `deleted note "drop me"` {
			t.Errorf("got %q; want the note deleted", e.Description)
		}
		if _, ok := p.Snapshot().Find(byText("drop me")); ok {
			t.Errorf("deleted note still on screen")
		}
		card("keep me")
		x, y = card("keep me").Bounds.Center()
		must(t)(p.LongPress(x, y, 0))
		must(t)(p.PressKey("BACK"))
		if _, ok := p.Snapshot().Find(byID("android:id/alertTitle")); ok {
			t.Errorf("BACK left the dialog open")
		}
		card("keep me")
	})
}

func TestBrowser(t *testing.T) {
	load := func(t *testing.T, p *Phone, url string) Effect {
		tapOn(t, p, byID(PkgBrowser+":id/url_bar"))
		must(t)(p.TypeText(url))
		return must(t)(p.PressKey("ENTER"))
	}
	// The WebView's text is the page title, also while the heading is
	// scrolled out of view.
	title := func(t *testing.T, p *Phone) string { return text(t, p, PkgBrowser+":id/page") }
	t.Run("pages come from their URL", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgBrowser))
		if got := title(t, p); got != "Start page" {
			t.Errorf("got %q; want Start page", got)
		}
		load(t, p, "example.com/news/today")
		if got := title(t, p); got != "News / Today — Example" {
			t.Errorf("got %q; want News / Today — Example", got)
		}
		if got := text(t, p, PkgBrowser+":id/url_bar"); got != "example.com/news/today" {
			t.Errorf("got address %q", got)
		}
		first := p.Snapshot()
		q := newPhone(t)
		must(t)(q.OpenApp(PkgBrowser))
		load(t, q, "https://example.com/news/today")
		a, _ := first.Find(byID(PkgBrowser + ":id/page"))
		b, _ := q.Snapshot().Find(byID(PkgBrowser + ":id/page"))
		if dump(a) != dump(b) {
			t.Errorf("the same URL rendered two different pages")
		}
		load(t, p, "example.com/other")
		if got := title(t, p); got != "Other — Example" {
			t.Errorf("got %q; want Other — Example", got)
		}
	})
	t.Run("links, history and BACK", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgBrowser))
		load(t, p, "wiki.example")
		home := title(t, p)
		for i := 0; i < 4; i++ {
			must(t)(p.Swipe(540, 2000, 540, 500, 300))
		}
		link := find(t, p, byID(PkgBrowser+":id/page_link"))
		e := tapOn(t, p, byID(PkgBrowser+":id/page_link"))
		if !strings.Contains(e.Description, "followed a link") || title(t, p) == home {
			t.Errorf("got %+v; want the link %q followed", e, link.Text)
		}
		must(t)(p.PressKey("BACK"))
		if got := title(t, p); got != home {
			t.Errorf("after BACK got %q; want %q", got, home)
		}
		if _, ok := p.Snapshot().Find(byText(link.Text)); !ok {
			t.Errorf("BACK did not restore the scroll position")
		}
		must(t)(p.PressKey("BACK"))
		if got := title(t, p); got != "Start page" {
			t.Errorf("got %q; want Start page", got)
		}
		must(t)(p.PressKey("BACK"))
		if got := p.Foreground(); got != PkgLauncher {
			t.Errorf("got %s in front; want the launcher", got)
		}
	})
	t.Run("editing selects the address and BACK cancels", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgBrowser))
		load(t, p, "example.com")
		tapOn(t, p, byID(PkgBrowser+":id/url_bar"))
		if got := text(t, p, PkgBrowser+":id/url_bar"); got != "https://example.com" {
			t.Errorf("got %q while editing; want the full address", got)
		}
		must(t)(p.TypeText("x"))
		if got := text(t, p, PkgBrowser+":id/url_bar"); got != "x" {
			t.Errorf("got %q; want typing to replace the selection", got)
		}
		must(t)(p.PressKey("BACK"))
		if got := text(t, p, PkgBrowser+":id/url_bar"); got != "example.com" {
			t.Errorf("got %q after cancelling; want example.com", got)
		}
		if _, err := p.TypeText("y"); err == nil {
			t.Errorf("typing after cancelling was accepted; want ErrNoFocusedField")
		}
	})
	t.Run("search and unreachable sites", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgBrowser))
		load(t, p, "phone fleet")
		if got := title(t, p); got != "Results for “phone fleet”" {
			t.Errorf("got %q", got)
		}
		load(t, p, "nowhere.invalid")
		if got := title(t, p); got != "This site can't be reached" {
			t.Errorf("got %q", got)
		}
	})
}

func TestCalculator(t *testing.T) {
	tests := []struct {
		keys string // space separated key ids
		want string // formula after the keys
	}{
		{"digit_1 digit_2 op_add digit_3 op_mul digit_4 eq", "24"},
		{"digit_7 op_div digit_2 eq", "3.5"},
		{"digit_0 dec_point digit_1 op_add digit_0 dec_point digit_2 eq", "0.3"},
		{"digit_1 op_div digit_3 eq", "0.3333333333"},
		{"digit_5 op_sub digit_9 eq", "−4"},
		{"digit_5 op_sub digit_9 eq op_mul digit_2 eq", "−8"},
		{"digit_5 digit_0 pct op_mul digit_8 eq", "4"},
		{"digit_9 op_add op_mul digit_3 eq", "27"},
		{"digit_1 digit_2 digit_3 del", "12"},
		{"digit_1 digit_2 clr", ""},
		{"digit_4 eq digit_7", "7"},
	}
	for _, tc := range tests {
		t.Run(tc.keys, func(t *testing.T) {
			p := newPhone(t)
			must(t)(p.InstallApp(PkgCalculator))
			must(t)(p.OpenApp(PkgCalculator))
			for _, k := range strings.Fields(tc.keys) {
				tapOn(t, p, byID(PkgCalculator+":id/"+k))
			}
			if got := text(t, p, PkgCalculator+":id/formula"); got != tc.want {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
	t.Run("division by zero", func(t *testing.T) {
		p := newPhone(t)
		must(t)(p.InstallApp(PkgCalculator))
		must(t)(p.OpenApp(PkgCalculator))
		for _, k := range []string{"digit_1", "op_div", "digit_0", "eq"} {
			tapOn(t, p, byID(PkgCalculator+":id/"+k))
		}
		if got := text(t, p, PkgCalculator+":id/result"); got != "Can't divide by 0" {
			t.Errorf("got %q; want Can't divide by 0", got)
		}
	})
}

func TestCounterAndGestures(t *testing.T) {
	p := newPhone(t)
	must(t)(p.InstallApp(PkgCounter))
	must(t)(p.OpenApp(PkgCounter))
	count := func() string { return text(t, p, PkgCounter+":id/count") }
	inc := find(t, p, byID(PkgCounter+":id/increment"))
	x, y := inc.Bounds.Center()
	steps := []struct {
		name  string
		input func() (Effect, error)
		want  string
	}{
		{"tap +", func() (Effect, error) { return p.Tap(x, y) }, "1"},
		{"double tap + is two taps", func() (Effect, error) { return p.DoubleTap(x, y) }, "3"},
		{"long press + adds ten", func() (Effect, error) { return p.LongPress(x, y, 900) }, "13"},
		{"short press is a tap", func() (Effect, error) { return p.LongPress(x, y, 100) }, "14"},
		{"tiny swipe is a tap", func() (Effect, error) { return p.Swipe(x, y, x+5, y+5, 100) }, "15"},
		{"sideways swipe does nothing", func() (Effect, error) { return p.Swipe(100, 1000, 900, 1000, 100) }, "15"},
		{"long press on reset without long action resets", func() (Effect, error) {
			rx, ry := find(t, p, byID(PkgCounter+":id/reset")).Bounds.Center()
			return p.LongPress(rx, ry, 0)
		}, "0"},
		{"tap element by ref", func() (Effect, error) { return p.TapElement(inc.Ref) }, "1"},
	}
	for _, s := range steps {
		must(t)(s.input())
		if got := count(); got != s.want {
			t.Errorf("%s: got count %s; want %s", s.name, got, s.want)
		}
	}
}

func TestInstallAndStore(t *testing.T) {
	p := newPhone(t)
	icons := func() []string {
		var out []string
		p.Snapshot().Walk(func(e Element) bool {
			if e.ResourceID == PkgLauncher+":id/icon" {
				out = append(out, e.Text)
			}
			return true
		})
		return out
	}
	if got := strings.Join(icons(), ","); got != "Settings,Notes,Browser,Store" {
		t.Errorf("got home icons %s", got)
	}
	e := must(t)(p.InstallApp(PkgCalculator))
	if !e.Changed {
		t.Errorf("install reported no change")
	}
	if got := strings.Join(icons(), ","); got != "Settings,Notes,Browser,Store,Calculator" {
		t.Errorf("got home icons %s after installing", got)
	}
	e = must(t)(p.InstallApp(PkgCalculator))
	if e.Changed || e.Description != "Calculator is already installed" {
		t.Errorf("got %+v; want a reported no-op", e)
	}
	e = must(t)(p.InstallApp(PkgNotes))
	if e.Changed {
		t.Errorf("installing a system app changed something: %+v", e)
	}
	must(t)(p.OpenApp(PkgStore))
	var counterBtn Element
	p.Snapshot().Walk(func(el Element) bool {
		if _, ok := el.Find(byID(PkgStore+":id/title", "Counter")); ok && el.ResourceID == "" && el.Class == classLinear {
			counterBtn, _ = el.Find(byID(PkgStore + ":id/action"))
		}
		return true
	})
	if counterBtn.Text != "Install" {
		t.Fatalf("got Counter button %q; want Install", counterBtn.Text)
	}
	must(t)(p.TapElement(counterBtn.Ref))
	if got, _ := p.FindElement(counterBtn.Ref); got.Text != "Open" {
		t.Errorf("got button %q after installing; want Open", got.Text)
	}
	must(t)(p.TapElement(counterBtn.Ref))
	if got := p.Foreground(); got != PkgCounter {
		t.Errorf("got %s in front; want %s", got, PkgCounter)
	}
	var pkgs []string
	for _, a := range p.InstalledApps() {
		pkgs = append(pkgs, a.Package)
	}
	if got := strings.Join(pkgs, ","); got != strings.Join([]string{PkgSettings, PkgNotes, PkgBrowser, PkgStore, PkgCalculator, PkgCounter}, ",") {
		t.Errorf("got installed %s", got)
	}
}

func TestRecentsAndKeys(t *testing.T) {
	p := newPhone(t)
	must(t)(p.OpenApp(PkgNotes))
	must(t)(p.OpenApp(PkgSettings))
	must(t)(p.PressKey("HOME"))
	must(t)(p.PressKey("app_switch"))
	var cards []string
	p.Snapshot().Walk(func(e Element) bool {
		if e.ResourceID == PkgLauncher+":id/task" {
			cards = append(cards, e.ContentDesc)
		}
		return true
	})
	if got := strings.Join(cards, ","); got != "Settings,Notes" {
		t.Errorf("got recent cards %s; want Settings,Notes", got)
	}
	tapOn(t, p, byID(PkgLauncher+":id/task", "Notes"))
	if got := p.Foreground(); got != PkgNotes {
		t.Errorf("got %s in front; want Notes", got)
	}
	must(t)(p.PressKey("KEYCODE_APP_SWITCH"))
	must(t)(p.PressKey("187"))
	if got := p.Foreground(); got != PkgNotes {
		t.Errorf("APP_SWITCH twice: got %s in front; want Notes", got)
	}
	must(t)(p.PressKey("RECENTS"))
	tapOn(t, p, byID(PkgLauncher+":id/clear_all"))
	must(t)(p.PressKey("APP_SWITCH"))
	find(t, p, byText("No recent items"))
	must(t)(p.PressKey("4")) // BACK by key code
	if got := p.Foreground(); got != PkgLauncher {
		t.Errorf("got %s; want the launcher", got)
	}
}

func TestVolumeOverlayAndToastLastOneInput(t *testing.T) {
	p := newPhone(t)
	for i := 0; i < 20; i++ {
		must(t)(p.PressKey("VOLUME_UP"))
	}
	slider := find(t, p, byID(PkgSystemUI+":id/volume_row_slider"))
	if slider.ContentDesc != fmt.Sprintf("Media volume %d of %d", maxVolume, maxVolume) {
		t.Errorf("got %q; want the volume clamped at %d", slider.ContentDesc, maxVolume)
	}
	e := must(t)(p.Tap(540, 1500))
	if e.Changed {
		t.Errorf("an overlay fading counted as a lasting change: %+v", e)
	}
	if _, ok := p.Snapshot().Find(byID(PkgSystemUI + ":id/volume_row_slider")); ok {
		t.Errorf("volume overlay still shown after the next input")
	}
	must(t)(p.InstallApp(PkgCounter))
	find(t, p, byText("Counter installed"))
	must(t)(p.Tap(540, 1500))
	if _, ok := p.Snapshot().Find(byText("Counter installed")); ok {
		t.Errorf("toast still shown after the next input")
	}
}

// TestClock checks the logical clock: one ClockStep per accepted input,
// none for refused inputs or observations.
func TestClock(t *testing.T) {
	p := newPhone(t)
	if got := p.Clock(); !got.Equal(ClockStart()) {
		t.Errorf("got %v; want %v", got, ClockStart())
	}
	must(t)(p.Tap(540, 1500))
	p.Snapshot()
	p.Screenshot()
	p.Tap(-1, 0)
	p.TypeText("nobody listens")
	must(t)(p.PressKey("HOME"))
	want := ClockStart().Add(2 * ClockStep)
	if got := p.Clock(); !got.Equal(want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if got := text(t, p, PkgSystemUI+":id/clock"); got != want.Format("15:04") {
		t.Errorf("status bar shows %s; want %s", got, want.Format("15:04"))
	}
}
