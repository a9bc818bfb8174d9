package adbsim

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"phonefleet/internal/sim"
)

func newDaemonForShell(t *testing.T) *Daemon {
	t.Helper()
	p, err := sim.New("Compact", "SIM-SHELL")
	if err != nil {
		t.Fatal(err)
	}
	return &Daemon{phone: p, files: map[string][]byte{}, stats: Stats{Streams: map[string]int{}}}
}

// TestShell runs command lines as adb shell does and checks what they
// print and return.
func TestShell(t *testing.T) {
	for _, c := range []struct {
		name, line   string
		stdout       string
		stderr       string
		status       int
		stdoutPrefix bool
	}{
		{"echo", "echo hello world", "hello world\n", "", 0, false},
		{"and/or", "false && echo no || echo yes", "yes\n", "", 0, false},
		{"status of the last command", "false; echo $?; true; echo $?", "1\n0\n", "", 0, false},
		{"quotes and escapes", `echo 'a  b' "c $?" d\ e`, "a  b c 0 d e\n", "", 0, false},
		{"variables", "X=1; echo ${X}$X", "11\n", "", 0, false},
		{"unknown command", "foo bar", "", "/system/bin/sh: foo: inaccessible or not found\n", 127, false},
		{"stderr to /dev/null", "foo 2>/dev/null; echo $?", "127\n", "", 0, false},
		{"stderr to stdout", "foo 2>&1", "/system/bin/sh: foo: inaccessible or not found\n", "", 127, false},
		{"file round trip", "echo saved > /sdcard/x.txt; cat /sdcard/x.txt; rm /sdcard/x.txt; cat /sdcard/x.txt", "saved\n", "cat: /sdcard/x.txt: No such file or directory\n", 1, false},
		{"pipe to grep", "getprop | grep ro.product.model", "[ro.product.model]: [Compact Phone]\n", "", 0, false},
		{"grep finds nothing", "echo a | grep b", "", "", 1, false},
		{"exit stops the line", "exit 7; echo never", "", "", 7, false},
		{"syntax error", "echo 'open", "", "/system/bin/sh: syntax error: unterminated '\n", 1, false},
		{"wm size", "wm size", "Physical size: 720x1600\n", "", 0, false},
		{"getprop sdk", "getprop ro.build.version.sdk", "33\n", "", 0, false},
		{"dumpsys window focus", "dumpsys window | grep mCurrentFocus", "  mCurrentFocus=Window{5e1c0f1 u0 com.android.launcher3/com.android.launcher3.Launcher}\n", "", 0, false},
		{"dumpsys power", "dumpsys power | grep -E 'mWakefulness='", "  mWakefulness=Awake\n", "", 0, false},
		{"uiautomator to a file", "uiautomator dump && cat /sdcard/window_dump.xml", "UI hierchary dumped to: /sdcard/window_dump.xml\n<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">", "", 0, true},
		{"pm list packages", "pm list packages -s | grep notes", "package:com.example.notes\n", "", 0, false},
		{"monkey on a missing app", "monkey -p com.nope 1 >/dev/null", "", "** No activities found to run, monkey aborted.\n", 252, false},
		{"am start of a missing app", "am start -n com.nope/.Main", "Starting: Intent { cmp=com.nope/.Main }\n", "Error type 3\nError: Activity class {com.nope/com.nope.Main} does not exist.\n", 1, false},
		{"non-ASCII input text is refused", "input text é >/dev/null 2>&1; echo $?", "255\n", "", 0, false},
		{"install a non-APK", "echo junk > /data/local/tmp/a.apk; pm install /data/local/tmp/a.apk", "Failure [INSTALL_PARSE_FAILED_NOT_APK: sim: invalid argument: not a sim catalog APK]\n", "", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDaemonForShell(t)
			var out, errb bytes.Buffer
			status := d.runCommand(context.Background(), strings.NewReader(""), &out, &errb, c.line)
			got := out.String()
			if c.stdoutPrefix {
				if !strings.HasPrefix(got, c.stdout) {
					t.Fatalf("stdout = %q; want it to start with %q", got, c.stdout)
				}
			} else if got != c.stdout {
				t.Fatalf("stdout = %q; want %q", got, c.stdout)
			}
			if errb.String() != c.stderr || status != c.status {
				t.Fatalf("stderr %q, status %d; want %q, %d", errb.String(), status, c.stderr, c.status)
			}
		})
	}
}

// TestInputRefusalsAreSilent: a tap off the screen or typing with no
// focused field succeeds without a word, as on a device, and is listed in
// Refusals.
func TestInputRefusalsAreSilent(t *testing.T) {
	d := newDaemonForShell(t)
	before := d.phone.ScreenHash()
	var out, errb bytes.Buffer
	status := d.runCommand(context.Background(), strings.NewReader(""), &out, &errb, "input tap 5000 10; input text hello; input keyevent FROB")
	if status != 0 || out.Len() != 0 || errb.Len() != 0 {
		t.Fatalf("status %d, out %q, err %q; want a silent success", status, out.String(), errb.String())
	}
	if d.phone.ScreenHash() != before {
		t.Fatalf("a refused input changed the screen")
	}
	r := d.Refusals()
	if len(r) != 3 || !strings.HasPrefix(r[0], "tap 5000 10: ") || !strings.Contains(r[1], "no focused text field") {
		t.Fatalf("refusals = %q", r)
	}
}

// TestInteractive: the persistent shell a client keeps open reads lines,
// answers each, and on a terminal echoes and prompts until told not to.
func TestInteractive(t *testing.T) {
	t.Run("raw", func(t *testing.T) {
		d := newDaemonForShell(t)
		var out bytes.Buffer
		status := d.interactive(context.Background(), strings.NewReader("echo a\nfalse; echo __END_1__$?\nexit 2\necho never\n"), &out, &out, false)
		if out.String() != "a\n__END_1__1\n" || status != 2 {
			t.Fatalf("raw shell: %q, %d", out.String(), status)
		}
	})
	t.Run("pty", func(t *testing.T) {
		d := newDaemonForShell(t)
		var out bytes.Buffer
		w := &crlfWriter{w: &out}
		d.interactive(context.Background(), strings.NewReader("echo a\nPS1=; stty -echo\necho b\n"), w, w, true)
		// After PS1= the prompt is empty and, after stty -echo, input is no
		// longer echoed.
		want := "compact:/ $ echo a\r\na\r\ncompact:/ $ PS1=; stty -echo\r\nb\r\n"
		if out.String() != want {
			t.Fatalf("pty shell:\n%q\nwant\n%q", out.String(), want)
		}
	})
}
