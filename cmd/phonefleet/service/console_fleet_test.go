package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/http/apitest"
	"phonefleet/testutil"
)

// fleetSims is how many sim phones the fleet page test starts.
const fleetSims = 3

// consoleScreen is what the fleet page shows of one live screen.
type consoleScreen struct {
	ID string `json:"id"`
	W  int    `json:"w"`
	H  int    `json:"h"`
}

// TestConsoleFleetShowsEveryLiveScreen runs the service in local mode with
// three sim phones and opens the console at / in a real headless
// Chromium. The fleet page (the default route) shows one card per phone,
// each with an <img class="screen" data-device-id=…> that receives the
// phone's MJPEG stream: every image loads a frame of the phone's screen
// size (the stream's 270-pixel width, the phone's aspect), is painted
// on the page (its element screenshot is a picture, not a blank), and is
// live: opening Notes on the leased phone through the API changes that
// image, and the frame then shown is the phone's screen as its
// screenshot route gives it. The leased phone's card says so. Screenshots
// at 1280×800 and at a phone's width are saved as artefacts.
func TestConsoleFleetShowsEveryLiveScreen(t *testing.T) {
	dir := t.TempDir()
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": fmt.Sprint(fleetSims),
	})
	v := apitest.FromHandler(t, a.server.Handler())
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, raw, want)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			v.Check(t, httptest.NewRequest(method, path, strings.NewReader(body)), resp, raw)
		}
		return raw
	}

	// The sim phones register as the service starts; the page lists the
	// fleet once, so wait until the API lists all of them online.
	type device struct {
		DeviceID string `json:"deviceId"`
		Name     string `json:"name"`
		Status   string `json:"status"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
	}
	var devices []device
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var page struct{ Devices []device }
		if err := json.Unmarshal(call("GET", "/v1/devices?limit=200", "", http.StatusOK), &page); err != nil {
			t.Fatal(err)
		}
		online := 0
		for _, d := range page.Devices {
			if d.Status == "online" {
				online++
			}
		}
		if online == fleetSims && len(page.Devices) == fleetSims {
			devices = page.Devices
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API lists %+v; want %d sim phones online", page.Devices, fleetSims)
		}
	}
	ids := make([]string, 0, len(devices))
	for _, d := range devices {
		if d.Width <= 0 || d.Height <= 0 {
			t.Fatalf("device %+v has no screen size", d)
		}
		ids = append(ids, d.DeviceID)
	}
	slices.Sort(ids)
	leased := devices[0]
	var lease struct{ LeaseID string }
	if err := json.Unmarshal(call("POST", "/v1/devices/"+leased.DeviceID+"/lease", `{"ttlSeconds":600}`, http.StatusCreated), &lease); err != nil || lease.LeaseID == "" {
		t.Fatalf("lease: %v %+v", err, lease)
	}

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	if err := chromedp.Do(wait,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("ul.fleet")),
	); err != nil {
		t.Fatalf("open the console: %v\nconsole: %q", err, testutil.BrowserConsole(ctx))
	}
	// Every card's image has shown a frame.
	screens, err := chromedp.Run(wait, chromedp.Poll[[]consoleScreen](`(() => {
		const imgs = [...document.querySelectorAll('ul.fleet li.device-card img.screen')];
		if (imgs.length !== `+fmt.Sprint(fleetSims)+` || !imgs.every((i) => i.complete && i.naturalWidth > 0)) return false;
		return imgs.map((i) => ({ id: i.dataset.deviceId, w: i.naturalWidth, h: i.naturalHeight }));
	})()`, chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		t.Fatalf("the fleet page never showed %d live screens: %v\nconsole: %q", fleetSims, err, testutil.BrowserConsole(ctx))
	}
	var listed []string
	for _, s := range screens {
		listed = append(listed, s.ID)
		var d device
		for _, x := range devices {
			if x.DeviceID == s.ID {
				d = x
			}
		}
		wantW := min(270, d.Width)
		wantH := d.Height * wantW / d.Width
		if s.W != wantW || s.H < wantH-1 || s.H > wantH+1 {
			t.Errorf("screen of %s is %d×%d; want %d×%d (the phone's %d×%d at the page's 270-pixel stream)",
				s.ID, s.W, s.H, wantW, wantH, d.Width, d.Height)
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, ids) {
		t.Fatalf("the page shows screens of %v; want every device %v", listed, ids)
	}

	// Each image is painted: its element screenshot is a portrait picture
	// with many colours, not an empty box.
	for _, id := range ids {
		sel := chromedp.CSS(`img.screen[data-device-id="` + id + `"]`)
		b, err := chromedp.Run(wait, chromedp.Screenshot(sel))
		if err != nil {
			t.Fatalf("screenshot of %s's screen: %v", id, err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("screenshot of %s's screen: %v", id, err)
		}
		size := img.Bounds().Size()
		if size.X < 100 || size.Y <= size.X {
			t.Errorf("the painted screen of %s is %v; want a portrait phone screen", id, size)
		}
		if n := testutil.Colours(img, 1000); n < 16 {
			t.Errorf("the painted screen of %s has %d colours; want a phone's screen, not a blank", id, n)
		}
	}

	// Each card tells whether its phone is leased.
	for _, d := range devices {
		holder, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(`li.device-card[data-device-id="`+d.DeviceID+`"] .holder`)))
		if err != nil {
			t.Fatal(err)
		}
		want := "free"
		if d.DeviceID == leased.DeviceID {
			want = "leased by"
		}
		if !strings.HasPrefix(holder, want) {
			t.Errorf("card of %s says %q; want %q…", d.DeviceID, holder, want)
		}
	}
	testutil.Screenshot(t, ctx, "fleet")

	// Live: open Notes on the leased phone; its image changes to the
	// phone's new screen. shown(id) is the picture an image shows now, as
	// a PNG data URL (its blob is the page's own, so the canvas is clean),
	// or null between two frames (the next one still loading).
	shown := `(id) => {
		const img = document.querySelector('img.screen[data-device-id="' + id + '"]');
		if (!img.complete || img.naturalWidth === 0) return null;
		const c = document.createElement('canvas');
		c.width = img.naturalWidth; c.height = img.naturalHeight;
		c.getContext('2d').drawImage(img, 0, 0);
		return c.toDataURL('image/png');
	}`
	before, err := chromedp.Run(wait, chromedp.PollFunction[string](shown, chromedp.WithPollingArgs(leased.DeviceID)))
	if err != nil {
		t.Fatal(err)
	}
	call("POST", "/v1/devices/"+leased.DeviceID+"/actions", `{"action":"open_app","arguments":{"package":"com.example.notes"},`+
		`"idempotencyKey":"console-fleet-open-notes","leaseId":"`+lease.LeaseID+`"}`, http.StatusOK)
	after, err := chromedp.Run(wait, chromedp.PollFunction[string](`(id, before) => { const now = (`+shown+`)(id); return now !== before ? now : null; }`,
		chromedp.WithPollingArgs(leased.DeviceID, before), chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		t.Fatalf("the leased phone's image never changed after Notes opened: %v", err)
	}
	shownNow, err := testutil.DecodeDataURL(after)
	if err != nil {
		t.Fatal(err)
	}
	shownBefore, err := testutil.DecodeDataURL(before)
	if err != nil {
		t.Fatal(err)
	}
	want, err := png.Decode(bytes.NewReader(call("GET", "/v1/devices/"+leased.DeviceID+"/screenshot?maxWidth=270", "", http.StatusOK)))
	if err != nil {
		t.Fatal(err)
	}
	if d := testutil.MeanDiff(shownNow, want); d > 8 {
		t.Errorf("the page's frame differs from the phone's screenshot by %.1f per channel on average; want the same screen", d)
	}
	if d := testutil.MeanDiff(shownBefore, want); d <= 8 {
		t.Errorf("the frame before Notes opened already matched Notes (%.1f): the test proves nothing", d)
	}
	testutil.Screenshot(t, ctx, "fleet-after-notes")

	// A phone-sized window: the grid still shows every screen.
	if err := chromedp.Do(wait, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`document.querySelectorAll('ul.fleet img.screen').length === `+fmt.Sprint(fleetSims)+
		` && document.documentElement.scrollWidth <= 390`)); err != nil {
		t.Errorf("at a phone's width the fleet page scrolls sideways or lost screens: %v", err)
	}
	testutil.Screenshot(t, ctx, "fleet-phone")

	// #/devices, the parent of every phone's page, is the fleet too.
	if _, err := chromedp.Run(wait, chromedp.Evaluate[bool](`location.hash = '#/devices'; true`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`location.hash === '#/devices' && document.querySelector('#main h1')?.textContent === 'Fleet'`+
		` && document.querySelectorAll('ul.fleet img.screen').length === `+fmt.Sprint(fleetSims))); err != nil {
		t.Errorf("#/devices does not show the fleet: %v", err)
	}

	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}
