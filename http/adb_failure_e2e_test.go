package httpapi

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// onAct runs before every Act of the backend it wraps, once armed.
type onAct struct {
	domain.Backend
	hook func()
}

func (b onAct) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	b.hook()
	return b.Backend.Act(ctx, a)
}

// TestADBPhoneDroppedMidAction: the phone freezes while an action's tap
// is on its way to it (held in a relay between the adb server and the
// daemon) and then leaves the network. The action answers
// action_outcome_unknown, its receipt says so rather than staying in
// progress, its key replays that answer, discovery records the device
// offline, and once the phone returns it is online again and can be
// driven.
func TestADBPhoneDroppedMidAction(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBDaemon(t, "adb-drop")
	link := fleettest.NewLink(t, daemon.Addr())
	testutil.ConnectADB(t, server, link.Addr())

	var mu sync.Mutex
	armed := false
	dropped := make(chan struct{})
	drop := func() {
		mu.Lock()
		defer mu.Unlock()
		if !armed {
			return
		}
		armed = false
		link.Hold([]byte("input tap 540 1200"))
		stuck := link.Stuck()
		go func() {
			defer close(dropped)
			select {
			case <-stuck: // the tap left the service and froze on its way to the phone
			case <-time.After(time.Minute):
				return // the test fails below: the action was not held
			}
			daemon.Kill()
			link.Cut()
		}()
	}
	wrap := func(d *domain.Device, b domain.Backend) domain.Backend {
		if d.Backend != domain.BackendADB {
			return b
		}
		return onAct{Backend: b, hook: drop}
	}
	fs := newFleetServer(t, fleettest.Options{ADBAddr: server, Wrap: wrap})
	dev := fs.env.RegisterADB(t, link.Addr())
	fs.env.StartADBDiscovery(t)

	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	tap := func(key string) string {
		return `{"action":"tap","arguments":{"x":540,"y":1200},"idempotencyKey":"` + key + `","leaseId":"` + leaseID + `"}`
	}
	// A first action opens the kept shell, so the next one's input goes
	// down an open stream.
	fs.do(t, "POST", "/v1/devices/"+dev+"/actions",
		`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"drop-warm","leaseId":"`+leaseID+`"}`, 200)

	mu.Lock()
	armed = true
	mu.Unlock()
	req := httptest.NewRequest("POST", "/v1/devices/"+dev+"/actions", strings.NewReader(tap("drop-mid")))
	resp, b := apitest.Do(t, fs.s.Handler(), req)
	fs.v.Check(t, req, resp, b)
	<-dropped
	// The tap reached the adb server and was on its way to the phone: it
	// may have happened, so the answer is not device_disconnected.
	code := errorCode(t, b)
	if resp.StatusCode != 504 || code != "action_outcome_unknown" {
		t.Fatalf("action while the phone dropped: got %d %s; want 504 action_outcome_unknown", resp.StatusCode, b)
	}

	// The receipt is settled, and says the same.
	_, b = fs.do(t, "GET", "/v1/receipts/drop-mid", "", 200)
	rc := decodeInto[domain.Receipt](t, b)
	// (The contract's settled unknown: state pending with outcomeUnknown.)
	if rc.State != domain.ReceiptPending || !rc.OutcomeUnknown || rc.Error == nil || rc.Error.Code != domain.CodeActionOutcomeUnknown {
		t.Fatalf("got receipt %s; want pending with outcomeUnknown and the action_outcome_unknown error", b)
	}
	// Its key answers the recorded outcome, without acting.
	_, b2 := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", tap("drop-mid"), resp.StatusCode)
	if got := errorCode(t, b2); got != code {
		t.Errorf("replay of the dropped action: got %s; want %s", b2, code)
	}

	// Discovery sees the phone gone.
	fs.env.WaitDeviceStatus(t, dev, domain.DeviceOffline)
	_, b = fs.do(t, "GET", "/v1/devices/"+dev, "", 200)
	if got := decodeInto[map[string]any](t, b)["status"]; got != "offline" {
		t.Errorf("got status %v; want offline", got)
	}

	// The phone comes back: online again, and driven through a new shell.
	if err := daemon.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.ConnectADB(t, server, link.Addr())
	fs.env.WaitDeviceStatus(t, dev, domain.DeviceOnline)
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/actions",
		`{"action":"open_app","arguments":{"package":"com.android.settings"},"idempotencyKey":"drop-back","leaseId":"`+leaseID+`"}`, 200)
	if rc := decodeInto[domain.Receipt](t, b); rc.State != "committed" || daemon.Phone().Foreground() != "com.android.settings" {
		t.Fatalf("after the phone returned: got %s with %s in front; want Settings opened", b, daemon.Phone().Foreground())
	}
}

// TestADBPhoneDroppedBetweenActions: a phone that left before the action
// is device_disconnected, and its receipt is failed.
func TestADBPhoneDroppedBetweenActions(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "adb-gone")
	fs := newFleetServer(t, fleettest.Options{ADBAddr: server})
	dev := fs.env.RegisterADB(t, daemon.Serial())
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", "", 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	key := func(k string) string {
		return `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"` + k + `","leaseId":"` + leaseID + `"}`
	}
	fs.do(t, "POST", "/v1/devices/"+dev+"/actions", key("gone-1"), 200)
	daemon.Kill()
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/actions", key("gone-2"), 503)
	if got := errorCode(t, b); got != "device_disconnected" {
		t.Fatalf("got %s; want device_disconnected", b)
	}
	_, b = fs.do(t, "GET", "/v1/receipts/gone-2", "", 200)
	if rc := decodeInto[domain.Receipt](t, b); rc.State != "failed" || rc.Error == nil || rc.Error.Code != domain.CodeDeviceDisconnected {
		t.Errorf("got receipt %s; want failed with device_disconnected", b)
	}
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/screenshot", "", 503)
	if got := errorCode(t, b); got != "device_disconnected" {
		t.Errorf("screenshot of a gone phone: got %s; want device_disconnected", b)
	}
}

// TestADBServerNotRunning: with no adb server at SERVICE_ADB_ADDR, an adb
// device is unavailable, and the answer says where the service looked
// and which setting to change.
func TestADBServerNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	fs := newFleetServer(t, fleettest.Options{ADBAddr: addr})
	dev := fs.env.RegisterADB(t, "emulator-5554")
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", "", 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	for _, tt := range []struct{ name, method, path, body string }{
		{"observe", "GET", "/v1/devices/" + dev + "/screenshot", ""},
		{"act", "POST", "/v1/devices/" + dev + "/actions",
			`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"no-server","leaseId":"` + leaseID + `"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, b := fs.do(t, tt.method, tt.path, tt.body, 409)
			e := decodeErrorBody(t, b)
			msg, _ := e["message"].(string)
			if e["code"] != "device_unavailable" || e["reason"] != "offline" || !strings.Contains(msg, "SERVICE_ADB_ADDR") ||
				!strings.Contains(msg, addr) {
				t.Errorf("got %s; want device_unavailable (offline) naming SERVICE_ADB_ADDR and %s", b, addr)
			}
		})
	}
	// The action was refused before it was accepted: no receipt.
	fs.do(t, "GET", "/v1/receipts/no-server", "", 404)
}
