package adbsim_test

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"phonefleet/internal/adbsim"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

// device starts a daemon over a new Pixel7 and connects the real adb
// server at server to it.
func device(t *testing.T, server string, opts adbsim.Options) *adbsim.Daemon {
	t.Helper()
	p, err := sim.New(sim.DefaultModel, "SIM-ADB-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := adbsim.Start(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	testutil.ConnectADB(t, server, d.Serial())
	return d
}

// adb runs the real adb client against server and device d, failing the
// test when it exits non-zero.
func adb(t *testing.T, server string, d *adbsim.Daemon, args ...string) string {
	t.Helper()
	out, err := testutil.ADB(t, server, append([]string{"-s", d.Serial()}, args...)...)
	if err != nil {
		t.Fatalf("adb %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// adbRaw runs the adb client with separate stdout, stdin and the exit
// status, for the byte-exact and exit-code checks.
func adbRaw(t *testing.T, server string, d *adbsim.Daemon, stdin string, args ...string) (stdout, stderr []byte, status int) {
	t.Helper()
	_, port, _ := strings.Cut(server, ":")
	cmd := exec.Command(testutil.ADBPath(t), append([]string{"-P", port, "-s", d.Serial()}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.Bytes(), e.Bytes(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("adb %s: %v", strings.Join(args, " "), err)
	}
	return o.Bytes(), e.Bytes(), 0
}

// uiNode is the uiautomator XML as a client parses it.
type uiNode struct {
	Text       string   `xml:"text,attr"`
	ResourceID string   `xml:"resource-id,attr"`
	Class      string   `xml:"class,attr"`
	Package    string   `xml:"package,attr"`
	Desc       string   `xml:"content-desc,attr"`
	Clickable  bool     `xml:"clickable,attr"`
	Focused    bool     `xml:"focused,attr"`
	Bounds     string   `xml:"bounds,attr"`
	Nodes      []uiNode `xml:"node"`
}

type hierarchy struct {
	XMLName  xml.Name `xml:"hierarchy"`
	Rotation string   `xml:"rotation,attr"`
	Root     uiNode   `xml:"node"`
}

func (n uiNode) find(match func(uiNode) bool) (uiNode, bool) {
	if match(n) {
		return n, true
	}
	for _, c := range n.Nodes {
		if f, ok := c.find(match); ok {
			return f, true
		}
	}
	return uiNode{}, false
}

func centre(t *testing.T, bounds string) (int, int) {
	t.Helper()
	var l, tp, r, b int
	if _, err := fmt.Sscanf(bounds, "[%d,%d][%d,%d]", &l, &tp, &r, &b); err != nil {
		t.Fatalf("bounds %q: %v", bounds, err)
	}
	return (l + r) / 2, (tp + b) / 2
}

// dumpUI runs uiautomator dump /dev/tty through the real server and parses it.
func dumpUI(t *testing.T, server string, d *adbsim.Daemon) hierarchy {
	t.Helper()
	out, _, status := adbRaw(t, server, d, "", "exec-out", "uiautomator", "dump", "/dev/tty")
	if status != 0 {
		t.Fatalf("uiautomator dump: status %d", status)
	}
	body, ok := bytes.CutSuffix(out, []byte("UI hierchary dumped to: /dev/tty\n"))
	if !ok {
		t.Fatalf("uiautomator dump output lacks the device's trailer: %q", out[max(0, len(out)-80):])
	}
	var h hierarchy
	if err := xml.Unmarshal(body, &h); err != nil {
		t.Fatalf("uiautomator XML does not parse: %v", err)
	}
	return h
}

// TestRealADBServer drives a sim phone through the real adb client and
// server: each subtest is a command a host backend sends, and its effect
// is read from the sim phone itself.
func TestRealADBServer(t *testing.T) {
	server := testutil.ADBServer(t)
	d := device(t, server, adbsim.Options{})
	p := d.Phone()

	t.Run("devices lists the daemon with its model", func(t *testing.T) {
		out, err := testutil.ADB(t, server, "devices", "-l")
		if err != nil {
			t.Fatal(err)
		}
		if want := d.Serial() + " "; !strings.Contains(out, want) || !strings.Contains(out, "model:Pixel_7") {
			t.Fatalf("adb devices -l = %q; want %s listed with model:Pixel_7", out, d.Serial())
		}
	})

	t.Run("exec-out screencap -p is the sim's PNG", func(t *testing.T) {
		got, _, status := adbRaw(t, server, d, "", "exec-out", "screencap", "-p")
		want, err := p.Screenshot()
		if err != nil {
			t.Fatal(err)
		}
		if status != 0 || !bytes.Equal(got, want) {
			t.Fatalf("screencap: status %d, %d bytes; want the sim's %d-byte PNG byte for byte", status, len(got), len(want))
		}
	})

	t.Run("uiautomator dump parses and matches the snapshot", func(t *testing.T) {
		h := dumpUI(t, server, d)
		n, ok := h.Root.find(func(n uiNode) bool { return n.Text == "Notes" && n.Clickable })
		if !ok {
			t.Fatalf("no clickable Notes icon in the dump")
		}
		el, _ := p.Snapshot().Find(func(e sim.Element) bool { return e.Text == "Notes" && e.Clickable })
		b := el.Bounds
		if want := fmt.Sprintf("[%d,%d][%d,%d]", b[0], b[1], b[2], b[3]); n.Bounds != want {
			t.Fatalf("Notes bounds = %s; want the snapshot's %s", n.Bounds, want)
		}
	})

	t.Run("input tap opens the app under the finger", func(t *testing.T) {
		h := dumpUI(t, server, d)
		n, _ := h.Root.find(func(n uiNode) bool { return n.Text == "Notes" && n.Clickable })
		x, y := centre(t, n.Bounds)
		before := p.ScreenHash()
		adb(t, server, d, "shell", "input", "tap", fmt.Sprint(x), fmt.Sprint(y))
		if got := p.Foreground(); got != sim.PkgNotes || p.ScreenHash() == before {
			t.Fatalf("after tapping Notes: foreground %s; want %s and a new screen", got, sim.PkgNotes)
		}
		out := adb(t, server, d, "shell", "dumpsys", "window", "|", "grep", "mCurrentFocus")
		if !strings.Contains(out, "u0 com.example.notes/com.example.notes.MainActivity}") {
			t.Fatalf("dumpsys window | grep mCurrentFocus = %q; want the Notes activity", out)
		}
	})

	t.Run("ADB_INPUT_B64 types Unicode into the focused field", func(t *testing.T) {
		text := "héllo 你好 🙂"
		h := dumpUI(t, server, d)
		field, ok := h.Root.find(func(n uiNode) bool { return n.Class == "android.widget.EditText" })
		if !ok {
			t.Fatalf("no text field on the Notes screen")
		}
		x, y := centre(t, field.Bounds)
		adb(t, server, d, "shell", "input", "tap", fmt.Sprint(x), fmt.Sprint(y))
		adb(t, server, d, "shell", "am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg",
			base64.StdEncoding.EncodeToString([]byte(text)))
		h = dumpUI(t, server, d)
		n, ok := h.Root.find(func(n uiNode) bool { return n.Focused })
		if !ok || n.Text != text {
			t.Fatalf("focused field holds %q; want %q", n.Text, text)
		}
	})

	t.Run("input text with escaped spaces, then keyevent ENTER saves", func(t *testing.T) {
		adb(t, server, d, "shell", "input", "keyevent", "KEYCODE_ENTER") // saves the Unicode note
		adb(t, server, d, "shell", "input", "text", `ascii%stext\!`)
		el, _ := p.Snapshot().Find(func(e sim.Element) bool { return e.Focused })
		if el.Text != "ascii text!" {
			t.Fatalf("field = %q; want %q", el.Text, "ascii text!")
		}
	})

	t.Run("wm size and getprop", func(t *testing.T) {
		if out := adb(t, server, d, "shell", "wm", "size"); out != "Physical size: 1080x2400" {
			t.Fatalf("wm size = %q", out)
		}
		if out := adb(t, server, d, "shell", "getprop", "ro.product.model"); out != "Pixel 7" {
			t.Fatalf("getprop ro.product.model = %q; want Pixel 7", out)
		}
		if out := adb(t, server, d, "shell", "getprop", "ro.build.version.sdk"); out != "34" {
			t.Fatalf("getprop ro.build.version.sdk = %q; want 34", out)
		}
	})

	t.Run("adb install streams a catalog APK", func(t *testing.T) {
		apk, err := sim.CatalogAPK(sim.PkgCalculator)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "calculator.apk")
		if err := os.WriteFile(path, apk, 0o644); err != nil {
			t.Fatal(err)
		}
		if out := adb(t, server, d, "install", path); !strings.Contains(out, "Success") {
			t.Fatalf("adb install = %q; want Success", out)
		}
		if !slices.ContainsFunc(p.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCalculator }) {
			t.Fatalf("calculator not installed on the sim phone")
		}
		if out := adb(t, server, d, "shell", "pm", "list", "packages", "-3"); out != "package:"+sim.PkgCalculator {
			t.Fatalf("pm list packages -3 = %q", out)
		}
		adb(t, server, d, "shell", "monkey", "-p", sim.PkgCalculator, "-c", "android.intent.category.LAUNCHER", "1")
		if got := p.Foreground(); got != sim.PkgCalculator {
			t.Fatalf("after monkey: foreground %s; want the calculator", got)
		}
	})

	t.Run("exit status and unknown commands over shell_v2", func(t *testing.T) {
		_, _, status := adbRaw(t, server, d, "", "shell", "exit", "3")
		if status != 3 {
			t.Fatalf("adb shell exit 3: status %d", status)
		}
		_, stderr, status := adbRaw(t, server, d, "", "shell", "frobnicate")
		if status != 127 || !strings.Contains(string(stderr), "frobnicate: inaccessible or not found") {
			t.Fatalf("adb shell frobnicate: status %d, stderr %q; want 127 and not found", status, stderr)
		}
	})

	t.Run("interactive shell over stdin (shell,v2,raw)", func(t *testing.T) {
		out, _, status := adbRaw(t, server, d, "echo one\ngetprop ro.product.model; echo __END_1__$?\nexit 4\n", "shell")
		if string(out) != "one\nPixel 7\n__END_1__0\n" || status != 4 {
			t.Fatalf("interactive shell: %q, status %d", out, status)
		}
	})

	t.Run("interactive shell on a terminal (shell: v1, pty)", func(t *testing.T) {
		out, _, _ := adbRaw(t, server, d, "PS1=; stty -echo\nwm size\nexit\n", "shell", "-x")
		got := string(out)
		if !strings.Contains(got, "Physical size: 1080x2400\r\n") || strings.Count(got, "wm size") != 0 {
			t.Fatalf("pty shell output %q; want CRLF output and no echo after stty -echo", got)
		}
	})

	t.Run("pm clear empties an app", func(t *testing.T) {
		if out := adb(t, server, d, "shell", "pm", "clear", sim.PkgNotes); out != "Success" {
			t.Fatalf("pm clear = %q", out)
		}
		adb(t, server, d, "shell", "am", "start", "-n", "com.example.notes/.MainActivity")
		if _, ok := p.Snapshot().Find(func(e sim.Element) bool { return strings.Contains(e.Text, "héllo") }); ok {
			t.Fatalf("the saved note survived pm clear")
		}
	})

	t.Run("dumpsys power follows the screen", func(t *testing.T) {
		adb(t, server, d, "shell", "input", "keyevent", "SLEEP")
		if out := adb(t, server, d, "shell", "dumpsys power | grep mWakefulness="); out != "mWakefulness=Asleep" {
			t.Fatalf("asleep: %q", out)
		}
		adb(t, server, d, "shell", "input", "keyevent", "224")
		if out := adb(t, server, d, "shell", "dumpsys power | grep mWakefulness="); out != "mWakefulness=Awake" {
			t.Fatalf("awake: %q", out)
		}
	})
}

// TestKillAndRestart: a killed daemon goes offline (or away) in the real
// server; restarted on its port it is a device again and answers.
func TestKillAndRestart(t *testing.T) {
	server := testutil.ADBServer(t)
	d := device(t, server, adbsim.Options{})
	d.Kill()
	if state := testutil.ADBState(t, server, d.Serial()); state == "device" {
		// The server notices the dropped socket at once; wait for it.
		for state == "device" {
			state = testutil.ADBState(t, server, d.Serial())
		}
	}
	if _, err := testutil.ADB(t, server, "-s", d.Serial(), "shell", "true"); err == nil {
		t.Fatalf("adb shell on a killed daemon succeeded")
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.ConnectADB(t, server, d.Serial())
	if out := adb(t, server, d, "shell", "echo", "back"); out != "back" {
		t.Fatalf("after restart: %q", out)
	}
}

// TestAuthExchange: a daemon that asks for AUTH, as a phone does, is
// still connected by the real server (which signs the token).
func TestAuthExchange(t *testing.T) {
	server := testutil.ADBServer(t)
	d := device(t, server, adbsim.Options{RequireAuth: true})
	if out := adb(t, server, d, "shell", "echo", "signed"); out != "signed" {
		t.Fatalf("echo = %q", out)
	}
}
