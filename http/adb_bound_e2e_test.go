package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestADBTapFollowsItsElement: on an adb phone behind the real adb server,
// a tap by ref is sent at the element's centre as the device's own UI dump
// shows it now; an element that scrolled since the frame the caller
// decided on is refused (stale_frame, element_moved) with no input reaching
// the phone; each committed receipt says whether the screen changed.
func TestADBTapFollowsItsElement(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "adb-bound")
	phone := daemon.Phone()
	fs := newFleetServer(t, fleettest.Options{ADBAddr: server})
	dev := fs.env.RegisterADB(t, daemon.Serial())
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	act := func(key, action, args, frame string, status int) domain.Receipt {
		t.Helper()
		_, b := fs.act(t, dev, leaseID, key, action, args, frame, status)
		if status != http.StatusOK {
			_, b = fs.do(t, "GET", "/v1/receipts/"+key, "", 200)
		}
		return decodeInto[domain.Receipt](t, b)
	}
	snapshot := func() (string, domain.UIElement) { t.Helper(); return fs.snapshot(t, dev) }
	inputs := func() int { return int(phone.Clock().Sub(sim.ClockStart()) / sim.ClockStep) }

	rc := act("open", "open_app", `{"package":"com.android.settings"}`, "", 200)
	if rc.Effect == nil || rc.Effect.State != domain.EffectChanged || rc.Effect.ScreenBefore == rc.Effect.ScreenAfter {
		t.Errorf("opening Settings over adb: effect %+v; want changed, with two pictures", rc.Effect)
	}
	frame, root := snapshot()
	list, ok := findEl(root, func(e domain.UIElement) bool { return e.Scrollable })
	if !ok {
		t.Fatalf("Settings shows no list: %+v", root)
	}
	row, ok := findEl(list, func(e domain.UIElement) bool {
		return e.Clickable && e.Bounds[1] > (list.Bounds[1]+list.Bounds[3])/2 && e.Bounds[3] < list.Bounds[3]
	})
	if !ok {
		t.Fatalf("Settings shows no row low in its list: %+v", list)
	}
	cx := (list.Bounds[0] + list.Bounds[2]) / 2
	swipe, _ := json.Marshal(map[string]int{"x1": cx, "y1": list.Bounds[3] - 20, "x2": cx, "y2": list.Bounds[3] - 120})
	act("scroll", "swipe", string(swipe), "", 200)

	before := inputs()
	rc = act("moved", "tap", `{"ref":"`+row.Ref+`"}`, frame, http.StatusConflict)
	if rc.Error == nil || rc.Error.Code != domain.CodeStaleFrame || rc.Error.Reason != domain.ReasonElementMoved {
		t.Fatalf("a tap on a row that scrolled: got %+v; want stale_frame element_moved", rc.Error)
	}
	if got := inputs() - before; got != 0 {
		t.Errorf("the refused tap reached the phone as %d inputs; want none", got)
	}

	// Decided anew, the tap lands at the row's centre as the phone has it.
	frame, root = snapshot()
	now, _ := root.Find(row.Ref)
	own, ok := findSim(phone.Snapshot(), func(e sim.Element) bool { return sim.Bounds(now.Bounds) == e.Bounds && e.Clickable })
	if !ok {
		t.Fatalf("the phone's own tree has no clickable element at %v", now.Bounds)
	}
	rc = act("fresh", "tap", `{"ref":"`+row.Ref+`"}`, frame, 200)
	x, y := now.Centre()
	if rc.Result == nil || rc.Result.Target != row.Ref || rc.Result.Description != fmt.Sprintf("tapped (%d, %d)", x, y) {
		t.Errorf("the tap: got %+v; want %s tapped at its centre (%d, %d)", rc.Result, own.Ref, x, y)
	}
	if rc.Effect == nil || rc.Effect.State != domain.EffectChanged {
		t.Errorf("opening a settings page over adb: effect %+v; want changed", rc.Effect)
	}
}
