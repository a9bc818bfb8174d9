package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// stateVersion is written into every State; Restore refuses other versions
// rather than guessing at their meaning.
const stateVersion = 1

// Screens the phone can show.
const (
	screenHome    = "home"
	screenApp     = "app"
	screenRecents = "recents"
)

// Text fields that can hold focus.
const (
	focusNotes   = "notes.input"
	focusBrowser = "browser.url"
	// focusLockPassword is the password field of Settings' Screen lock
	// page (a field marked password, as Android's).
	focusLockPassword = "settings.password"
)

// phoneState is everything that makes one phone differ from another. It is
// the whole truth: the screen is derived from it, State serialises it and
// Restore reads it back. Maps are only ever looked up, never iterated while
// drawing, so their order cannot leak into a frame.
type phoneState struct {
	Version       int           `json:"version"`
	Model         string        `json:"model"`
	Serial        string        `json:"serial"`
	Events        int64         `json:"events"`
	ScreenOn      bool          `json:"screenOn"`
	BatteryStart  int           `json:"batteryStart"`
	Volume        int           `json:"volume"`
	VolumeAt      int64         `json:"volumeAt,omitempty"`
	Installed     []string      `json:"installed"`
	Screen        string        `json:"screen"`
	Foreground    string        `json:"foreground,omitempty"`
	Recents       []string      `json:"recents"`
	RecentsScroll int           `json:"recentsScroll,omitempty"`
	Focus         string        `json:"focus,omitempty"`
	Toast         string        `json:"toast,omitempty"`
	ToastAt       int64         `json:"toastAt,omitempty"`
	Dialog        *dialogState  `json:"dialog,omitempty"`
	Settings      settingsState `json:"settings"`
	Notes         notesState    `json:"notes"`
	Browser       browserState  `json:"browser"`
	Calc          calcState     `json:"calculator"`
	Counter       counterState  `json:"counter"`
	Store         storeState    `json:"store"`
}

type dialogState struct {
	Title   string `json:"title"`
	Message string `json:"message"`
	Confirm string `json:"confirm"`
	Cancel  string `json:"cancel"`
	Action  string `json:"action"`
	Arg     int    `json:"arg"`
}

type pageState struct {
	Page   string `json:"page"`
	Scroll int    `json:"scroll"`
}

type settingsState struct {
	Toggles       map[string]bool `json:"toggles"`
	Stack         []pageState     `json:"stack"`
	AirplaneSaved []string        `json:"airplaneSaved,omitempty"`
	// Proxy is the network proxy setting (network.go); nil: direct.
	Proxy *NetworkProxy `json:"proxy,omitempty"`
	// PasswordDraft is what is typed in the Screen lock page's password
	// field; LockSet is true once a screen lock password was set.
	PasswordDraft string `json:"passwordDraft,omitempty"`
	LockSet       bool   `json:"lockSet,omitempty"`
}

type noteItem struct {
	ID      int    `json:"id"`
	Text    string `json:"text"`
	SavedAt int64  `json:"savedAt"`
}

type notesState struct {
	Draft  string     `json:"draft"`
	Notes  []noteItem `json:"notes"`
	NextID int        `json:"nextId"`
	Scroll int        `json:"scroll"`
}

type histEntry struct {
	URL    string `json:"url"`
	Scroll int    `json:"scroll"`
}

type browserState struct {
	URL       string      `json:"url"`
	Scroll    int         `json:"scroll"`
	History   []histEntry `json:"history"`
	Draft     string      `json:"draft"`
	SelectAll bool        `json:"selectAll,omitempty"`
	// Fetched is the page last loaded over the network (network.go).
	Fetched *fetchedPage `json:"fetched,omitempty"`
}

type calcState struct {
	Formula string `json:"formula"`
	Done    bool   `json:"done,omitempty"`
	Error   string `json:"error,omitempty"`
}

type counterState struct {
	Count int `json:"count"`
}

type storeState struct {
	Scroll int `json:"scroll"`
}

// validate checks the invariants the rest of the package relies on, so a
// damaged or hand-edited state is refused at Restore instead of panicking
// later.
func (s *phoneState) validate(m Model) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidState, fmt.Sprintf(format, a...))
	}
	if s.Version != stateVersion {
		return bad("version %d, want %d", s.Version, stateVersion)
	}
	if s.Model != m.Name {
		return bad("state is for model %q, not %q", s.Model, m.Name)
	}
	if s.Serial == "" {
		return bad("empty serial")
	}
	if s.Events < 0 || s.BatteryStart < 1 || s.BatteryStart > 100 || s.Volume < 0 || s.Volume > maxVolume {
		return bad("counter out of range")
	}
	for _, pkg := range systemPkgs() {
		if !slices.Contains(s.Installed, pkg) {
			return bad("system app %s missing", pkg)
		}
	}
	for i, pkg := range s.Installed {
		if _, ok := appByPkg(pkg); !ok || slices.Index(s.Installed, pkg) != i {
			return bad("installed list holds unknown or repeated %q", pkg)
		}
	}
	for _, pkg := range s.Recents {
		if !slices.Contains(s.Installed, pkg) {
			return bad("recent app %q not installed", pkg)
		}
	}
	switch s.Screen {
	case screenHome, screenRecents:
	case screenApp:
		if !slices.Contains(s.Installed, s.Foreground) {
			return bad("foreground app %q not installed", s.Foreground)
		}
	default:
		return bad("unknown screen %q", s.Screen)
	}
	switch s.Focus {
	case "":
	case focusNotes:
		if s.Screen != screenApp || s.Foreground != PkgNotes {
			return bad("notes field focused while notes is not in front")
		}
	case focusBrowser:
		if s.Screen != screenApp || s.Foreground != PkgBrowser {
			return bad("address bar focused while the browser is not in front")
		}
	case focusLockPassword:
		if s.Screen != screenApp || s.Foreground != PkgSettings || len(s.Settings.Stack) == 0 ||
			s.Settings.Stack[len(s.Settings.Stack)-1].Page != pageScreenLock {
			return bad("password field focused while Settings' Screen lock page is not in front")
		}
	default:
		return bad("unknown focus %q", s.Focus)
	}
	if s.Dialog != nil {
		if s.Dialog.Action != dialogDeleteNote {
			return bad("unknown dialog action %q", s.Dialog.Action)
		}
		if s.Screen != screenApp || s.Foreground != PkgNotes {
			return bad("a notes dialog while notes is not in front")
		}
	}
	if len(s.Settings.Stack) == 0 {
		return bad("settings page stack empty")
	}
	for _, pg := range s.Settings.Stack {
		if !knownSettingsPage(pg.Page) {
			return bad("unknown settings page %q", pg.Page)
		}
	}
	if s.Settings.Toggles == nil {
		s.Settings.Toggles = map[string]bool{}
	}
	for _, f := range []string{s.Notes.Draft, s.Browser.Draft} {
		if err := checkText(f); err != nil {
			return bad("field text: %v", err)
		}
	}
	if strings.ContainsAny(s.Calc.Formula, "\n\r") {
		return bad("calculator formula")
	}
	return nil
}

func (s *phoneState) marshal() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		// phoneState holds only strings, numbers, slices and a string-keyed
		// map; marshalling cannot fail.
		panic("sim: marshal state: " + err.Error())
	}
	return b
}

// fingerprint is the state with the clock and the transient overlays
// (toast, volume panel) left out: equal fingerprints mean the input changed
// nothing that lasts, only the clock and battery ticked or an overlay came
// and went.
func (s *phoneState) fingerprint() []byte {
	c := *s
	c.Events, c.Toast, c.ToastAt, c.VolumeAt = 0, "", 0, 0
	return c.marshal()
}
