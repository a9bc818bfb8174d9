package mcp_test

import (
	"bytes"
	"image/png"
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// findSimEl returns the first element of a sim phone's own tree that
// match accepts.
func findSimEl(e sim.Element, match func(sim.Element) bool) (sim.Element, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findSimEl(c, match); ok {
			return f, true
		}
	}
	return sim.Element{}, false
}

// TestAgentDrivesAnADBPhone is an agent's session over MCP with an adb
// device: tools → adb backend → the real adb server → a device-side adb
// daemon → a sim phone, whose own state is the ground truth. The
// screenshot is the sim's rendering; an element tapped by ref opens its
// app; Unicode typed into the focused field is in the phone's tree once
// although the call was repeated under its key; an app installed from
// the catalog is installed and opens.
func TestAgentDrivesAnADBPhone(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "adb-mcp")
	phone := daemon.Phone()
	svc := startServiceWith(t, fleettest.Options{ADBAddr: server, WaitForReceipts: true})
	dev := svc.fleet.RegisterADB(t, daemon.Serial())
	a := clients[3].connect(t, svc.url, svc.key(t, domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct))

	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	mustCall(t, a, "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 600}).json(t, &lease)

	// Observe: the picture is the sim's own, the elements the sim's.
	r := mustCall(t, a, "observe", map[string]any{"deviceId": dev, "maxWidth": 1080})
	var home screenJSON
	r.json(t, &home)
	want, err := phone.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.images) != 1 || !bytes.Equal(r.images[0], want) {
		t.Fatalf("got %d image blocks; want one, the sim's own PNG", len(r.images))
	}
	if home.Width != 1080 || home.App != "com.android.launcher3" || !domain.HasPrefix(home.FrameID, domain.PrefixFrame) {
		t.Fatalf("got %+v; want the launcher, 1080 wide, on a frm_ frame", home)
	}
	small := mustCall(t, a, "observe", map[string]any{"deviceId": dev, "maxWidth": 360})
	if img, err := png.Decode(bytes.NewReader(small.images[0])); err != nil || img.Bounds().Dx() != 360 {
		t.Errorf("downscaled observe: got %v, %v; want a PNG 360 wide", img, err)
	}

	// Tap Settings by its ref, on the frame just seen.
	var tap actionJSON
	mustCall(t, a, "tap_element", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID,
		"ref": home.ref(t, textIs("Settings")), "observedFrame": home.FrameID}).json(t, &tap)
	if tap.Receipt.State != "committed" || phone.Foreground() != "com.android.settings" {
		t.Fatalf("got %+v with %s in front; want committed and Settings", tap, phone.Foreground())
	}
	// A tap decided on the home screen is refused, and nothing happens.
	hash := phone.ScreenHash()
	env := mustFail(t, a, "tap", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "x": 540, "y": 1200,
		"observedFrame": home.FrameID, "idempotencyKey": "adb-stale"})
	if env["code"] != "stale_frame" || phone.ScreenHash() != hash {
		t.Errorf("got %v; want stale_frame and the screen unchanged", env)
	}

	// Type Unicode into Notes, twice under one key.
	mustCall(t, a, "open_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": "com.example.notes"})
	var notes screenJSON
	mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false, "elements": "interactive"}).json(t, &notes)
	mustCall(t, a, "tap_element", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID,
		"ref": notes.ref(t, func(_, hint string) bool { return strings.HasPrefix(hint, "Write a note") })})
	const text = "héllo 你好 🙂"
	args := map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "text": text, "idempotencyKey": "adb-type"}
	var first, second actionJSON
	mustCall(t, a, "type_text", args).json(t, &first)
	before := daemon.Stats().Commands
	mustCall(t, a, "type_text", args).json(t, &second)
	if !second.Replayed || second.Receipt.ActionID != first.Receipt.ActionID || daemon.Stats().Commands != before {
		t.Errorf("got %+v then %+v, %d commands on the device; want the second to replay without acting",
			first, second, daemon.Stats().Commands-before)
	}
	field, ok := findSimEl(phone.Snapshot(), func(e sim.Element) bool { return e.Focused })
	if !ok || field.Text != text {
		t.Errorf("the sim's focused field holds %q; want %q once", field.Text, text)
	}
	var typed screenJSON
	mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false}).json(t, &typed)
	if !slices.ContainsFunc(typed.Elements, func(e struct {
		Ref      string `json:"ref"`
		Text     string `json:"text"`
		Hint     string `json:"hint"`
		Editable bool   `json:"editable"`
	}) bool {
		return e.Editable && e.Text == text
	}) {
		t.Errorf("observe over adb shows no field holding %q: %+v", text, typed.Elements)
	}

	// Install from the catalog and open it.
	var inst actionJSON
	mustCall(t, a, "install_catalog_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": sim.PkgCounter}).json(t, &inst)
	if inst.Receipt.State != "committed" ||
		!slices.ContainsFunc(phone.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCounter }) {
		t.Fatalf("got %+v; want %s installed on the sim", inst, sim.PkgCounter)
	}
	mustCall(t, a, "open_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": sim.PkgCounter})
	if got := phone.Foreground(); got != sim.PkgCounter {
		t.Errorf("got %s in front; want %s", got, sim.PkgCounter)
	}
	mustCall(t, a, "release_lease", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID})
}
