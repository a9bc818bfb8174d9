package testutil

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// harnessPage is a tiny page for the harness: a button that writes text
// and logs, a button that throws, a coloured box and a document taller
// than the window; served with harnessPolicy, like the console.
const harnessPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>harness</title>
<link rel="stylesheet" href="/harness.css"></head>
<body>
  <h1>Harness</h1>
  <button id="hello" type="button">Say hello</button>
  <button id="throw" type="button">Throw</button>
  <p id="out" aria-live="polite"></p>
  <div id="tall"></div>
  <div id="box"></div>
  <script type="module" src="/harness.js"></script>
</body></html>`

// harnessScript is the page's module.
const harnessScript = `document.getElementById('hello').addEventListener('click', () => {
  document.getElementById('out').textContent = 'hello, browser';
  console.log('clicked', 42);
});
document.getElementById('throw').addEventListener('click', () => {
  throw new Error('boom on purpose');
});
`

// harnessPolicy is the console's kind of Content-Security-Policy (no
// inline script or style, no eval), so the harness's waits are proved to
// work under it.
const harnessPolicy = "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; connect-src 'self'"

// harnessStyle is the page's style sheet.
const harnessStyle = `body { margin: 0; font-family: sans-serif; background: #fff; }
#box { position: absolute; left: 100px; top: 1500px; width: 200px; height: 100px; background: rgb(200, 30, 60); }
#tall { height: 2000px; }
`

// TestBrowserDrivesAPage drives a real headless Chromium against a page
// served by httptest: a click changes the page and its console line is
// collected, an uncaught exception is reported by BrowserErrors, and a
// screenshot is a full-page PNG whose pixels are the page's.
func TestBrowserDrivesAPage(t *testing.T) {
	artefacts := t.TempDir()
	t.Setenv(envArtefacts, artefacts)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", harnessPolicy)
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, harnessPage)
		case "/harness.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			fmt.Fprint(w, harnessScript)
		case "/harness.css":
			w.Header().Set("Content-Type", "text/css; charset=utf-8")
			fmt.Fprint(w, harnessStyle)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	ctx := Browser(t)
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	if err := chromedp.Do(wait,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#hello")),
		chromedp.Click(chromedp.CSS("#hello")),
	); err != nil {
		t.Fatalf("open the page and click: %v", err)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`document.querySelector('#out').textContent === 'hello, browser'`)); err != nil {
		t.Fatalf("the click did not write its text: %v", err)
	}
	text, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS("#out")))
	if err != nil || text != "hello, browser" {
		t.Fatalf("text of #out = %q, %v; want %q", text, err, "hello, browser")
	}
	if got := BrowserConsole(ctx); !slices.ContainsFunc(got, func(l string) bool {
		return strings.HasPrefix(l, "console.log: clicked 42")
	}) {
		t.Errorf("console lines %q lack the click's console.log", got)
	}
	if got := BrowserErrors(ctx); len(got) != 0 {
		t.Fatalf("BrowserErrors before any throw = %q", got)
	}

	// The exception is reported in order: once a later evaluation has
	// answered, its event has been seen.
	if err := chromedp.Do(wait, chromedp.Click(chromedp.CSS("#throw"))); err != nil {
		t.Fatalf("click throw: %v", err)
	}
	if _, err := chromedp.Run(wait, chromedp.Evaluate[bool](`true`)); err != nil {
		t.Fatal(err)
	}
	errs := BrowserErrors(ctx)
	if len(errs) != 1 || !strings.Contains(errs[0], "Uncaught Error: boom on purpose") || !strings.Contains(errs[0], srv.URL) {
		t.Fatalf("BrowserErrors = %q; want the one uncaught 'boom on purpose' with where it was thrown", errs)
	}
	ForgetBrowserErrors(ctx)
	if got := BrowserErrors(ctx); len(got) != 0 {
		t.Fatalf("BrowserErrors after ForgetBrowserErrors = %q", got)
	}

	path := Screenshot(t, ctx, "harness page/1")
	if want := filepath.Join(artefacts, "harness_page_1.png"); path != want {
		t.Errorf("screenshot path = %s; want %s", path, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	size := img.Bounds().Size()
	if size.X != BrowserWidth || size.Y < 1600 {
		t.Fatalf("screenshot is %v; want %d wide and the whole document (at least 1600 high), not just the %d-high window",
			size, BrowserWidth, BrowserHeight)
	}
	// Inside the box (below the window's first screen) and beside it.
	checkPixel := func(x, y int, want [3]uint32) {
		t.Helper()
		r, g, b, _ := img.At(x, y).RGBA()
		got := [3]uint32{r >> 8, g >> 8, b >> 8}
		for i := range got {
			if d := int(got[i]) - int(want[i]); d < -3 || d > 3 {
				t.Errorf("pixel (%d,%d) = rgb%v; want rgb%v", x, y, got, want)
				return
			}
		}
	}
	checkPixel(200, 1550, [3]uint32{200, 30, 60})
	checkPixel(50, 1550, [3]uint32{255, 255, 255})
}

// fakeTB records how ChromiumPath ends a test without ending this one.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestChromiumPathMissing: without a Chromium the test fails with how to
// get one, or is skipped when PHONEFLEET_TEST_BROWSER=skip.
func TestChromiumPathMissing(t *testing.T) {
	t.Setenv(envChromium, filepath.Join(t.TempDir(), "no-such-chromium"))
	run := func() *fakeTB {
		f := &fakeTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			ChromiumPath(f)
		}()
		<-done
		return f
	}

	t.Setenv(envBrowserTests, "")
	f := run()
	for _, want := range []string{"no-such-chromium", "apt-get install chromium", "make test", "PHONEFLEET_TEST_BROWSER=skip", "PHONEFLEET_CHROMIUM"} {
		if !strings.Contains(f.failed, want) {
			t.Errorf("failure %q does not mention %q", f.failed, want)
		}
	}

	t.Setenv(envBrowserTests, "skip")
	f = run()
	if f.failed != "" || !strings.Contains(f.skipped, "PHONEFLEET_TEST_BROWSER=skip") {
		t.Errorf("with skip: failed %q, skipped %q; want a skip", f.failed, f.skipped)
	}
}

// TestArtefactsDirDefault: without PHONEFLEET_ARTEFACTS screenshots go to
// artefacts/console at the module root.
func TestArtefactsDirDefault(t *testing.T) {
	t.Setenv(envArtefacts, "")
	dir, err := ArtefactsDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..") // testutil is one level below the root
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "artefacts", "console"); dir != want {
		t.Errorf("ArtefactsDir() = %s; want %s", dir, want)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("ArtefactsDir did not create %s: %v", dir, err)
	}
}

// TestPictureHelpers: a data URL decodes to its picture; colours and the
// mean difference tell a picture from a blank and two pictures apart.
func TestPictureHelpers(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 4, 2))
	for x := 0; x < 4; x++ {
		img.Set(x, 0, color.RGBA{uint8(60 * x), 0, 0, 255})
		img.Set(x, 1, color.RGBA{0, 0, 200, 255})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDataURL("data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if d := MeanDiff(got, img); d != 0 {
		t.Errorf("decoded picture differs by %v", d)
	}
	if n := Colours(got, 100); n != 5 {
		t.Errorf("Colours = %d; want 5", n)
	}
	if n := Colours(got, 3); n != 3 {
		t.Errorf("Colours with limit 3 = %d; want 3", n)
	}
	blank := image.NewRGBA(image.Rect(0, 0, 4, 2)) // all transparent black
	// Row 0: 0+60+120+180 over 12 channel values; row 1: 200 per blue.
	if d, want := MeanDiff(img, blank), (0.0+60+120+180+4*200)/24; d != want {
		t.Errorf("MeanDiff = %v; want %v", d, want)
	}
	if d := MeanDiff(img, image.NewRGBA(image.Rect(0, 0, 2, 2))); d != 255 {
		t.Errorf("MeanDiff of different sizes = %v; want 255", d)
	}
	for _, bad := range []string{"data:,", "data:text/plain;base64,aGk=", "data:image/png;base64,!!!", "data:image/png;base64,aGk="} {
		if _, err := DecodeDataURL(bad); err == nil {
			t.Errorf("DecodeDataURL(%q) decoded", bad)
		}
	}
}
