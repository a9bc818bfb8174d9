package httpapi

import (
	"bytes"
	"encoding/json"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// findEl returns the first element of the tree that match accepts.
func findEl(e domain.UIElement, match func(domain.UIElement) bool) (domain.UIElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findEl(c, match); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

// findSim returns the first element of a sim phone's own tree that match
// accepts.
func findSim(e sim.Element, match func(sim.Element) bool) (sim.Element, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findSim(c, match); ok {
			return f, true
		}
	}
	return sim.Element{}, false
}

// act sends one action on dev under lease, decided on frame (none when
// empty), and expects status.
func (fs *fleetServer) act(t *testing.T, dev, lease, key, action, args, frame string, status int) (http.Header, []byte) {
	t.Helper()
	body := `{"action":"` + action + `","arguments":` + args + `,"idempotencyKey":"` + key + `","leaseId":"` + lease + `"`
	if frame != "" {
		body += `,"observedFrame":"` + frame + `"`
	}
	resp, b := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", body+"}", status)
	return resp.Header, b
}

// snapshot reads dev's UI tree over REST: its frame and root.
func (fs *fleetServer) snapshot(t *testing.T, dev string) (string, domain.UIElement) {
	t.Helper()
	_, b := fs.do(t, "GET", "/v1/devices/"+dev+"/snapshot", "", 200)
	s := decodeInto[struct {
		FrameID string           `json:"frameId"`
		Root    domain.UIElement `json:"root"`
	}](t, b)
	return s.FrameID, s.Root
}

// TestADBPhoneOverREST drives an adb device end to end: REST → adb
// backend → the real adb server → a device-side adb daemon → a sim phone,
// whose own state says what happened. Every answer is checked against the
// contract.
func TestADBPhoneOverREST(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "adb-rest")
	phone := daemon.Phone()
	fs := newFleetServer(t, fleettest.Options{ADBAddr: server})
	dev := fs.env.RegisterADB(t, daemon.Serial())

	_, b := fs.do(t, "GET", "/v1/devices/"+dev, "", 200)
	if d := decodeInto[map[string]any](t, b); d["backend"] != "adb" || d["status"] != "online" {
		t.Fatalf("got device %s; want an online adb device", b)
	}
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	act := func(key, action, args, frame string, status int) (http.Header, []byte) {
		t.Helper()
		return fs.act(t, dev, leaseID, key, action, args, frame, status)
	}
	snapshot := func() (string, domain.UIElement) { t.Helper(); return fs.snapshot(t, dev) }

	// The screenshot is the sim's own rendering, byte for byte.
	resp, shot := fs.do(t, "GET", "/v1/devices/"+dev+"/screenshot", "", 200)
	want, err := phone.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shot, want) {
		t.Fatalf("got a %d-byte screenshot; want the sim's own %d-byte PNG", len(shot), len(want))
	}
	if !domain.HasPrefix(resp.Header.Get("Frame-Id"), domain.PrefixFrame) {
		t.Errorf("got Frame-Id %q; want a frm_ id", resp.Header.Get("Frame-Id"))
	}
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/screenshot?format=json&maxWidth=270", "", 200)
	scaled := decodeInto[struct {
		Image []byte `json:"image"`
	}](t, b)
	if img, err := png.Decode(bytes.NewReader(scaled.Image)); err != nil || img.Bounds().Dx() != 270 {
		t.Errorf("scaled screenshot: got %v, %v; want a PNG 270 wide", img, err)
	}

	// The elements are the sim's, where the sim draws them.
	home, root := snapshot()
	settings, ok := findText(root, "Settings")
	if !ok {
		t.Fatalf("the home screen has no Settings icon: %+v", root)
	}
	own, ok := findSim(phone.Snapshot(), func(e sim.Element) bool { return e.Text == "Settings" })
	if !ok || own.Bounds != sim.Bounds(settings.Bounds) {
		t.Errorf("got Settings at %v over adb; want the sim's %v", settings.Bounds, own.Bounds)
	}

	// Tap the element by ref, on the frame just seen.
	before := daemon.Stats().Commands
	_, b = act("adb-tap", "tap", `{"ref":"`+settings.Ref+`"}`, home, 200)
	rc := decodeInto[domain.Receipt](t, b)
	if rc.State != "committed" || rc.Frames.Before == "" || rc.Frames.After == "" {
		t.Fatalf("got receipt %s; want committed with both frames", b)
	}
	if got := phone.Foreground(); got != "com.android.settings" {
		t.Fatalf("after tapping Settings: got %s in front; want com.android.settings", got)
	}
	ran := daemon.Stats().Commands - before

	// The same key again answers the recorded outcome; nothing reaches the
	// device.
	before = daemon.Stats().Commands
	h, b2 := act("adb-tap", "tap", `{"ref":"`+settings.Ref+`"}`, home, 200)
	if h.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, b2) {
		t.Errorf("replay: got Idempotent-Replayed %q and %s; want true and the first answer", h.Get("Idempotent-Replayed"), b2)
	}
	if got := daemon.Stats().Commands - before; got != 0 {
		t.Errorf("replay ran %d commands on the device (the first run %d); want none", got, ran)
	}

	// A decision made on the home screen is refused now, and nothing
	// happens on the phone.
	hash := phone.ScreenHash()
	_, b = act("adb-stale", "key", `{"key":"HOME"}`, home, 409)
	if got := errorCode(t, b); got != "stale_frame" {
		t.Fatalf("stale observedFrame: got %s; want stale_frame", b)
	}
	if phone.ScreenHash() != hash || phone.Foreground() != "com.android.settings" {
		t.Errorf("the refused action changed the screen")
	}
	_, b = fs.do(t, "GET", "/v1/receipts/adb-stale", "", 200)
	if got := decodeInto[domain.Receipt](t, b); got.State != "failed" || got.Error == nil || got.Error.Code != "stale_frame" {
		t.Errorf("got receipt %s; want failed with stale_frame", b)
	}

	// Open Notes, focus its field by ref, type Unicode.
	_, b = act("adb-open-notes", "open_app", `{"package":"com.example.notes"}`, "", 200)
	if rc := decodeInto[domain.Receipt](t, b); rc.State != "committed" || phone.Foreground() != "com.example.notes" {
		t.Fatalf("open_app: got %s with %s in front; want Notes", b, phone.Foreground())
	}
	_, root = snapshot()
	field, ok := findEl(root, func(e domain.UIElement) bool { return strings.HasPrefix(e.Hint, "Write a note") })
	if !ok {
		t.Fatalf("Notes shows no note field: %+v", root)
	}
	act("adb-focus", "tap", `{"ref":"`+field.Ref+`"}`, "", 200)
	const text = "héllo 你好 🙂"
	args, _ := json.Marshal(map[string]string{"text": text})
	before = daemon.Stats().Commands
	_, b = act("adb-type", "type_text", string(args), "", 200)
	if rc := decodeInto[domain.Receipt](t, b); rc.State != "committed" {
		t.Fatalf("type_text: got %s; want committed", b)
	}
	ran = daemon.Stats().Commands - before
	act("adb-type", "type_text", string(args), "", 200)
	if got := daemon.Stats().Commands - before; got != ran {
		t.Errorf("replayed type_text ran %d more commands; want none", got-ran)
	}
	typed, ok := findSim(phone.Snapshot(), func(e sim.Element) bool { return e.Focused })
	if !ok || typed.Text != text {
		t.Errorf("the sim's focused field holds %q; want %q typed once", typed.Text, text)
	}
	_, root = snapshot()
	if _, ok := findText(root, text); !ok {
		t.Errorf("the snapshot over adb does not show %q", text)
	}

	// Install from the catalog, then drive the new app where its
	// elements say they are.
	if slices.ContainsFunc(phone.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCounter }) {
		t.Fatalf("%s is installed before the test installs it", sim.PkgCounter)
	}
	_, b = act("adb-install", "install_app", `{"package":"`+sim.PkgCounter+`"}`, "", 200)
	if rc := decodeInto[domain.Receipt](t, b); rc.State != "committed" {
		t.Fatalf("install_app: got %s; want committed", b)
	}
	if !slices.ContainsFunc(phone.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCounter }) {
		t.Fatalf("after install_app the sim does not have %s", sim.PkgCounter)
	}
	act("adb-open-counter", "open_app", `{"package":"`+sim.PkgCounter+`"}`, "", 200)
	frame, root := snapshot()
	inc, ok := findEl(root, func(e domain.UIElement) bool { return e.ContentDesc == "Increase" })
	if !ok {
		t.Fatalf("Counter shows no Increase button: %+v", root)
	}
	x, y := (inc.Bounds[0]+inc.Bounds[2])/2, (inc.Bounds[1]+inc.Bounds[3])/2
	_, b = act("adb-increase", "tap", `{"x":`+itoa(int64(x))+`,"y":`+itoa(int64(y))+`}`, frame, 200)
	rc = decodeInto[domain.Receipt](t, b)
	count, ok := findSim(phone.Snapshot(), func(e sim.Element) bool { return e.ResourceID == sim.PkgCounter+":id/count" })
	if !ok || count.Text != "1" {
		t.Errorf("after tapping the centre of Increase: the sim's count is %q; want 1", count.Text)
	}

	// The after frame is readable, as a PNG and with its elements.
	_, b = fs.do(t, "GET", "/v1/frames/"+rc.Frames.After+"?format=png", "", 200)
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("after frame PNG: %v", err)
	}
	// Its JSON form has no UI tree: adb frames taken around an action keep
	// none (a dump costs seconds on a real phone).
	_, b = fs.do(t, "GET", "/v1/frames/"+rc.Frames.After, "", 200)
	if fr := decodeInto[map[string]any](t, b); fr["frameId"] != rc.Frames.After || fr["screenHash"] == "" || fr["snapshot"] != nil {
		t.Errorf("got after frame %s; want it, with its screen hash and no snapshot", b)
	}
	if refusals := daemon.Refusals(); len(refusals) != 0 {
		t.Errorf("the phone refused inputs: %v", refusals)
	}
	fs.do(t, "DELETE", "/v1/devices/"+dev+"/lease?leaseId="+leaseID, "", 204)
}
