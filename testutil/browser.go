package testutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// envChromium names the Chromium (or Chrome) binary; unset, chromium
	// or chromium-browser is looked up on PATH.
	envChromium = "PHONEFLEET_CHROMIUM"
	// envBrowserTests set to "skip" skips the browser tests on a machine
	// without a Chromium instead of failing them.
	envBrowserTests = "PHONEFLEET_TEST_BROWSER"
	// envArtefacts is the directory screenshots are saved in.
	envArtefacts = "PHONEFLEET_ARTEFACTS"
	// BrowserWidth and BrowserHeight are the window's size: the console
	// must be readable at 1280×800.
	BrowserWidth, BrowserHeight = 1280, 800
	// browserStartTimeout bounds starting the browser and opening its tab.
	browserStartTimeout = time.Minute
	// browserDeadlineMargin is kept between the browser context's deadline
	// and the test binary's, so a hung page fails the test with what it
	// was doing rather than ending the binary with a panic.
	browserDeadlineMargin = 30 * time.Second
	// screenshotTimeout bounds taking one screenshot.
	screenshotTimeout = 30 * time.Second
)

// ChromiumPath returns the Chromium binary the browser tests drive, or
// fails the test with how to get one. It is PHONEFLEET_CHROMIUM when set
// (a path or a name on PATH, e.g. Google Chrome on a Mac), else chromium
// or chromium-browser on PATH. `make test` installs Debian's chromium
// package when missing (scripts/ensure-chromium.sh).
// PHONEFLEET_TEST_BROWSER=skip skips tests that need it instead, for
// machines that cannot have it.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser"}
	if p := os.Getenv(envChromium); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(envBrowserTests) == "skip" {
		t.Skipf("no Chromium (%s) and %s=skip", strings.Join(names, ", "), envBrowserTests)
	}
	t.Fatalf("no Chromium: looked for %s; run `make test` (it installs Debian's chromium package as root), "+
		"or install it (Debian: apt-get install chromium; elsewhere Chromium or Google Chrome, named by %s); "+
		"%s=skip skips these tests", strings.Join(names, ", "), envChromium, envBrowserTests)
	return ""
}

// browserKey keys a test's *browserState in the context Browser returns.
type browserKey struct{}

// browserState is what the page said while a test drove it.
type browserState struct {
	t      testing.TB
	mu     sync.Mutex
	done   bool     // the test has ended: log nothing more
	lines  []string // every console message, exception and log entry
	errors []string // uncaught exceptions and unhandled rejections
}

// note records one line of the page's output and logs it on the test.
func (s *browserState) note(line string, isError bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.lines = append(s.lines, line)
	if isError {
		s.errors = append(s.errors, line)
	}
	s.t.Logf("browser: %s", line)
}

// Browser starts a headless Chromium for this test and returns a chromedp
// context on its one tab; run actions on it with chromedp.Run or
// chromedp.Do. The browser has a 1280×800 window and a fresh profile in a
// t.TempDir(), and is stopped when the test ends. Everything the page
// writes to its console, its uncaught exceptions and the browser's log
// entries (failed loads, CSP reports) are logged with t.Logf;
// BrowserErrors returns the uncaught exceptions, and a test that ends with
// an uncaught exception it did not forget (ForgetBrowserErrors) fails.
//
// The context is canceled when the test ends, and its deadline is shortly
// before the test binary's (-timeout), so a page that never gets where a
// test waits fails the test with what it waited for. Bound each wait with
// context.WithTimeout on it; derived contexts share the same tab.
//
// One browser per test: a console test file opens one and runs its steps
// (or subtests) on it. A missing Chromium fails the test (see
// ChromiumPath).
//
// chromedp v0.23's API is generic: actions return their value and
// selectors are typed (a plain string is a DOM search; use chromedp.CSS
// or chromedp.ID; there are no ByQuery options or out-pointers):
//
//	ctx := testutil.Browser(t)
//	wait, cancel := context.WithTimeout(ctx, time.Minute)
//	defer cancel()
//	err := chromedp.Do(wait, chromedp.Navigate(base+"/#/fleet"),
//		chromedp.WaitVisible(chromedp.CSS("ul.fleet")),
//		chromedp.Click(chromedp.CSS("li.device-card a")))
//	text, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS("#main h1")))
//	n, err := chromedp.Run(wait, chromedp.Evaluate[int](`document.images.length`))
//	ids, err := chromedp.Run(wait, chromedp.Poll[[]string](`(() => { … return ready ? ids : false; })()`))
//	url, err := chromedp.Run(wait, chromedp.Location())
func Browser(t testing.TB) context.Context {
	t.Helper()
	execPath := ChromiumPath(t)
	profile := t.TempDir() // removed after the browser stops (cleanups run last-in first-out)
	output := &SyncBuffer{}
	state := &browserState{t: t}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(execPath),
		chromedp.UserDataDir(profile),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		// Small /dev/shm in containers crashes tabs; keep shared memory in TMPDIR.
		chromedp.Flag("disable-dev-shm-usage", true),
		// A headless tab counts as hidden: keep its timers and frames running.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		// Screenshots with the same colours on every machine.
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(BrowserWidth, BrowserHeight),
		chromedp.CombinedOutput(output),
	)
	logf := func(format string, args ...any) {
		state.mu.Lock()
		defer state.mu.Unlock()
		if !state.done {
			t.Logf("chromedp: "+format, args...)
		}
	}
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(logf), chromedp.WithErrorf(logf))
	t.Cleanup(func() {
		state.mu.Lock()
		state.done = true
		left := append([]string(nil), state.errors...)
		state.mu.Unlock()
		if len(left) > 0 {
			t.Errorf("the page had %d uncaught exception(s) (see the browser: lines above):\n%s",
				len(left), strings.Join(left, "\n"))
		}
		cancelTab() // closes the browser and waits for it
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium's own output (last 4 KiB, D-Bus complaints left out):\n%s", tail(quiet(output.String()), 4096))
		}
	})

	// The first Run starts the browser, whose life is then that of ctx:
	// bound the start with a timer rather than a deadline on ctx.
	timer := time.AfterFunc(browserStartTimeout, cancelTab)
	err := chromedp.Do(ctx)
	if err == nil {
		err = chromedp.Listen(ctx, func(ev any) {
			switch ev := ev.(type) {
			case *runtime.EventConsoleAPICalled:
				state.note(consoleCallLine(ev), false)
			case *runtime.EventExceptionThrown:
				state.note(exceptionLine(ev.ExceptionDetails), true)
			case *log.EventEntryAdded:
				if e := ev.Entry; e != nil {
					line := fmt.Sprintf("log %s %s: %s", e.Level, e.Source, e.Text)
					if e.URL != "" {
						line += " (" + e.URL + ")"
					}
					state.note(line, false)
				}
			}
		})
	}
	if !timer.Stop() && err == nil {
		err = errors.New("the browser took too long to start")
	}
	if err != nil {
		t.Fatalf("starting %s: %v\nits output:\n%s", execPath, err, tail(quiet(output.String()), 4096))
	}

	ctx = context.WithValue(ctx, browserKey{}, state)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-browserDeadlineMargin))
			t.Cleanup(cancel)
		}
	}
	return ctx
}

// BrowserErrors returns the uncaught exceptions and unhandled promise
// rejections of the page so far (as "Uncaught Error: … at URL:line:col"),
// for a test to assert there are none at a point it cares about; the test
// fails at its end anyway while any is left.
func BrowserErrors(ctx context.Context) []string {
	s := stateOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errors...)
}

// ForgetBrowserErrors clears the uncaught exceptions seen so far, for a
// test that provoked one on purpose and has checked it.
func ForgetBrowserErrors(ctx context.Context) {
	s := stateOf(ctx)
	s.mu.Lock()
	s.errors = nil
	s.mu.Unlock()
}

// BrowserConsole returns every line the page wrote so far: console calls
// ("console.log: …"), uncaught exceptions and the browser's log entries
// ("log error network: Failed to load resource: … (URL)").
func BrowserConsole(ctx context.Context) []string {
	s := stateOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// stateOf returns the state Browser put in ctx; ctx must come from Browser.
func stateOf(ctx context.Context) *browserState {
	s, ok := ctx.Value(browserKey{}).(*browserState)
	if !ok {
		panic("testutil: the context does not come from testutil.Browser")
	}
	return s
}

// Screenshot saves a full-page PNG of the browser's tab (the whole
// document, not just the window) as NAME.png in $PHONEFLEET_ARTEFACTS,
// default <module root>/artefacts/console (git-ignored), and returns its
// path. Names are the caller's: use one per page and state, e.g.
// "fleet" or "device-after-tap"; a file of the same name is replaced.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	dir, err := ArtefactsDir()
	if err != nil {
		t.Fatalf("screenshot %q: %v", name, err)
	}
	sctx, cancel := context.WithTimeout(ctx, screenshotTimeout)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %q: %v", name, err)
	}
	path := filepath.Join(dir, artefactName(name)+".png")
	if err := writeFileAtomic(path, png); err != nil {
		t.Fatalf("screenshot %q: %v", name, err)
	}
	t.Logf("screenshot %s", path)
	return path
}

// ArtefactsDir returns (creating it) the directory test artefacts such as
// screenshots are saved in: $PHONEFLEET_ARTEFACTS, else
// <module root>/artefacts/console.
func ArtefactsDir() (string, error) {
	dir := os.Getenv(envArtefacts)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "artefacts", "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// moduleRoot returns the nearest directory at or above the working
// directory (a test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod at or above the working directory; set %s", envArtefacts)
		}
		dir = parent
	}
}

// artefactName keeps letters, digits, '.', '-' and '_' of name, turning
// anything else into '_', and drops a trailing ".png".
func artefactName(name string) string {
	name = strings.TrimSuffix(name, ".png")
	b := []byte(name)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "screenshot"
	}
	return string(b)
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, so a reader never sees half a PNG.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// consoleCallLine renders a console API call as "console.TYPE: args…".
func consoleCallLine(ev *runtime.EventConsoleAPICalled) string {
	parts := make([]string, 0, len(ev.Args))
	for _, a := range ev.Args {
		parts = append(parts, remoteValue(a))
	}
	line := "console." + string(ev.Type) + ": " + strings.Join(parts, " ")
	if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
		f := st.CallFrames[0]
		line += fmt.Sprintf(" (%s:%d:%d)", f.URL, f.LineNumber+1, f.ColumnNumber+1)
	}
	return line
}

// exceptionLine renders an uncaught exception as its text ("Uncaught" or
// "Uncaught (in promise)"), the error's first line and where it was thrown.
func exceptionLine(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "uncaught exception"
	}
	line := d.Text
	if d.Exception != nil {
		first, _, _ := strings.Cut(remoteValue(d.Exception), "\n")
		line += " " + first
	}
	url := d.URL
	if url == "" && d.StackTrace != nil && len(d.StackTrace.CallFrames) > 0 {
		url = d.StackTrace.CallFrames[0].URL
	}
	if url != "" {
		line += fmt.Sprintf(" at %s:%d:%d", url, d.LineNumber+1, d.ColumnNumber+1)
	}
	return strings.TrimSpace(line)
}

// remoteValue renders a console argument or a thrown value: a string as
// itself, anything else as the browser describes it.
func remoteValue(o *runtime.RemoteObject) string {
	if o == nil {
		return "undefined"
	}
	if o.Type == runtime.RemoteObjectTypeString && len(o.Value) > 0 {
		var s string
		if err := json.Unmarshal([]byte(o.Value), &s); err == nil {
			return s
		}
	}
	switch {
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	case o.Description != "":
		return o.Description
	case len(o.Value) > 0:
		return string(o.Value)
	}
	return string(o.Type)
}

// quiet drops the lines of chromium's output that complain about D-Bus,
// which a container or CI machine does not run; they say nothing about a
// failure.
func quiet(output string) string {
	var keep []string
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, "dbus") && !strings.Contains(line, "DBus") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
