package domain

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// refusedWith fails t unless err is a domain error with code and, when
// field is not empty, naming that field.
func refusedWith(t *testing.T, err error, code Code, field string, input any) {
	t.Helper()
	var de *Error
	if !errors.As(err, &de) || de.Code != code {
		t.Fatalf("%q: got %v; want %s", input, err, code)
	}
	if field != "" && de.Extra["field"] != field {
		t.Fatalf("%q: refusal names field %v; want %s", input, de.Extra["field"], field)
	}
}

// FuzzParseCron: a schedule's cron expression and time zone are refused
// with invalid_argument naming cron or timezone, or read into a schedule
// whose next occurrence is strictly later and on a whole minute, and
// whose latest occurrence in an interval lies in it with no later one
// before its end.
func FuzzParseCron(f *testing.F) {
	for _, s := range [][2]string{
		{"*/15 * * * *", ""}, {"0 9 * * MON-FRI", "Europe/Paris"}, {"@daily", "UTC"}, {"@every 1m", ""},
		{"0 0 30 2 *", ""}, {"0 0 31 */2 *", "America/New_York"}, {"TZ=UTC 0 * * * *", ""}, {"* * * * * *", ""},
		{"0-59/0 * * * *", ""}, {"60 * * * *", ""}, {"0 2 * * *", "Local"}, {"0 2 * * *", "../etc/passwd"},
		{"30 2 * * *", "Europe/Berlin"}, {"0 0 29 2 *", "Pacific/Apia"}, {"?", ""}, {"1,2,3-4/2 L * * *", ""},
	} {
		f.Add(s[0], s[1], int64(0), uint32(3600))
	}
	base := time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr, tz string, offset int64, span uint32) {
		c, err := ParseCron(expr, tz)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Code != CodeInvalidArgument || (de.Extra["field"] != "cron" && de.Extra["field"] != "timezone") {
				t.Fatalf("ParseCron(%q, %q): got %v; want invalid_argument naming cron or timezone", expr, tz, err)
			}
			return
		}
		after := base.Add(time.Duration(offset%(5*365*24)) * time.Hour)
		next := c.Next(after)
		if next.IsZero() {
			return // none within five years of after
		}
		if !next.After(after) || next.Second() != 0 || next.Nanosecond() != 0 || next.Location() != time.UTC {
			t.Fatalf("%q in %q: next after %s is %s", expr, tz, after, next)
		}
		now := after.Add(time.Duration(span%(400*24*3600)) * time.Second)
		latest, skipped := c.Latest(after, now)
		if latest.IsZero() {
			if !next.After(now) {
				t.Fatalf("%q in %q: no latest in (%s, %s], though %s is in it", expr, tz, after, now, next)
			}
			return
		}
		if !latest.After(after) || latest.After(now) {
			t.Fatalf("%q in %q: latest %s not in (%s, %s]", expr, tz, latest, after, now)
		}
		if n := c.Next(latest); !n.IsZero() && !n.After(now) {
			t.Fatalf("%q in %q: latest in (%s, %s] is %s, but %s follows it in the interval", expr, tz, after, now, latest, n)
		}
		if skipped != latest.After(next) {
			t.Fatalf("%q in %q: latest %s, first %s, skipped %v", expr, tz, latest, next, skipped)
		}
	})
}

// FuzzParseAction: an action's arguments are refused with
// invalid_argument, or read into an action whose recorded arguments
// (ArgumentsJSON, as its receipt shows them) read back into the same
// action with the same fingerprint, within the documented bounds.
func FuzzParseAction(f *testing.F) {
	for _, s := range [][2]string{
		{"tap", `{"x":1,"y":2}`}, {"tap", `{"ref":"e12"}`}, {"tap", `{"ref":"e1","x":1}`}, {"tap", `{"x":1.0,"y":2e0}`},
		{"tap", `{"x":-1,"y":100001}`}, {"double_tap", `{"x":"1","y":2}`}, {"long_press", `{"x":1,"y":2,"durationMs":0}`},
		{"swipe", `{"x1":0,"y1":0,"x2":10,"y2":10,"durationMs":10000}`}, {"type_text", `{"text":"héllo 😀"}`},
		{"type_text", `{"text":"a\u0000b"}`}, {"type_text", `{"text":"\ufffd"}`}, {"key", `{"key":"enter"}`}, {"key", `{"key":" ENTER"}`},
		{"open_app", `{"package":"com.example.notes"}`}, {"install_app", `{"package":""}`}, {"tap", `null`}, {"tap", `[]`},
		{"tap", `{"x":1,"y":2,"x":3}`}, {"fly", `{}`}, {"type_text", "{\"text\":\"\xff\"}"},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, typ string, args []byte) {
		a, err := ParseAction(typ, args)
		if err != nil {
			refusedWith(t, err, CodeInvalidArgument, "", args)
			return
		}
		recorded := a.ArgumentsJSON()
		b, err := ParseAction(typ, recorded)
		if err != nil {
			t.Fatalf("%s %q read, but its recorded arguments %s are refused: %v", typ, args, recorded, err)
		}
		if !reflect.DeepEqual(a, b) || a.Fingerprint("dev_1") != b.Fingerprint("dev_1") {
			t.Fatalf("%s %q read as %+v; its recorded arguments %s as %+v", typ, args, a, recorded, b)
		}
		if n := utf8.RuneCountInString(a.Text); n > MaxTextRunes || !utf8.ValidString(a.Text) || a.DurationMs < 0 || a.DurationMs > MaxGestureMs ||
			len(a.Package) > MaxPackageLen || len(a.Ref) > MaxElementRef || min(a.X, a.Y, a.X1, a.Y1, a.X2, a.Y2) < 0 {
			t.Fatalf("%s %q read out of bounds: %+v", typ, args, a)
		}
	})
}

// FuzzParseRunScript: a script is refused with invalid_argument, or read
// into one that encodes and reads back the same.
func FuzzParseRunScript(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"steps":[{"action":"tap","arguments":{"x":1,"y":2}},{"finish":"succeeded"}]}`,
		`{"steps":[{"action":"tap","arguments":{"ref":"e1"},"waitFor":{"signature":"x"},"element":{"text":"OK"},"effect":"changed"}]}`,
		`{"version":2,"steps":[]}`, `{"steps":[{"finish":"failed","action":"tap"}]}`, `{"steps":[{"action":"key","arguments":{"key":"HOME"}}]} trailing`,
		`{"steps":[{"unknown":1}]}`, `null`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := ParseRunScript(raw)
		if err != nil {
			refusedWith(t, err, CodeInvalidArgument, "", raw)
			return
		}
		if s.Version != 1 || len(s.Steps) == 0 || len(s.Steps) > maxScriptSteps {
			t.Fatalf("%q read as version %d with %d steps", raw, s.Version, len(s.Steps))
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("%q read but does not encode: %v", raw, err)
		}
		s2, err := ParseRunScript(enc)
		if err != nil {
			t.Fatalf("%q read, encoded as %s, refused: %v", raw, enc, err)
		}
		if enc2, _ := json.Marshal(s2); string(enc2) != string(enc) {
			t.Fatalf("%q: encoded %s, read back and encoded %s", raw, enc, enc2)
		}
	})
}

// FuzzParseBillingPeriod: a period is refused with invalid_argument
// naming period, or is a calendar month whose name reads back the same.
func FuzzParseBillingPeriod(f *testing.F) {
	for _, s := range []string{"2026-03-01", " 2026-03-01 ", "2026-03-02", "2026-02-30", "0000-01-01", "9999-12-01", "2026-3-1", "", "2026-03-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseBillingPeriod(s)
		if err != nil {
			refusedWith(t, err, CodeInvalidArgument, "period", s)
			return
		}
		if p.Start.Day() != 1 || !p.End.Equal(p.Start.AddDate(0, 1, 0)) || p.Start.Location() != time.UTC {
			t.Fatalf("%q read as %+v", s, p)
		}
		if q, err := ParseBillingPeriod(p.Name()); err != nil || q != p {
			t.Fatalf("%q read as %s, which reads back as %+v (%v)", s, p.Name(), q, err)
		}
	})
}

// FuzzParseCopilotCommand: a direct command is refused with
// invalid_argument naming command, or read into a known verb with the
// argument it takes, which reads back the same when written as the help
// shows.
func FuzzParseCopilotCommand(f *testing.F) {
	for _, s := range []string{`tap "Save"`, `type “hello”`, `type 'x'`, `open Notes`, `open "My App"`, `swipe UP`, `back`, `home now`,
		`screenshot`, `tap ""`, `tap "`, `TAP "a"`, "", `fly`, "type \"\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCopilotCommand(text)
		if err != nil {
			refusedWith(t, err, CodeInvalidArgument, "command", text)
			return
		}
		written := c.Verb
		switch c.Verb {
		case CommandTap, CommandType:
			if c.Arg == "" {
				t.Fatalf("%q read as %+v without its text", text, c)
			}
			written += ` "` + c.Arg + `"`
		case CommandOpen:
			if strings.TrimSpace(c.Arg) == "" {
				t.Fatalf("%q read as %+v without its app", text, c)
			}
			written += ` "` + c.Arg + `"`
		case CommandSwipe:
			written += " " + c.Arg
		case CommandBack, CommandHome, CommandScreenshot:
			if c.Arg != "" {
				t.Fatalf("%q read as %+v", text, c)
			}
		default:
			t.Fatalf("%q read as unknown verb %+v", text, c)
		}
		if c2, err := ParseCopilotCommand(written); err != nil || c2 != c {
			t.Fatalf("%q read as %+v; written %q reads as %+v (%v)", text, c, written, c2, err)
		}
	})
}

// FuzzParseCopilotPolicy: a policy is refused, or is the set it names.
func FuzzParseCopilotPolicy(f *testing.F) {
	for _, s := range []string{"", "none", "install,sensitive,payment", " payment , install", "install,,", "Install", "all"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseCopilotPolicy(s)
		if err != nil {
			return
		}
		var names []string
		for name, on := range map[string]bool{"install": p.Install, "sensitive": p.Sensitive, "payment": p.Payment} {
			if on != strings.Contains(s, name) {
				t.Fatalf("%q read as %+v", s, p)
			}
			if on {
				names = append(names, name)
			}
		}
		if q, err := ParseCopilotPolicy(strings.Join(names, ",")); err != nil || q != p {
			t.Fatalf("%q read as %+v; %v reads as %+v (%v)", s, p, names, q, err)
		}
	})
}

// FuzzParseCLIPublicKey: a CLI's public key is refused with
// invalid_argument naming publicKey, or is 32 bytes that encode back to
// the text given (one spelling per key).
func FuzzParseCLIPublicKey(f *testing.F) {
	for _, s := range []string{strings.Repeat("A", 43), strings.Repeat("_", 43), strings.Repeat("A", 42) + "B", strings.Repeat("A", 44), "", "=", strings.Repeat("A", 43) + "="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParseCLIPublicKey(s)
		if err != nil {
			refusedWith(t, err, CodeInvalidArgument, "publicKey", s)
			return
		}
		if b := pub.Bytes(); len(b) != 32 || base64.RawURLEncoding.EncodeToString(b) != s {
			t.Fatalf("%q read as %x", s, b)
		}
	})
}
