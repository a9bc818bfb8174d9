package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Gesture timing, in milliseconds, as Android's ViewConfiguration has it.
const (
	// LongPressTimeoutMs is the shortest press LongPress treats as a long
	// press; a shorter one is a tap.
	LongPressTimeoutMs = 500
	// DefaultLongPressMs is the duration LongPress uses when given 0.
	DefaultLongPressMs = 800
)

// MaxFieldRunes is the most runes a text field holds; typing beyond it is
// refused with ErrInvalidArgument rather than silently truncated.
const MaxFieldRunes = 1000

const maxVolume = 15

// keyCodes maps the key names PressKey accepts to Android key codes.
var keyCodes = map[string]int{
	"HOME": 3, "BACK": 4, "VOLUME_UP": 24, "VOLUME_DOWN": 25, "POWER": 26,
	"SPACE": 62, "ENTER": 66, "DEL": 67, "VOLUME_MUTE": 164, "APP_SWITCH": 187,
	"SLEEP": 223, "WAKEUP": 224,
}

var keyAliases = map[string]string{
	"BACKSPACE": "DEL", "RETURN": "ENTER", "RECENTS": "APP_SWITCH", "OVERVIEW": "APP_SWITCH",
}

// Keys lists the key names PressKey accepts, sorted. PressKey also accepts
// them with a "KEYCODE_" prefix, in any case, the aliases BACKSPACE (DEL),
// RETURN (ENTER), RECENTS and OVERVIEW (APP_SWITCH), and their numeric
// Android key codes.
func Keys() []string {
	var out []string
	for k := range keyCodes {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// normalizeKey resolves a key name, alias or numeric code to its name.
func normalizeKey(name string) (string, error) {
	k := strings.ToUpper(strings.TrimSpace(name))
	k = strings.TrimPrefix(k, "KEYCODE_")
	if a, ok := keyAliases[k]; ok {
		k = a
	}
	if _, ok := keyCodes[k]; ok {
		return k, nil
	}
	if code, err := strconv.Atoi(k); err == nil {
		for n, c := range keyCodes {
			if c == code {
				return n, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %q (known: %s)", ErrUnknownKey, name, strings.Join(Keys(), ", "))
}

func (p *Phone) checkPoint(x, y int) error {
	if x < 0 || y < 0 || x >= p.model.Width || y >= p.model.Height {
		return fmt.Errorf("%w: (%d, %d) is outside the %d×%d screen", ErrOutOfBounds, x, y, p.model.Width, p.model.Height)
	}
	return nil
}

// checkText accepts any valid UTF-8 without control characters.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: text is not valid UTF-8", ErrInvalidArgument)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: text holds control character %U; use PressKey for ENTER and DEL", ErrInvalidArgument, r)
		}
	}
	return nil
}

func fillTarget(e *Effect, n *node) {
	e.Target = n.el.Ref
	e.TargetID = n.el.ResourceID
	e.TargetText = n.el.Text
	if e.TargetText == "" {
		e.TargetText = n.el.ContentDesc
	}
}

func wantsTouch(n *node) bool { return n.onTap != nil || n.onLong != nil }

// Tap touches the screen at (x, y): the innermost clickable element there
// is activated.
func (p *Phone) Tap(x, y int) (Effect, error) {
	if err := p.checkPoint(x, y); err != nil {
		return Effect{}, err
	}
	return p.input("tap", false, func(e *Effect) error { return p.tapAt(x, y, e) })
}

func (p *Phone) tapAt(x, y int, e *Effect) error {
	n := p.build().target(x, y, wantsTouch)
	if n == nil {
		e.Description = fmt.Sprintf("nothing to tap at (%d, %d)", x, y)
		return nil
	}
	fillTarget(e, n)
	if n.onTap == nil {
		e.Description = "the element only responds to a long press"
		return nil
	}
	desc, err := n.onTap()
	e.Description = desc
	return err
}

// TapElement taps the centre of the on-screen element with the given Ref
// (from Snapshot). An unknown Ref is an error wrapping ErrElementNotFound.
func (p *Phone) TapElement(ref string) (Effect, error) {
	return p.input("tap", false, func(e *Effect) error {
		n := p.build().find(ref)
		if n == nil {
			return fmt.Errorf("%w: %q", ErrElementNotFound, ref)
		}
		x, y := n.el.Bounds.Center()
		return p.tapAt(x, y, e)
	})
}

// DoubleTap taps twice at (x, y); the second tap lands on whatever the first
// one left on screen. It counts as one input for the clock.
func (p *Phone) DoubleTap(x, y int) (Effect, error) {
	if err := p.checkPoint(x, y); err != nil {
		return Effect{}, err
	}
	return p.input("double_tap", false, func(e *Effect) error {
		if err := p.tapAt(x, y, e); err != nil {
			return err
		}
		first := e.Description
		var second Effect
		if err := p.tapAt(x, y, &second); err != nil {
			return err
		}
		e.Description = first + "; then " + second.Description
		return nil
	})
}

// LongPress holds a touch at (x, y) for durationMs (0 means
// DefaultLongPressMs). A press shorter than LongPressTimeoutMs is a tap; on
// an element without a long-press action the release counts as a tap, as
// on Android.
func (p *Phone) LongPress(x, y, durationMs int) (Effect, error) {
	if err := p.checkPoint(x, y); err != nil {
		return Effect{}, err
	}
	if durationMs < 0 {
		return Effect{}, fmt.Errorf("%w: duration %d ms is negative", ErrInvalidArgument, durationMs)
	}
	if durationMs == 0 {
		durationMs = DefaultLongPressMs
	}
	return p.input("long_press", false, func(e *Effect) error {
		if durationMs < LongPressTimeoutMs {
			err := p.tapAt(x, y, e)
			e.Description = fmt.Sprintf("press of %d ms is shorter than a long press; tapped: %s", durationMs, e.Description)
			return err
		}
		n := p.build().target(x, y, wantsTouch)
		if n == nil {
			e.Description = fmt.Sprintf("nothing to press at (%d, %d)", x, y)
			return nil
		}
		fillTarget(e, n)
		if n.onLong == nil {
			desc, err := n.onTap()
			e.Description = "no long-press action; released as a tap: " + desc
			return err
		}
		desc, err := n.onLong()
		e.Description = desc
		return err
	})
}

// Swipe drags from (x1, y1) to (x2, y2). A vertical drag scrolls the
// innermost scrollable element under its start by the distance moved
// (content follows the finger; there is no fling, so durationMs, which
// must not be negative, does not change the result); a drag shorter than
// the touch slop is a tap, and sideways drags move nothing.
func (p *Phone) Swipe(x1, y1, x2, y2, durationMs int) (Effect, error) {
	if err := p.checkPoint(x1, y1); err != nil {
		return Effect{}, err
	}
	if err := p.checkPoint(x2, y2); err != nil {
		return Effect{}, err
	}
	if durationMs < 0 {
		return Effect{}, fmt.Errorf("%w: duration %d ms is negative", ErrInvalidArgument, durationMs)
	}
	return p.input("swipe", false, func(e *Effect) error {
		dx, dy := x2-x1, y2-y1
		slop := p.d(24)
		if abs(dx) < slop && abs(dy) < slop {
			err := p.tapAt(x1, y1, e)
			e.Description = "movement within the touch slop; tapped: " + e.Description
			return err
		}
		if abs(dx) > abs(dy) {
			e.Description = "nothing scrolls sideways here"
			return nil
		}
		n := p.build().target(x1, y1, func(n *node) bool { return n.onScroll != nil })
		if n == nil {
			e.Description = fmt.Sprintf("nothing to scroll at (%d, %d)", x1, y1)
			return nil
		}
		fillTarget(e, n)
		e.Description = n.onScroll(-dy)
		return nil
	})
}

// TypeText types s into the focused text field. Any Unicode is accepted
// (accents, CJK, emoji) except control characters; use PressKey for ENTER
// and DEL. With no focused field it fails with ErrNoFocusedField.
func (p *Phone) TypeText(s string) (Effect, error) {
	if err := checkText(s); err != nil {
		return Effect{}, err
	}
	return p.input("type_text", false, func(e *Effect) error { return p.typeText(s, e) })
}

// inputFocus is the field that receives keys: none while a dialog is up,
// though the field keeps its focus for when the dialog closes.
func (p *Phone) inputFocus() string {
	if p.st.Dialog != nil {
		return ""
	}
	return p.st.Focus
}

func (p *Phone) typeText(s string, e *Effect) error {
	var field *string
	switch p.inputFocus() {
	case focusNotes:
		field = &p.st.Notes.Draft
	case focusBrowser:
		field = &p.st.Browser.Draft
		if p.st.Browser.SelectAll {
			*field = ""
			p.st.Browser.SelectAll = false
		}
	case focusLockPassword:
		field = &p.st.Settings.PasswordDraft
	default:
		return fmt.Errorf("%w: tap a text field before typing", ErrNoFocusedField)
	}
	if n := utf8.RuneCountInString(*field) + utf8.RuneCountInString(s); n > MaxFieldRunes {
		return fmt.Errorf("%w: the field would hold %d characters, more than %d", ErrInvalidArgument, n, MaxFieldRunes)
	}
	*field += s
	e.Target, e.TargetID = p.focusedRef()
	e.Description = fmt.Sprintf("typed %d characters", utf8.RuneCountInString(s))
	return nil
}

// focusedRef returns the ref and id of the focused field.
func (p *Phone) focusedRef() (string, string) {
	var ref, id string
	p.build().element().Walk(func(el Element) bool {
		if el.Focused {
			ref, id = el.Ref, el.ResourceID
			return false
		}
		return true
	})
	return ref, id
}

// PressKey presses a hardware or navigation key by name (see Keys): BACK,
// HOME, APP_SWITCH, ENTER, DEL, SPACE, VOLUME_UP, VOLUME_DOWN, VOLUME_MUTE,
// POWER, WAKEUP, SLEEP. An unknown name fails with ErrUnknownKey. While the
// screen is off only POWER and WAKEUP are accepted.
func (p *Phone) PressKey(name string) (Effect, error) {
	key, err := normalizeKey(name)
	if err != nil {
		return Effect{}, err
	}
	allowOff := key == "POWER" || key == "WAKEUP"
	return p.input("press_key", allowOff, func(e *Effect) error {
		if p.inputFocus() != "" && (key == "ENTER" || key == "DEL" || key == "SPACE") {
			e.Target, e.TargetID = p.focusedRef()
		}
		desc, err := p.key(key, e)
		e.Description = desc
		return err
	})
}

func (p *Phone) key(key string, e *Effect) (string, error) {
	switch key {
	case "BACK":
		return p.back(), nil
	case "HOME":
		return p.home(), nil
	case "APP_SWITCH":
		return p.overview(), nil
	case "ENTER":
		return p.enter()
	case "DEL":
		return p.del()
	case "SPACE":
		return "typed a space", p.typeText(" ", e)
	case "VOLUME_UP":
		return p.setVolume(p.st.Volume + 1), nil
	case "VOLUME_DOWN":
		return p.setVolume(p.st.Volume - 1), nil
	case "VOLUME_MUTE":
		return p.setVolume(0), nil
	case "POWER":
		if p.st.ScreenOn {
			return p.screenOff(), nil
		}
		return p.wake(), nil
	case "WAKEUP":
		return p.wake(), nil
	case "SLEEP":
		return p.screenOff(), nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownKey, key)
}

func (p *Phone) setVolume(v int) string {
	p.st.Volume = max(0, min(maxVolume, v))
	p.st.VolumeAt = p.st.Events
	return fmt.Sprintf("media volume %d of %d", p.st.Volume, maxVolume)
}

// Wake turns the screen on; the phone shows what it showed before it went
// off. Waking a phone whose screen is on changes nothing.
func (p *Phone) Wake() (Effect, error) {
	return p.input("wake", true, func(e *Effect) error {
		e.Description = p.wake()
		return nil
	})
}

// ScreenOff turns the screen off. While it is off, screenshots are black
// and every input except Wake and the POWER and WAKEUP keys is refused with
// ErrScreenOff.
func (p *Phone) ScreenOff() (Effect, error) {
	return p.input("screen_off", true, func(e *Effect) error {
		e.Description = p.screenOff()
		return nil
	})
}

func (p *Phone) wake() string {
	if p.st.ScreenOn {
		return "the screen is already on"
	}
	p.st.ScreenOn = true
	return "turned the screen on"
}

func (p *Phone) screenOff() string {
	if !p.st.ScreenOn {
		return "the screen is already off"
	}
	p.st.ScreenOn = false
	return "turned the screen off"
}

// OpenApp brings an installed app to the front by package name, the way a
// launcher intent does; the app keeps the state it was left in. The
// launcher's own package goes home.
func (p *Phone) OpenApp(pkg string) (Effect, error) {
	if pkg == "" {
		return Effect{}, fmt.Errorf("%w: empty package name", ErrInvalidArgument)
	}
	return p.input("open_app", false, func(e *Effect) error {
		if pkg == PkgLauncher {
			e.Description = p.home()
			return nil
		}
		desc, err := p.launch(pkg)
		e.Description = desc
		return err
	})
}

// InstallApp installs a catalog app and adds its icon to the home screen.
// A package outside the catalog fails with ErrNotInCatalog; installing an
// app that is already installed is accepted and reported as a no-op
// (Effect.Changed false).
func (p *Phone) InstallApp(pkg string) (Effect, error) {
	if pkg == "" {
		return Effect{}, fmt.Errorf("%w: empty package name", ErrInvalidArgument)
	}
	return p.input("install_app", false, func(e *Effect) error {
		desc, err := p.install(pkg)
		e.Description = desc
		return err
	})
}

func (p *Phone) install(pkg string) (string, error) {
	a, ok := appByPkg(pkg)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrNotInCatalog, pkg)
	}
	if slices.Contains(p.st.Installed, pkg) {
		return a.info.Label + " is already installed", nil
	}
	p.st.Installed = append(p.st.Installed, pkg)
	p.toast(a.info.Label + " installed")
	return "installed " + a.info.Label, nil
}

// launch brings pkg to the front.
func (p *Phone) launch(pkg string) (string, error) {
	a, ok := appByPkg(pkg)
	if !ok || !slices.Contains(p.st.Installed, pkg) {
		if inCatalog(pkg) {
			return "", fmt.Errorf("%w: %s is in the catalog; install it first", ErrAppNotInstalled, pkg)
		}
		return "", fmt.Errorf("%w: %q", ErrAppNotInstalled, pkg)
	}
	p.st.Dialog = nil
	p.blur()
	p.st.Screen, p.st.Foreground = screenApp, pkg
	p.st.Recents = append([]string{pkg}, slices.DeleteFunc(p.st.Recents, func(s string) bool { return s == pkg })...)
	return "opened " + a.info.Label, nil
}

func (p *Phone) home() string {
	if p.st.Screen == screenHome && p.st.Dialog == nil {
		return "already on the home screen"
	}
	p.goHome()
	return "went to the home screen"
}

func (p *Phone) goHome() {
	p.st.Screen, p.st.Foreground = screenHome, ""
	p.blur()
	p.st.Dialog = nil
}

// blur takes focus away from the focused field, as leaving its screen
// does; an address being edited is abandoned, a note draft is kept, a
// password typed but not set is forgotten.
func (p *Phone) blur() {
	switch p.st.Focus {
	case focusBrowser:
		p.st.Browser.Draft, p.st.Browser.SelectAll = "", false
	case focusLockPassword:
		p.st.Settings.PasswordDraft = ""
	}
	p.st.Focus = ""
}

func (p *Phone) overview() string {
	if p.st.Screen == screenRecents {
		if len(p.st.Recents) > 0 {
			desc, _ := p.launch(p.st.Recents[0])
			return "switched back: " + desc
		}
		p.goHome()
		return "no recent apps; went to the home screen"
	}
	p.st.Dialog = nil
	p.blur()
	p.st.Screen, p.st.Foreground = screenRecents, ""
	p.st.RecentsScroll = 0
	return "opened the overview of recent apps"
}

// back handles BACK: a dialog closes first, then the app in front goes back
// one step, and an app at its first screen closes to the home screen.
func (p *Phone) back() string {
	if p.st.Dialog != nil {
		p.st.Dialog = nil
		return "closed the dialog"
	}
	switch p.st.Screen {
	case screenHome:
		return "already on the home screen"
	case screenRecents:
		p.goHome()
		return "left the overview"
	}
	pkg := p.st.Foreground
	switch pkg {
	case PkgSettings:
		if desc, ok := p.settingsBack(); ok {
			return desc
		}
		p.st.Settings.Stack = []pageState{{Page: pageMain}}
	case PkgBrowser:
		if desc, ok := p.browserBack(); ok {
			return desc
		}
	}
	a, _ := appByPkg(pkg)
	p.goHome()
	return "closed " + a.info.Label
}

func (p *Phone) enter() (string, error) {
	switch p.inputFocus() {
	case focusNotes:
		return p.saveNote(), nil
	case focusBrowser:
		return p.loadDraft(), nil
	case focusLockPassword:
		return p.setLockPassword(), nil
	}
	return "nothing to submit", nil
}

func (p *Phone) del() (string, error) {
	var field *string
	switch p.inputFocus() {
	case focusNotes:
		field = &p.st.Notes.Draft
	case focusBrowser:
		field = &p.st.Browser.Draft
		if p.st.Browser.SelectAll {
			p.st.Browser.SelectAll = false
			*field = ""
			return "cleared the address bar", nil
		}
	case focusLockPassword:
		field = &p.st.Settings.PasswordDraft
	default:
		return "", fmt.Errorf("%w: DEL needs a focused text field", ErrNoFocusedField)
	}
	if *field == "" {
		return "the field is already empty", nil
	}
	_, size := utf8.DecodeLastRuneInString(*field)
	*field = (*field)[:len(*field)-size]
	return "deleted one character", nil
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
