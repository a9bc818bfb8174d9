package sim

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestInputErrors runs every input with arguments or in states it must
// refuse, and checks the typed error and that nothing changed: not the
// state, not the screen, not the clock.
func TestInputErrors(t *testing.T) {
	home := func(t *testing.T) *Phone { return newPhone(t) }
	off := func(t *testing.T) *Phone {
		p := newPhone(t)
		must(t)(p.ScreenOff())
		return p
	}
	notesFocused := func(t *testing.T) *Phone {
		p := newPhone(t)
		must(t)(p.OpenApp(PkgNotes))
		tapOn(t, p, byID(PkgNotes+":id/input"))
		return p
	}
	tests := []struct {
		name  string
		phone func(*testing.T) *Phone
		input func(*Phone) (Effect, error)
		want  error
	}{
		{"tap left of the screen", home, func(p *Phone) (Effect, error) { return p.Tap(-1, 10) }, ErrOutOfBounds},
		{"tap above the screen", home, func(p *Phone) (Effect, error) { return p.Tap(10, -1) }, ErrOutOfBounds},
		{"tap at the width", home, func(p *Phone) (Effect, error) { return p.Tap(1080, 10) }, ErrOutOfBounds},
		{"tap at the height", home, func(p *Phone) (Effect, error) { return p.Tap(10, 2400) }, ErrOutOfBounds},
		{"double tap outside", home, func(p *Phone) (Effect, error) { return p.DoubleTap(5000, 10) }, ErrOutOfBounds},
		{"long press outside", home, func(p *Phone) (Effect, error) { return p.LongPress(10, 99999, 800) }, ErrOutOfBounds},
		{"long press negative duration", home, func(p *Phone) (Effect, error) { return p.LongPress(10, 10, -1) }, ErrInvalidArgument},
		{"swipe starting outside", home, func(p *Phone) (Effect, error) { return p.Swipe(-5, 100, 100, 100, 300) }, ErrOutOfBounds},
		{"swipe ending outside", home, func(p *Phone) (Effect, error) { return p.Swipe(100, 100, 100, 2400, 300) }, ErrOutOfBounds},
		{"swipe negative duration", home, func(p *Phone) (Effect, error) { return p.Swipe(100, 900, 100, 300, -10) }, ErrInvalidArgument},
		{"type without focus", home, func(p *Phone) (Effect, error) { return p.TypeText("hi") }, ErrNoFocusedField},
		{"type invalid UTF-8", notesFocused, func(p *Phone) (Effect, error) { return p.TypeText("a\xffb") }, ErrInvalidArgument},
		{"type a control character", notesFocused, func(p *Phone) (Effect, error) { return p.TypeText("line\nbreak") }, ErrInvalidArgument},
		{"type past the field limit", notesFocused, func(p *Phone) (Effect, error) { return p.TypeText(strings.Repeat("é", MaxFieldRunes+1)) }, ErrInvalidArgument},
		{"unknown key", home, func(p *Phone) (Effect, error) { return p.PressKey("FLY") }, ErrUnknownKey},
		{"empty key", home, func(p *Phone) (Effect, error) { return p.PressKey("") }, ErrUnknownKey},
		{"unknown key code", home, func(p *Phone) (Effect, error) { return p.PressKey("9999") }, ErrUnknownKey},
		{"DEL without focus", home, func(p *Phone) (Effect, error) { return p.PressKey("DEL") }, ErrNoFocusedField},
		{"SPACE without focus", home, func(p *Phone) (Effect, error) { return p.PressKey("SPACE") }, ErrNoFocusedField},
		{"open empty package", home, func(p *Phone) (Effect, error) { return p.OpenApp("") }, ErrInvalidArgument},
		{"open unknown package", home, func(p *Phone) (Effect, error) { return p.OpenApp("com.example.nope") }, ErrAppNotInstalled},
		{"open catalog app not installed", home, func(p *Phone) (Effect, error) { return p.OpenApp(PkgCalculator) }, ErrAppNotInstalled},
		{"install empty package", home, func(p *Phone) (Effect, error) { return p.InstallApp("") }, ErrInvalidArgument},
		{"install outside the catalog", home, func(p *Phone) (Effect, error) { return p.InstallApp("com.example.nope") }, ErrNotInCatalog},
		{"tap unknown ref", home, func(p *Phone) (Effect, error) { return p.TapElement("e0") }, ErrElementNotFound},
		{"tap with screen off", off, func(p *Phone) (Effect, error) { return p.Tap(10, 10) }, ErrScreenOff},
		{"double tap with screen off", off, func(p *Phone) (Effect, error) { return p.DoubleTap(10, 10) }, ErrScreenOff},
		{"long press with screen off", off, func(p *Phone) (Effect, error) { return p.LongPress(10, 10, 0) }, ErrScreenOff},
		{"swipe with screen off", off, func(p *Phone) (Effect, error) { return p.Swipe(10, 900, 10, 100, 0) }, ErrScreenOff},
		{"type with screen off", off, func(p *Phone) (Effect, error) { return p.TypeText("x") }, ErrScreenOff},
		{"HOME with screen off", off, func(p *Phone) (Effect, error) { return p.PressKey("HOME") }, ErrScreenOff},
		{"open app with screen off", off, func(p *Phone) (Effect, error) { return p.OpenApp(PkgNotes) }, ErrScreenOff},
		{"install with screen off", off, func(p *Phone) (Effect, error) { return p.InstallApp(PkgCalculator) }, ErrScreenOff},
		{"tap element with screen off", off, func(p *Phone) (Effect, error) { return p.TapElement("e0") }, ErrScreenOff},
		{"out of bounds beats screen off", off, func(p *Phone) (Effect, error) { return p.Tap(-1, -1) }, ErrOutOfBounds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.phone(t)
			before, _ := p.State()
			hash := p.ScreenHash()
			_, err := tc.input(p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got error %v; want %v", err, tc.want)
			}
			after, _ := p.State()
			if !bytes.Equal(before, after) {
				t.Errorf("state changed by a refused input:\n got %s\nwant %s", after, before)
			}
			if got := p.ScreenHash(); got != hash {
				t.Errorf("got screen hash %s after a refused input; want %s", got, hash)
			}
		})
	}
}

// TestAcceptedWhileScreenOff checks the inputs that work with the screen
// off, and what the phone shows meanwhile.
func TestAcceptedWhileScreenOff(t *testing.T) {
	tests := []struct {
		name   string
		input  func(*Phone) (Effect, error)
		wantOn bool
	}{
		{"Wake", (*Phone).Wake, true},
		{"POWER", func(p *Phone) (Effect, error) { return p.PressKey("POWER") }, true},
		{"WAKEUP", func(p *Phone) (Effect, error) { return p.PressKey("KEYCODE_WAKEUP") }, true},
		{"ScreenOff again", (*Phone).ScreenOff, false},
		{"POWER by key code", func(p *Phone) (Effect, error) { return p.PressKey("26") }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPhone(t)
			must(t)(p.OpenApp(PkgSettings))
			must(t)(p.ScreenOff())
			snap := p.Snapshot()
			if len(snap.Children) != 0 || snap.ContentDesc != "Screen off" {
				t.Errorf("got snapshot %s; want an empty root", dump(snap))
			}
			img := decodePNG(t, must2(t, p.Screenshot))
			for i := 0; i < len(img.Pix); i += 4 {
				if img.Pix[i] != 0 || img.Pix[i+1] != 0 || img.Pix[i+2] != 0 {
					t.Fatalf("got a lit pixel at offset %d; want a black screen", i/4)
				}
			}
			e := must(t)(tc.input(p))
			if got := p.ScreenOn(); got != tc.wantOn {
				t.Errorf("got screen on %v; want %v", got, tc.wantOn)
			}
			if e.Changed != tc.wantOn {
				t.Errorf("got Changed %v; want %v", e.Changed, tc.wantOn)
			}
			if tc.wantOn && p.Foreground() != PkgSettings {
				t.Errorf("got %s in front after waking; want %s", p.Foreground(), PkgSettings)
			}
		})
	}
}

func must2(t testing.TB, f func() ([]byte, error)) []byte {
	t.Helper()
	b, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConstructorErrors covers New, Restore and ScreenshotScaled.
func TestConstructorErrors(t *testing.T) {
	good, _ := newPhone(t).State()
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"New unknown model", func() error { _, err := New("Nokia3310", "S1"); return err }, ErrUnknownModel},
		{"New empty serial", func() error { _, err := New("Pixel7", ""); return err }, ErrInvalidArgument},
		{"Restore unknown model", func() error { _, err := Restore("Nokia3310", good); return err }, ErrUnknownModel},
		{"Restore other model", func() error { _, err := Restore("Generic", good); return err }, ErrInvalidState},
		{"Restore garbage", func() error { _, err := Restore("Pixel7", []byte("{nope")); return err }, ErrInvalidState},
		{"Restore unknown field", func() error {
			_, err := Restore("Pixel7", bytes.Replace(good, []byte(`{`), []byte(`{"extra":1,`), 1))
			return err
		}, ErrInvalidState},
		{"Restore wrong version", func() error {
			_, err := Restore("Pixel7", bytes.Replace(good, []byte(`"version":1`), []byte(`"version":99`), 1))
			return err
		}, ErrInvalidState},
		{"Restore unknown screen", func() error {
			_, err := Restore("Pixel7", bytes.Replace(good, []byte(`"screen":"home"`), []byte(`"screen":"moon"`), 1))
			return err
		}, ErrInvalidState},
		{"Restore unknown app", func() error {
			_, err := Restore("Pixel7", bytes.Replace(good, []byte(`"installed":[`), []byte(`"installed":["com.example.nope",`), 1))
			return err
		}, ErrInvalidState},
		{"ScreenshotScaled zero", func() error { _, err := newPhone(t).ScreenshotScaled(0); return err }, ErrInvalidArgument},
		{"ScreenshotScaled negative", func() error { _, err := newPhone(t).ScreenshotScaled(-20); return err }, ErrInvalidArgument},
		{"FindElement unknown", func() error { _, err := newPhone(t).FindElement("nope"); return err }, ErrElementNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Errorf("got error %v; want %v", err, tc.want)
			}
		})
	}
}
