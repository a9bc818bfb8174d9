package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image"
	"slices"
	"sync"
	"time"
)

// clockStart is the time a new phone shows; a variable only because
// time.Time cannot be a constant.
var clockStart = time.Date(2025, time.January, 6, 9, 0, 0, 0, time.UTC)

// ClockStart returns the time the status bar shows on a new phone:
// 09:00 UTC on Monday 6 January 2025.
func ClockStart() time.Time { return clockStart }

// ClockStep is how far the phone's logical clock advances for every
// accepted input. The clock never reads wall time, so a replayed session
// shows the same times.
const ClockStep = time.Minute

// Phone is one virtual phone: a deterministic state machine with a
// renderer. The same model and the same inputs always produce the same
// snapshots and byte-identical screenshots. Its methods are safe for
// concurrent use; inputs are applied one at a time.
type Phone struct {
	mu          sync.Mutex
	model       Model
	st          phoneState
	normalizing bool

	// The last full-size PNG, keyed by the screen hash it shows: the
	// "after" frame of one action is the "before" frame of the next.
	pngHash string
	pngData []byte

	// directLoopback lets the browser load loopback pages with no proxy
	// set (AllowDirectLoopback; not part of the state).
	directLoopback bool

	// shown memoises what the current state shows and serialises to, so
	// an observation after an action (and the next action's rollback copy)
	// lays out and marshals nothing again. Every change to st clears it.
	shown shown
}

// shown is the screen laid out from the phone's current state and the
// state's serialised forms, each filled on first use. The tree is never
// changed once built (readers only walk it).
type shown struct {
	root               *node // nil: not laid out since the last change
	hash               string
	state, fingerprint []byte
}

// screen returns the current screen's tree and hash, laying it out only if
// the state changed since it was last laid out.
func (p *Phone) screen() (*node, string) {
	if p.shown.root == nil {
		p.shown.root = p.build()
		p.shown.hash = hashTree(p.shown.root)
	}
	return p.shown.root, p.shown.hash
}

// stateJSON is p.st.marshal(), memoised until the state changes. Callers
// outside the package get a copy.
func (p *Phone) stateJSON() []byte {
	if p.shown.state == nil {
		p.shown.state = p.st.marshal()
	}
	return p.shown.state
}

// fingerprint is p.st.fingerprint(), memoised until the state changes.
func (p *Phone) fingerprint() []byte {
	if p.shown.fingerprint == nil {
		p.shown.fingerprint = p.st.fingerprint()
	}
	return p.shown.fingerprint
}

// Effect reports what an accepted input did.
type Effect struct {
	// Action names the input, e.g. "tap", "press_key".
	Action string `json:"action"`
	// Target is the Ref of the element that received the input, if any.
	Target string `json:"target,omitempty"`
	// TargetID is that element's resource id.
	TargetID string `json:"targetId,omitempty"`
	// TargetText is that element's text or content description.
	TargetText string `json:"targetText,omitempty"`
	// Description says in words what happened, e.g. "turned Wi-Fi off".
	Description string `json:"description"`
	// Changed reports whether the input changed the phone's lasting state;
	// false means it was accepted but had no effect beyond the clock
	// ticking and a toast or volume panel appearing or fading.
	Changed bool `json:"changed"`
	// Foreground is the package in front after the input (the launcher on
	// the home and overview screens).
	Foreground string `json:"foreground"`
	// ScreenHash is ScreenHash() after the input.
	ScreenHash string `json:"screenHash"`
}

// New returns a phone of the named model, screen on, at the home screen,
// with the system apps installed. The serial appears in Settings and seeds
// the few per-device values (battery level, addresses).
func New(model, serial string) (*Phone, error) {
	m, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	if serial == "" {
		return nil, fmt.Errorf("%w: empty serial", ErrInvalidArgument)
	}
	h := fnv.New32a()
	h.Write([]byte(serial))
	st := phoneState{
		Version:      stateVersion,
		Model:        m.Name,
		Serial:       serial,
		ScreenOn:     true,
		BatteryStart: 60 + int(h.Sum32()%41),
		Volume:       7,
		Installed:    systemPkgs(),
		Screen:       screenHome,
		Recents:      []string{},
		Settings:     settingsState{Toggles: defaultToggles(), Stack: []pageState{{Page: pageMain}}},
		Notes:        notesState{Notes: []noteItem{}, NextID: 1},
		Browser:      browserState{History: []histEntry{}},
	}
	return &Phone{model: m, st: st}, nil
}

// Restore rebuilds a phone from bytes returned by State. The model must be
// the one the state was taken from.
func Restore(model string, state []byte) (*Phone, error) {
	m, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	var st phoneState
	dec := json.NewDecoder(bytes.NewReader(state))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidState, err)
	}
	if err := st.validate(m); err != nil {
		return nil, err
	}
	p := &Phone{model: m, st: st}
	p.mu.Lock()
	p.changed(p.normalize())
	p.mu.Unlock()
	return p, nil
}

// State serialises the whole phone (JSON). Restore with the same model
// brings back a phone that behaves and renders identically.
func (p *Phone) State() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.stateJSON()), nil
}

// Model returns the phone's model.
func (p *Phone) Model() Model { return p.model }

// Serial returns the serial the phone was created with.
func (p *Phone) Serial() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Serial
}

// ScreenOn reports whether the screen is on.
func (p *Phone) ScreenOn() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.ScreenOn
}

// Foreground returns the package in front: an app, or the launcher on the
// home and overview screens.
func (p *Phone) Foreground() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.foreground()
}

// Clock returns the phone's logical time.
func (p *Phone) Clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock()
}

// InstalledApps lists the installed apps in home screen order.
func (p *Phone) InstalledApps() []AppInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []AppInfo
	for _, pkg := range p.st.Installed {
		a, _ := appByPkg(pkg)
		out = append(out, a.info)
	}
	return out
}

func (p *Phone) foreground() string {
	if p.st.Screen == screenApp {
		return p.st.Foreground
	}
	return PkgLauncher
}

func (p *Phone) clock() time.Time {
	return clockStart.Add(time.Duration(p.st.Events) * ClockStep)
}

func (p *Phone) battery() int {
	return max(5, p.st.BatteryStart-int(p.st.Events/15))
}

// d scales a length given for a 1080-pixel-wide screen to this model.
func (p *Phone) d(v int) int { return v * p.model.Width / 1080 }

func (p *Phone) screenRect() image.Rectangle {
	return image.Rect(0, 0, p.model.Width, p.model.Height)
}

// input runs one input under the lock. Every accepted input advances the
// clock by ClockStep; a refused input (fn returns an error) is rolled back
// entirely.
func (p *Phone) input(action string, allowScreenOff bool, fn func(e *Effect) error) (Effect, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.st.ScreenOn && !allowScreenOff {
		return Effect{}, fmt.Errorf("%w: %s refused; wake the phone first", ErrScreenOff, action)
	}
	saved := p.stateJSON()
	before := p.fingerprint()
	was := p.shown
	p.shown = shown{}
	p.st.Events++
	if p.st.ToastAt != p.st.Events {
		p.st.Toast, p.st.ToastAt = "", 0
	}
	if p.st.VolumeAt != p.st.Events {
		p.st.VolumeAt = 0
	}
	eff := Effect{Action: action}
	if err := fn(&eff); err != nil {
		var st phoneState
		if uerr := json.Unmarshal(saved, &st); uerr != nil {
			panic("sim: roll back state: " + uerr.Error())
		}
		p.st, p.shown = st, was
		return Effect{}, err
	}
	p.changed(p.normalize())
	eff.Changed = !bytes.Equal(before, p.fingerprint())
	eff.Foreground = p.foreground()
	_, eff.ScreenHash = p.screen()
	return eff, nil
}

// changed records that the state changed and that root is what it now
// shows (a layout of the normalised state).
func (p *Phone) changed(root *node) {
	p.shown = shown{root: root, hash: hashTree(root)}
}

// normalize clamps scroll offsets to what the current content allows, so
// the stored state always describes what is shown, and returns the screen.
// Layout uses the clamped offsets, so the tree it returns is the screen
// after clamping.
func (p *Phone) normalize() *node {
	p.normalizing = true
	defer func() { p.normalizing = false }()
	return p.build()
}

// toast shows a short message above the navigation bar until the next input.
func (p *Phone) toast(msg string) {
	p.st.Toast, p.st.ToastAt = msg, p.st.Events
}

// Snapshot returns the accessibility tree of what is on screen. With the
// screen off it is a single empty root.
func (p *Phone) Snapshot() Element {
	p.mu.Lock()
	defer p.mu.Unlock()
	root, _ := p.screen()
	return root.element()
}

// Look is what the screen shows at one moment, all of it from one layout.
type Look struct {
	// Root is the accessibility tree (Snapshot), when asked for.
	Root Element
	// Hash is ScreenHash.
	Hash     string
	ScreenOn bool
	// State is the phone's state (State), when asked for.
	State []byte
}

// Look lays the screen out once, under one hold of the lock, and returns
// its hash, whether it is on and, when asked, its tree and the phone's
// state: the same as ScreenHash, ScreenOn, Snapshot and State called in a
// row with no input between, for one layout instead of one each (an
// action observes the screen before and after it).
func (p *Phone) Look(tree, state bool) Look {
	p.mu.Lock()
	defer p.mu.Unlock()
	root, hash := p.screen()
	l := Look{Hash: hash, ScreenOn: p.st.ScreenOn}
	if tree {
		l.Root = root.element()
	}
	if state {
		l.State = bytes.Clone(p.stateJSON())
	}
	return l
}

// ScreenHash returns a digest of everything drawn on screen, computed from
// the layout rather than the pixels: it changes whenever the screen changes
// and is equal while it does not, so it can detect stale frames cheaply.
func (p *Phone) ScreenHash() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, hash := p.screen()
	return hash
}

// FindElement returns the on-screen element with the given Ref, or an error
// wrapping ErrElementNotFound.
func (p *Phone) FindElement(ref string) (Element, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	root, _ := p.screen()
	n := root.find(ref)
	if n == nil {
		return Element{}, fmt.Errorf("%w: %q", ErrElementNotFound, ref)
	}
	return n.element(), nil
}

// Screenshot renders the screen as a PNG at full resolution. A black frame
// is returned while the screen is off.
func (p *Phone) Screenshot() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	root, h := p.screen()
	if h == p.pngHash && p.pngData != nil {
		return slices.Clone(p.pngData), nil
	}
	img := getFrame(p.model.Width, p.model.Height)
	defer putFrame(img)
	renderInto(img, root)
	data, err := encodeFastPNG(img)
	if err != nil {
		return nil, fmt.Errorf("sim: encode screenshot: %w", err)
	}
	p.pngHash, p.pngData = h, data
	return slices.Clone(data), nil
}

// ScreenshotScaled renders the screen as a PNG no wider than maxWidth,
// keeping the aspect ratio; for clients with small budgets. A maxWidth at
// or above the screen width gives the full-size frame; a non-positive one
// is an error wrapping ErrInvalidArgument.
func (p *Phone) ScreenshotScaled(maxWidth int) ([]byte, error) {
	if maxWidth <= 0 {
		return nil, fmt.Errorf("%w: maxWidth %d must be positive", ErrInvalidArgument, maxWidth)
	}
	if maxWidth >= p.model.Width {
		return p.Screenshot()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	root, _ := p.screen()
	img := p.frameOf(root, maxWidth)
	defer putFrame(img)
	data, err := encodeFastPNG(img)
	if err != nil {
		return nil, fmt.Errorf("sim: encode screenshot: %w", err)
	}
	return data, nil
}

// Storage sizes of the data partition.
const (
	systemBytes = 9 << 30  // what the system and its apps take
	appBytes    = 48 << 20 // what each installed catalog app takes
)

// storageBytes is the data partition's size by model.
var storageBytes = map[string]int64{"Pixel7": 128 << 30, "Generic": 64 << 30, "Compact": 32 << 30}

// Storage returns the data partition's size and its free space, in bytes:
// the model's capacity less what the system and each installed catalog
// app take.
func (p *Phone) Storage() (total, free int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	total = storageBytes[p.model.Name]
	if total == 0 {
		total = 64 << 30
	}
	free = total - systemBytes
	for _, pkg := range p.st.Installed {
		if a, ok := appByPkg(pkg); ok && !a.info.System {
			free -= appBytes
		}
	}
	return total, free
}
