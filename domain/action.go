package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PrefixAction is the type prefix of action ids (act_…).
const PrefixAction = "act"

// ActionType names one kind of input a device can be given.
type ActionType string

// The action types of POST /v1/devices/{deviceId}/actions.
const (
	ActionTap        ActionType = "tap"
	ActionDoubleTap  ActionType = "double_tap"
	ActionLongPress  ActionType = "long_press"
	ActionSwipe      ActionType = "swipe"
	ActionTypeText   ActionType = "type_text"
	ActionKey        ActionType = "key"
	ActionOpenApp    ActionType = "open_app"
	ActionInstallApp ActionType = "install_app"
)

// ActionTypes lists every action type, in documentation order.
var ActionTypes = []ActionType{ActionTap, ActionDoubleTap, ActionLongPress, ActionSwipe,
	ActionTypeText, ActionKey, ActionOpenApp, ActionInstallApp}

// Limits on action arguments.
const (
	MaxTextRunes      = 1000
	MaxGestureMs      = 10_000
	MaxPackageLen     = 255
	MaxIdempotencyKey = 255
	MaxElementRef     = 64
)

// Action is one validated input for a device.
type Action struct {
	Type ActionType
	// X and Y locate tap, double_tap and long_press.
	X, Y int
	// Ref, for tap, names an element from a UI snapshot instead of X and
	// Y: the executor taps the element where it is when the tap is sent,
	// or refuses (ResolveBound).
	Ref string
	// X1, Y1, X2 and Y2 are a swipe's start and end.
	X1, Y1, X2, Y2 int
	// DurationMs is a long press's or swipe's duration; 0 means the
	// device's default.
	DurationMs int
	Text       string
	Key        string
	Package    string
	// APK, for install_app, is the file to install, from the app store's
	// catalog; nil installs the backend's own build of Package. The fleet
	// checks it against its SHA-256 before anything is sent (APK.Verify).
	APK *APK
}

// argument names allowed per action type; required ones are checked below.
var actionArgs = map[ActionType][]string{
	ActionTap:        {"x", "y", "ref"},
	ActionDoubleTap:  {"x", "y"},
	ActionLongPress:  {"x", "y", "durationMs"},
	ActionSwipe:      {"x1", "y1", "x2", "y2", "durationMs"},
	ActionTypeText:   {"text"},
	ActionKey:        {"key"},
	ActionOpenApp:    {"package"},
	ActionInstallApp: {"package"},
}

// ParseAction reads an action type and its arguments object strictly:
// an unknown type, an unknown or missing argument, or a value of the wrong
// type or out of range answers invalid_argument naming it. args may be
// empty only for types without arguments (there are none today).
func ParseAction(typ string, args json.RawMessage) (Action, error) {
	t := ActionType(typ)
	allowed, ok := actionArgs[t]
	if !ok {
		return Action{}, Errorf(CodeInvalidArgument, "action must be one of %s", joinTypes())
	}
	raw := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(args)) > 0 && !bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
		if err := json.Unmarshal(args, &raw); err != nil {
			return Action{}, Errorf(CodeInvalidArgument, "arguments must be a JSON object")
		}
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return Action{}, Errorf(CodeInvalidArgument, "%s takes no argument %q (it takes %s)", t, k, strings.Join(allowed, ", "))
		}
	}
	a := Action{Type: t}
	p := argParser{raw: raw, action: t}
	switch t {
	case ActionTap:
		if _, hasRef := raw["ref"]; hasRef {
			if _, hasX := raw["x"]; hasX {
				return Action{}, Errorf(CodeInvalidArgument, "tap takes either ref or x and y, not both")
			}
			if _, hasY := raw["y"]; hasY {
				return Action{}, Errorf(CodeInvalidArgument, "tap takes either ref or x and y, not both")
			}
			a.Ref = p.str("ref", 1, MaxElementRef)
			break
		}
		a.X, a.Y = p.coord("x"), p.coord("y")
	case ActionDoubleTap:
		a.X, a.Y = p.coord("x"), p.coord("y")
	case ActionLongPress:
		a.X, a.Y = p.coord("x"), p.coord("y")
		a.DurationMs = p.optInt("durationMs", 0, MaxGestureMs)
	case ActionSwipe:
		a.X1, a.Y1, a.X2, a.Y2 = p.coord("x1"), p.coord("y1"), p.coord("x2"), p.coord("y2")
		a.DurationMs = p.optInt("durationMs", 0, MaxGestureMs)
	case ActionTypeText:
		a.Text = p.text("text")
	case ActionKey:
		a.Key = strings.ToUpper(strings.TrimSpace(p.str("key", 1, 64)))
	case ActionOpenApp, ActionInstallApp:
		a.Package = p.str("package", 1, MaxPackageLen)
	}
	if p.err != nil {
		return Action{}, p.err
	}
	return a, nil
}

func joinTypes() string {
	names := make([]string, len(ActionTypes))
	for i, t := range ActionTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// argParser reads typed arguments, keeping the first error.
type argParser struct {
	raw    map[string]json.RawMessage
	action ActionType
	err    error
}

func (p *argParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = Errorf(CodeInvalidArgument, format, args...)
	}
}

func (p *argParser) intArg(name string, required bool, lo, hi int) int {
	v, ok := p.raw[name]
	if !ok {
		if required {
			p.fail("%s needs argument %q", p.action, name)
		}
		return 0
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		p.fail("argument %q must be an integer", name)
		return 0
	}
	i, err := n.Int64()
	if err != nil {
		p.fail("argument %q must be an integer", name)
		return 0
	}
	if i < int64(lo) || i > int64(hi) {
		p.fail("argument %q must be between %d and %d", name, lo, hi)
		return 0
	}
	return int(i)
}

// coord reads a screen coordinate: an integer from 0; one out of that
// range (or beyond any screen) cannot be reached, which the error's reason
// says (ReasonOutOfReach), so the device surface answers
// COORDINATE_OUT_OF_REACH.
func (p *argParser) coord(name string) int {
	before := p.err
	v := p.intArg(name, true, 0, 100_000)
	if before == nil && p.err != nil && strings.Contains(p.err.Error(), "must be between") {
		p.err = AsError(p.err).With("reason", ReasonOutOfReach)
	}
	return v
}

func (p *argParser) optInt(name string, lo, hi int) int { return p.intArg(name, false, lo, hi) }

func (p *argParser) str(name string, minLen, maxLen int) string {
	v, ok := p.raw[name]
	if !ok {
		p.fail("%s needs argument %q", p.action, name)
		return ""
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		p.fail("argument %q must be a string", name)
		return ""
	}
	if len(s) < minLen || len(s) > maxLen {
		p.fail("argument %q must be %d to %d characters", name, minLen, maxLen)
		return ""
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			p.fail("argument %q must be printable ASCII without spaces", name)
			return ""
		}
	}
	return s
}

// text reads any Unicode text: valid UTF-8, 1 to MaxTextRunes runes, no
// control characters (ENTER and DEL are keys).
func (p *argParser) text(name string) string {
	v, ok := p.raw[name]
	if !ok {
		p.fail("%s needs argument %q", p.action, name)
		return ""
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		p.fail("argument %q must be a string", name)
		return ""
	}
	n := utf8.RuneCountInString(s)
	if n == 0 || n > MaxTextRunes {
		p.fail("argument %q must be 1 to %d characters", name, MaxTextRunes)
		return ""
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			p.fail("argument %q must not hold control characters (send ENTER or DEL with the key action)", name)
			return ""
		}
	}
	return s
}

// Arguments returns the action's arguments as recorded on its receipt: only
// the ones that apply, with defaults left out.
func (a Action) Arguments() map[string]any {
	m := map[string]any{}
	switch a.Type {
	case ActionTap:
		if a.Ref != "" {
			m["ref"] = a.Ref
		} else {
			m["x"], m["y"] = a.X, a.Y
		}
	case ActionDoubleTap:
		m["x"], m["y"] = a.X, a.Y
	case ActionLongPress:
		m["x"], m["y"] = a.X, a.Y
		if a.DurationMs > 0 {
			m["durationMs"] = a.DurationMs
		}
	case ActionSwipe:
		m["x1"], m["y1"], m["x2"], m["y2"] = a.X1, a.Y1, a.X2, a.Y2
		if a.DurationMs > 0 {
			m["durationMs"] = a.DurationMs
		}
	case ActionTypeText:
		m["text"] = a.Text
	case ActionKey:
		m["key"] = a.Key
	case ActionOpenApp, ActionInstallApp:
		m["package"] = a.Package
	}
	return m
}

// ArgumentsJSON is Arguments encoded (keys sorted, so equal actions encode
// equally).
func (a Action) ArgumentsJSON() json.RawMessage {
	b, _ := json.Marshal(a.Arguments()) // ints and strings always encode
	return b
}

// Fingerprint identifies what an idempotency key was first used for: the
// device, the action and its arguments. A retry with the same key and the
// same fingerprint is the same request.
func (a Action) Fingerprint(deviceID string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", deviceID, a.Type)
	h.Write(a.ArgumentsJSON())
	return hex.EncodeToString(h.Sum(nil))
}

// CheckIdempotencyKey refuses a key that is empty, longer than 255
// characters or not printable ASCII, with invalid_argument.
func CheckIdempotencyKey(key string) error {
	if key == "" {
		return Errorf(CodeInvalidArgument, "idempotencyKey is required: choose a new one for each action and reuse it only to retry that action")
	}
	if len(key) > MaxIdempotencyKey {
		return Errorf(CodeInvalidArgument, "idempotencyKey must be at most %d characters", MaxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return Errorf(CodeInvalidArgument, "idempotencyKey must be printable ASCII")
		}
	}
	return nil
}
