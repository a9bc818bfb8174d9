package service

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
)

// deviceSeeded is how many receipts the device page test records through
// the API before opening the page: more than one timeline page (20), so
// "More" has something to show.
const deviceSeeded = 22

// deviceUIElement is the part of a UI snapshot's element tree the test reads.
type deviceUIElement struct {
	Ref        string            `json:"ref"`
	Package    string            `json:"package"`
	ResourceID string            `json:"resourceId"`
	Text       string            `json:"text"`
	Bounds     []int             `json:"bounds"`
	Children   []deviceUIElement `json:"children"`
}

// find returns the first element (depth first) for which match is true.
func (e deviceUIElement) find(match func(deviceUIElement) bool) (deviceUIElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := c.find(match); ok {
			return f, true
		}
	}
	return deviceUIElement{}, false
}

// deviceReceipt is the part of a receipt the test reads.
type deviceReceipt struct {
	IdempotencyKey string         `json:"idempotencyKey"`
	State          string         `json:"state"`
	Action         string         `json:"action"`
	Arguments      map[string]any `json:"arguments"`
	Actor          struct {
		UserID string `json:"userId"`
	} `json:"actor"`
	Result *struct {
		TargetID   string `json:"targetId"`
		Foreground string `json:"foreground"`
	} `json:"result"`
	Frames struct {
		Before string `json:"before"`
		After  string `json:"after"`
	} `json:"frames"`
}

// pageRect is an element's box in the page, in CSS pixels.
type pageRect struct {
	X, Y, W, H float64
}

// shownReceipt is what the timeline shows of its newest receipt.
type shownReceipt struct {
	Key    string   `json:"key"`
	Frames []string `json:"frames"`
}

// TestConsoleDevicePage drives one sim phone from its console page
// (#/devices/{id}) in a real headless Chromium, against the service in
// local mode:
//   - the page shows the phone's live screen, its status and that nobody
//     holds it, and its receipts newest first, one page of 20 and the rest
//     under "More" (the cursor), in the feed's order;
//   - "Take lease" takes the lease (GET /v1/leases lists it);
//   - a click on the Notes icon ON THE LIVE SCREEN (its bounds from the
//     snapshot API, converted to the displayed image) taps the phone at
//     those device pixels: Notes is then the foreground app in a fresh
//     snapshot, and the tap's receipt is at the top of the timeline with
//     its frames before and after both loaded;
//   - a drag on the screen is a swipe between the converted points;
//   - with the element overlay on, pressing the note field's box taps it
//     by its ref; text sent through the page's text box is then in the
//     field (snapshot API) and on the live screen (the image the page
//     shows, where the field is, changed as the phone's screenshot did);
//   - the Back key button presses BACK; "Release" releases the lease and
//     the controls are disabled again; a click on the screen then acts on
//     nothing;
//   - the page reads at a phone's width; another organisation's device and
//     an unknown id both show the API's not-found answer, alike.
//
// Each state is saved as a screenshot (artefacts/console/device-*.png).
func TestConsoleDevicePage(t *testing.T) {
	dir := t.TempDir()
	// The service's log is shown when the test fails.
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's log:\n%s", logs.String())
		}
	})
	a, base := startAppLogging(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1",
	}, slog.New(slog.NewTextHandler(logs, nil)))
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
	decode := func(raw []byte, into any) {
		t.Helper()
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatalf("decode %.200s: %v", raw, err)
		}
	}

	// The sim phone registers as the service starts.
	type device struct {
		DeviceID string `json:"deviceId"`
		Name     string `json:"name"`
		Status   string `json:"status"`
		Leased   bool   `json:"leased"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
	}
	var dev device
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var page struct{ Devices []device }
		decode(call("GET", "/v1/devices", "", http.StatusOK), &page)
		if len(page.Devices) == 1 && page.Devices[0].Status == "online" {
			dev = page.Devices[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API lists %+v; want one sim phone online", page.Devices)
		}
	}
	if dev.Width <= 0 || dev.Height <= 0 {
		t.Fatalf("device %+v has no screen size", dev)
	}
	devPath := "/v1/devices/" + dev.DeviceID

	// Receipts from before the page: more than one timeline page.
	var seedLease struct{ LeaseID string }
	decode(call("POST", devPath+"/lease", `{}`, http.StatusCreated), &seedLease)
	for i := range deviceSeeded {
		call("POST", devPath+"/actions", fmt.Sprintf(`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"device-page-seed-%02d","leaseId":%q}`,
			i, seedLease.LeaseID), http.StatusOK)
	}
	call("DELETE", devPath+"/lease?leaseId="+seedLease.LeaseID, "", http.StatusNoContent)

	receipts := func() []deviceReceipt {
		t.Helper()
		var page struct{ Receipts []deviceReceipt }
		decode(call("GET", "/v1/receipts?limit=200&deviceId="+dev.DeviceID, "", http.StatusOK), &page)
		return page.Receipts
	}
	receipt := func(key string) deviceReceipt {
		t.Helper()
		var rc deviceReceipt
		decode(call("GET", "/v1/receipts/"+key, "", http.StatusOK), &rc)
		return rc
	}
	snapshot := func() deviceUIElement {
		t.Helper()
		var s struct{ Root deviceUIElement }
		decode(call("GET", devPath+"/snapshot", "", http.StatusOK), &s)
		return s.Root
	}
	byID := func(id string) func(deviceUIElement) bool {
		return func(e deviceUIElement) bool { return e.ResourceID == id }
	}
	screenshot := func() image.Image {
		t.Helper()
		img, err := png.Decode(bytes.NewReader(call("GET", devPath+"/screenshot?maxWidth=540", "", http.StatusOK)))
		if err != nil {
			t.Fatal(err)
		}
		return img
	}

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	// waitFor polls a JavaScript expression in the page until it is truthy
	// and returns its value.
	waitFor := func(what, expr string) json.RawMessage {
		t.Helper()
		got, err := chromedp.Run(wait, chromedp.Poll[json.RawMessage](expr, chromedp.WithPollingTimeout(60*time.Second)))
		if err != nil {
			// What the page shows: its toasts and its newest receipts.
			state, _ := chromedp.Run(wait, chromedp.Evaluate[string](`JSON.stringify({
				toasts: [...document.querySelectorAll('#toasts .toast')].map((t) => t.textContent),
				typeText: document.querySelector('#type-text') && document.querySelector('#type-text').value,
				receipts: [...document.querySelectorAll('ol.receipt-timeline > li.receipt')].slice(0, 3).map((l) => l.innerText),
			})`))
			t.Fatalf("%s: %v\npage: %s\nbrowser: %q", what, err, state, testutil.BrowserConsole(ctx))
		}
		return got
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(wait, steps...); err != nil {
			t.Fatalf("%s: %v\nbrowser: %q", what, err, testutil.BrowserConsole(ctx))
		}
	}
	// newest waits until the timeline's first receipt is a committed
	// action other than the one before and its frames have loaded, and
	// returns its key and frame ids.
	newest := func(action, previous string) shownReceipt {
		t.Helper()
		var s shownReceipt
		raw := waitFor("the timeline shows the "+action, `(() => {
			const li = document.querySelector('ol.receipt-timeline > li.receipt');
			if (!li || li.dataset.action !== '`+action+`' || li.dataset.state !== 'committed' || li.dataset.key === '`+previous+`') return false;
			const imgs = [...li.querySelectorAll('img.frame')];
			if (imgs.length !== 2 || !imgs.every((i) => i.complete && i.naturalWidth > 0)) return false;
			return { key: li.dataset.key, frames: imgs.map((i) => i.dataset.frameId) };
		})()`)
		decode(raw, &s)
		return s
	}
	screenRect := func() pageRect {
		t.Helper()
		var r pageRect
		decode(waitFor("the live screen's box", `(() => {
			const img = document.querySelector('.screen-wrap img.screen');
			img.scrollIntoView({ block: 'nearest' });
			const r = img.getBoundingClientRect();
			return r.width > 0 && { X: r.left, Y: r.top, W: r.width, H: r.height };
		})()`), &r)
		return r
	}
	// toPage converts device pixels to the page's coordinates on the live
	// screen, as a person's pointer would be.
	toPage := func(r pageRect, x, y int) (float64, float64) {
		return r.X + (float64(x)+0.5)*r.W/float64(dev.Width), r.Y + (float64(y)+0.5)*r.H/float64(dev.Height)
	}
	near := func(what string, got any, want int) {
		t.Helper()
		f, ok := got.(float64)
		if !ok || int(f) < want-3 || int(f) > want+3 {
			t.Errorf("%s = %v; want %d (± 3 device pixels)", what, got, want)
		}
	}

	// liveShows waits for new frames of the page's live screen until one
	// matches want inside box (and is nearer to it than to was), and fails
	// the test if none does within 30 s.
	liveShows := func(what string, want, was image.Image, box image.Rectangle) {
		t.Helper()
		shown := `(last) => {
			const img = document.querySelector('.screen-wrap img.screen');
			if (!img || !img.complete || img.naturalWidth === 0 || img.src === last) return false;
			const c = document.createElement('canvas');
			c.width = img.naturalWidth; c.height = img.naturalHeight;
			c.getContext('2d').drawImage(img, 0, 0);
			return { src: img.src, png: c.toDataURL('image/png') };
		}`
		var frame struct{ Src, PNG string }
		for deadline := time.Now().Add(30 * time.Second); ; {
			raw, err := chromedp.Run(wait, chromedp.PollFunction[json.RawMessage](shown, chromedp.WithPollingArgs(frame.Src)))
			if err != nil {
				t.Fatalf("the live screen stopped before it showed %s: %v", what, err)
			}
			decode(raw, &frame)
			live := deviceDataURL(t, frame.PNG)
			d := deviceRegionDiff(live, want, box)
			if d < 8 && d < deviceRegionDiff(live, was, box) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the live screen never showed %s: it still differs from the phone's screenshot by %.1f", what, d)
			}
		}
	}

	// ---- The page: live screen, nobody holds the phone, one timeline page.
	do("open the device page",
		chromedp.Navigate(base+"/#/devices/"+dev.DeviceID),
		chromedp.WaitVisible(chromedp.CSS(".screen-wrap img.screen")))
	waitFor("the live screen shows a frame and the timeline its first page", `(() => {
		const img = document.querySelector('.screen-wrap img.screen');
		return img.complete && img.naturalWidth > 0 &&
			document.querySelectorAll('ol.receipt-timeline > li.receipt').length === 20 &&
			!document.querySelector('button.timeline-more').hidden &&
			document.querySelector('.lease-panel').dataset.lease === 'free';
	})()`)
	if h1, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS("h1"))); err != nil || h1 != dev.Name {
		t.Errorf("the page's heading is %q (%v); want the device's name %q", h1, err, dev.Name)
	}
	testutil.Screenshot(t, ctx, "device")

	do("press More", chromedp.Click(chromedp.CSS("button.timeline-more")))
	var keys []string
	decode(waitFor("More shows the older receipts", `(() => {
		const lis = [...document.querySelectorAll('ol.receipt-timeline > li.receipt')];
		return lis.length === `+fmt.Sprint(deviceSeeded)+` && document.querySelector('button.timeline-more').hidden && lis.map((l) => l.dataset.key);
	})()`), &keys)
	feed := receipts()
	if len(feed) != deviceSeeded {
		t.Fatalf("the feed has %d receipts; want %d", len(feed), deviceSeeded)
	}
	for i, rc := range feed {
		if keys[i] != rc.IdempotencyKey {
			t.Fatalf("the timeline lists %q; want the feed's order, newest first (receipt %d is %s)", keys, i, rc.IdempotencyKey)
		}
	}

	// ---- Take the lease.
	do("take the lease", chromedp.Click(chromedp.CSS("button.lease-take")))
	waitFor("the page holds the lease", `document.querySelector('.lease-panel').dataset.lease === 'mine' && !document.querySelector('#type-text').disabled`)
	var leases struct {
		Leases []struct {
			LeaseID string `json:"leaseId"`
			Holder  struct {
				UserID string `json:"userId"`
			} `json:"holder"`
		} `json:"leases"`
	}
	decode(call("GET", "/v1/leases?deviceId="+dev.DeviceID, "", http.StatusOK), &leases)
	if len(leases.Leases) != 1 || leases.Leases[0].Holder.UserID == "" {
		t.Fatalf("leases of the device after Take lease: %+v; want the operator's one", leases.Leases)
	}
	if shown, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(".lease-panel"))); err != nil || !strings.Contains(shown, leases.Leases[0].LeaseID) {
		t.Errorf("the lease panel says %q (%v); want the lease %s", shown, err, leases.Leases[0].LeaseID)
	}
	testutil.Screenshot(t, ctx, "device-leased")

	// ---- Renew it for 15 minutes.
	do("renew for 15 minutes", chromedp.SetValue(chromedp.CSS("#lease-ttl"), "900"), chromedp.Click(chromedp.CSS("button.lease-renew")))
	waitFor("the renewal is told", `[...document.querySelectorAll('#toasts .toast.ok')].some((t) => t.textContent.includes('Lease renewed'))`)
	var renewed struct {
		Leases []struct {
			LeaseID    string    `json:"leaseId"`
			AcquiredAt time.Time `json:"acquiredAt"`
			ExpiresAt  time.Time `json:"expiresAt"`
		} `json:"leases"`
	}
	decode(call("GET", "/v1/leases?deviceId="+dev.DeviceID, "", http.StatusOK), &renewed)
	if len(renewed.Leases) != 1 || renewed.Leases[0].LeaseID != leases.Leases[0].LeaseID ||
		renewed.Leases[0].ExpiresAt.Sub(renewed.Leases[0].AcquiredAt) < 10*time.Minute {
		t.Fatalf("leases after renewing for 15 minutes: %+v; want the same lease, expiring about 15 minutes on", renewed.Leases)
	}
	var shownExpiry string
	decode(waitFor("the panel shows the new expiry", `(() => {
		const t = document.querySelector('.lease-panel time');
		return t && new Date(t.dateTime).getTime() === new Date('`+renewed.Leases[0].ExpiresAt.Format(time.RFC3339Nano)+`').getTime() && t.dateTime;
	})()`), &shownExpiry)

	// ---- Click the Notes icon on the live screen.
	var home struct {
		Elements []struct {
			Ref     string `json:"ref"`
			Text    string `json:"text"`
			Package string `json:"package"`
			Bounds  []int  `json:"bounds"`
		} `json:"elements"`
	}
	decode(call("GET", devPath+"/snapshot?elements=interactive", "", http.StatusOK), &home)
	var icon []int
	for _, e := range home.Elements {
		if e.Text == "Notes" && strings.Contains(e.Package, "launcher") {
			icon = e.Bounds
		}
	}
	if icon == nil {
		t.Fatalf("the home screen has no Notes icon: %+v", home.Elements)
	}
	cx, cy := (icon[0]+icon[2])/2, (icon[1]+icon[3])/2
	r := screenRect()
	px, py := toPage(r, cx, cy)
	do("click the Notes icon on the live screen", chromedp.MouseClickXY(px, py))
	tap := newest("tap", "")
	rc := receipt(tap.Key)
	near("the tap's x", rc.Arguments["x"], cx)
	near("the tap's y", rc.Arguments["y"], cy)
	if rc.State != "committed" || rc.Result == nil || rc.Result.Foreground != "com.example.notes" || rc.Actor.UserID == "" {
		t.Fatalf("the tap's receipt is %+v; want a committed tap by the operator that opened Notes", rc)
	}
	if rc.Frames.Before == "" || rc.Frames.After == "" || tap.Frames[0] != rc.Frames.Before || tap.Frames[1] != rc.Frames.After {
		t.Errorf("the timeline shows frames %q for frames %+v; want before and after side by side", tap.Frames, rc.Frames)
	}
	if root := snapshot(); root.Package != "com.example.notes" {
		t.Fatalf("after the click the foreground app is %q; want Notes", root.Package)
	}
	testutil.Screenshot(t, ctx, "device-notes-open")

	// ---- Drag to swipe.
	r = screenRect()
	x1, y1 := toPage(r, dev.Width/2, dev.Height*3/4)
	x2, y2 := toPage(r, dev.Width/2, dev.Height/2)
	held := func(p *input.DispatchMouseEventParams) { p.Button, p.Buttons = input.MouseButtonLeft, 1 }
	do("drag on the live screen",
		chromedp.MouseEvent(chromedp.MousePressed, x1, y1, held, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x1, (y1+y2)/2, held),
		chromedp.MouseEvent(chromedp.MouseMoved, x2, y2, held),
		chromedp.MouseEvent(chromedp.MouseReleased, x2, y2, held, chromedp.ClickCount(1)))
	swipe := newest("swipe", "")
	rc = receipt(swipe.Key)
	near("the swipe's x1", rc.Arguments["x1"], dev.Width/2)
	near("the swipe's y1", rc.Arguments["y1"], dev.Height*3/4)
	near("the swipe's x2", rc.Arguments["x2"], dev.Width/2)
	near("the swipe's y2", rc.Arguments["y2"], dev.Height/2)

	// ---- The element overlay: tap the note field by its ref.
	field, ok := snapshot().find(byID("com.example.notes:id/input"))
	if !ok {
		t.Fatal("Notes shows no note field")
	}
	do("show the elements", chromedp.Click(chromedp.CSS("button.overlay-toggle")))
	box := `.element-overlay button.element-box[data-element-id="com.example.notes:id/input"]`
	do("the overlay draws the note field", chromedp.WaitVisible(chromedp.CSS(box)))
	if pressed, err := chromedp.Run(wait, chromedp.AttributeValue(chromedp.CSS("button.overlay-toggle"), "aria-pressed")); err != nil || pressed.Value != "true" {
		t.Errorf("the overlay toggle's aria-pressed is %q (%v); want true", pressed.Value, err)
	}
	testutil.Screenshot(t, ctx, "device-overlay")
	do("press the note field's box", chromedp.Click(chromedp.CSS(box)))
	focus := newest("tap", tap.Key)
	rc = receipt(focus.Key)
	if rc.Arguments["ref"] != field.Ref || rc.Result == nil || rc.Result.TargetID != "com.example.notes:id/input" {
		t.Fatalf("the box's tap is %+v; want a tap by ref %s on the note field", rc, field.Ref)
	}
	do("hide the elements", chromedp.Click(chromedp.CSS("button.overlay-toggle")),
		chromedp.WaitNotVisible(chromedp.CSS(".element-overlay")))

	// ---- Type through the page's text box.
	const text = "Hello from the console"
	before := screenshot()
	do("type and send", chromedp.SendKeys(chromedp.CSS("#type-text"), text), chromedp.Click(chromedp.CSS("button.type-send")))
	typed := newest("type_text", "")
	if rc = receipt(typed.Key); rc.Arguments["text"] != text {
		t.Fatalf("the typing's receipt is %+v; want the text %q", rc, text)
	}
	if f, ok := snapshot().find(byID("com.example.notes:id/input")); !ok || f.Text != text {
		t.Fatalf("the note field holds %q; want %q", f.Text, text)
	}
	after := screenshot()
	// The field's box in the 540-pixel picture.
	scale := 540.0 / float64(dev.Width)
	fieldBox := image.Rect(int(float64(field.Bounds[0])*scale), int(float64(field.Bounds[1])*scale),
		int(float64(field.Bounds[2])*scale), int(float64(field.Bounds[3])*scale))
	if d := deviceRegionDiff(before, after, fieldBox); d < 4 {
		t.Fatalf("the phone's screenshot of the note field changed by %.1f only: the test would prove nothing", d)
	}
	// The live screen shows the typed text once the page's image matches
	// the screenshot where the field is.
	liveShows("the typed text", after, before, fieldBox)
	if v, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS("#type-text"))); err != nil || v != "" {
		t.Errorf("the text box holds %q (%v) after sending; want it cleared", v, err)
	}
	testutil.Screenshot(t, ctx, "device-typed")

	// ---- A reload of the tab keeps driving under the same lease.
	do("reload the page", chromedp.Reload())
	waitFor("after a reload the page still holds the lease", `(() => {
		const p = document.querySelector('.lease-panel');
		return p && p.dataset.lease === 'mine' && p.textContent.includes('`+leases.Leases[0].LeaseID+`');
	})()`)

	// ---- A key button.
	do("press Back", chromedp.Click(chromedp.CSS(`button.key[data-key="BACK"]`)))
	back := newest("key", "")
	if rc = receipt(back.Key); rc.Arguments["key"] != "BACK" {
		t.Fatalf("the key's receipt is %+v; want BACK", rc)
	}
	home2 := screenshot()
	liveShows("the home screen after Back", home2, after, home2.Bounds())

	// ---- Release; the screen then acts on nothing.
	do("release the lease", chromedp.Click(chromedp.CSS("button.lease-release")))
	waitFor("the page shows the phone free", `document.querySelector('.lease-panel').dataset.lease === 'free' && document.querySelector('#type-text').disabled`)
	var now device
	decode(call("GET", devPath, "", http.StatusOK), &now)
	if now.Leased {
		t.Fatalf("the device is still leased after Release: %+v", now)
	}
	count := len(receipts())
	r = screenRect()
	px, py = toPage(r, cx, cy)
	do("click the screen without the lease", chromedp.MouseClickXY(px, py))
	waitFor("the page says the lease is needed", `[...document.querySelectorAll('#toasts .toast.error')].some((t) => t.textContent.includes('Take the lease'))`)
	if n := len(receipts()); n != count {
		t.Errorf("a click without the lease recorded %d receipts; want none", n-count)
	}
	testutil.Screenshot(t, ctx, "device-released")

	// ---- A phone-sized window.
	do("a phone's window", chromedp.EmulateViewport(390, 844))
	waitFor("the page fits a phone's width", `document.documentElement.scrollWidth <= 390 && document.querySelector('.screen-wrap').getBoundingClientRect().width > 200`)
	testutil.Screenshot(t, ctx, "device-phone")
	do("back to 1280×800", chromedp.EmulateViewport(testutil.BrowserWidth, testutil.BrowserHeight))

	// ---- Tenancy: another organisation's phone answers as a missing one.
	ids, err := a.Application().Fleet.RegisterDevices.Handle(testutil.Context(t),
		fleet.RegisterDevices{OrgID: "org_elsewhere", Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		t.Fatalf("register another organisation's phone: %v %v", err, ids)
	}
	notFound := func(id string) string {
		t.Helper()
		// A new hash is a same-document navigation: set it as a link would.
		if _, err := chromedp.Run(wait, chromedp.Evaluate[bool](`(location.hash = '#/devices/`+id+`', true)`)); err != nil {
			t.Fatalf("open device %s: %v", id, err)
		}
		var text string
		decode(waitFor("the not-found answer for "+id, `(() => {
			const h1 = document.querySelector('#main h1');
			const err = document.querySelector('#main .error');
			return h1 && h1.textContent === 'Device not found' && err && err.textContent.includes('`+id+`') && document.querySelector('#main').textContent;
		})()`), &text)
		if n, err := chromedp.Run(wait, chromedp.Evaluate[int](`document.querySelectorAll('.screen-wrap').length`)); err != nil || n != 0 {
			t.Errorf("the not-found page for %s shows %d screens (%v); want none", id, n, err)
		}
		return strings.ReplaceAll(text, id, "<id>")
	}
	other := notFound(ids[0])
	testutil.Screenshot(t, ctx, "device-not-found")
	if unknown := notFound(domain.NewID("dev")); other != unknown {
		t.Errorf("another organisation's device shows %q; an unknown id shows %q; want the same", other, unknown)
	}
	if !strings.Contains(other, "device_unavailable") {
		t.Errorf("the not-found page says %q; want the API's answer (device_unavailable)", other)
	}

	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}

// deviceDataURL decodes a data:image/png;base64 URL.
func deviceDataURL(t *testing.T, u string) image.Image {
	t.Helper()
	b64, ok := strings.CutPrefix(u, "data:image/png;base64,")
	if !ok {
		t.Fatalf("not a PNG data URL: %.40q", u)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// deviceRegionDiff is the mean absolute difference per colour channel
// (0–255) between two pictures of the same size inside box; pictures of
// different sizes differ by 255.
func deviceRegionDiff(a, b image.Image, box image.Rectangle) float64 {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 255
	}
	box = box.Intersect(image.Rect(0, 0, a.Bounds().Dx(), a.Bounds().Dy()))
	if box.Empty() {
		return 255
	}
	var sum, n float64
	ao, bo := a.Bounds().Min, b.Bounds().Min
	for y := box.Min.Y; y < box.Max.Y; y++ {
		for x := box.Min.X; x < box.Max.X; x++ {
			r1, g1, b1, _ := a.At(ao.X+x, ao.Y+y).RGBA()
			r2, g2, b2, _ := b.At(bo.X+x, bo.Y+y).RGBA()
			for _, d := range []int{int(r1>>8) - int(r2>>8), int(g1>>8) - int(g2>>8), int(b1>>8) - int(b2>>8)} {
				sum += float64(max(d, -d))
			}
			n += 3
		}
	}
	return sum / n
}
