package httpapi

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil/fleettest"
)

// fleetServer is a test server over a running fleet of sim phones; every
// request is the fleet organisation's local operator.
type fleetServer struct {
	t   *testing.T
	env *fleettest.Env
	s   *Server
	v   *apitest.Validator
}

func newFleetServer(t *testing.T, opts fleettest.Options) *fleetServer {
	t.Helper()
	env := fleettest.Start(t, opts)
	s, _ := newTestServer(t, Deps{App: appOf(env.Fleet), LocalOrgID: env.OrgID})
	return &fleetServer{t: t, env: env, s: s, v: apitest.FromHandler(t, s.Handler())}
}

// do sends a request, checks the answer against the contract and its
// status, and returns the body.
func (fs *fleetServer) do(t *testing.T, method, path, body string, status int) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	resp, b := apitest.Do(t, fs.s.Handler(), req)
	fs.v.Check(t, req, resp, b)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: got status %d; want %d\nbody: %s", method, path, resp.StatusCode, status, b)
	}
	return resp, b
}

func decodeInto[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, b)
	}
	return v
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	code, _ := decodeErrorBody(t, b)["code"].(string)
	return code
}

// TestFleetRoutesWalkthrough drives one phone through every fleet route
// the way a client would, checking each answer against the contract.
func TestFleetRoutesWalkthrough(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 2})
	dev := fs.env.DeviceIDs[0]

	// Devices.
	_, b := fs.do(t, "GET", "/v1/devices", "", 200)
	page := decodeInto[struct {
		Devices []map[string]any `json:"devices"`
	}](t, b)
	if got := len(page.Devices); got != 2 {
		t.Fatalf("got %d devices; want 2", got)
	}
	_, b = fs.do(t, "GET", "/v1/devices?limit=1", "", 200)
	if next := decodeInto[map[string]any](t, b)["nextAfter"]; next != page.Devices[0]["deviceId"] {
		t.Errorf("got nextAfter %v; want %v", next, page.Devices[0]["deviceId"])
	}
	_, b = fs.do(t, "PATCH", "/v1/devices/"+dev, `{"name":"Bench phone"}`, 200)
	if got := decodeInto[map[string]any](t, b)["name"]; got != "Bench phone" {
		t.Errorf("got name %v; want Bench phone", got)
	}
	fs.do(t, "GET", "/v1/devices/"+dev, "", 200)

	// Lease.
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":60}`, 201)
	lease := decodeInto[map[string]any](t, b)
	leaseID := lease["leaseId"].(string)
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/lease", "", 409)
	if got := decodeErrorBody(t, b)["reason"]; got != "already_leased" {
		t.Errorf("second acquire: got reason %v; want already_leased", got)
	}
	fs.do(t, "PATCH", "/v1/devices/"+dev+"/lease", `{"leaseId":"`+leaseID+`","ttlSeconds":120}`, 200)
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/driving", "", 200)
	if got := decodeInto[map[string]any](t, b)["driving"]; got != true {
		t.Errorf("got driving %v; want true", got)
	}
	_, b = fs.do(t, "GET", "/v1/leases", "", 200)
	if got := len(decodeInto[map[string][]any](t, b)["leases"]); got != 1 {
		t.Errorf("got %d leases; want 1", got)
	}

	// Observe.
	resp, b := fs.do(t, "GET", "/v1/devices/"+dev+"/screenshot", "", 200)
	frameID := resp.Header.Get("Frame-Id")
	if !domain.HasPrefix(frameID, domain.PrefixFrame) {
		t.Fatalf("got Frame-Id %q; want a frm_ id", frameID)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if got := img.Bounds().Dx(); got != 1080 {
		t.Errorf("got screenshot width %d; want 1080", got)
	}
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/screenshot?format=json&maxWidth=270", "", 200)
	shot := decodeInto[struct {
		FrameID string `json:"frameId"`
		Image   []byte `json:"image"`
	}](t, b)
	if img, err := png.Decode(bytes.NewReader(shot.Image)); err != nil || img.Bounds().Dx() != 270 {
		t.Errorf("scaled screenshot: got %v, err %v; want 270 wide", img, err)
	}
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/snapshot", "", 200)
	snap := decodeInto[struct {
		FrameID string           `json:"frameId"`
		Root    domain.UIElement `json:"root"`
	}](t, b)
	settings, ok := findText(snap.Root, "Settings")
	if !ok {
		t.Fatalf("the home screen snapshot has no Settings icon")
	}

	// Act: tap the Settings icon where the snapshot says it is, naming the
	// frame the decision was made on.
	x, y := (settings.Bounds[0]+settings.Bounds[2])/2, (settings.Bounds[1]+settings.Bounds[3])/2
	act := func(key string, frame string) string {
		return `{"action":"tap","arguments":{"x":` + itoa(int64(x)) + `,"y":` + itoa(int64(y)) + `},"idempotencyKey":"` + key +
			`","leaseId":"` + leaseID + `","observedFrame":"` + frame + `"}`
	}
	resp, b = fs.do(t, "POST", "/v1/devices/"+dev+"/actions", act("walk-1", snap.FrameID), 200)
	rc := decodeInto[domain.Receipt](t, b)
	if rc.State != "committed" || rc.Result == nil || rc.Result.Foreground != "com.android.settings" {
		t.Fatalf("got receipt %s; want committed, Settings in front", b)
	}
	if resp.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer carries Idempotent-Replayed")
	}
	resp, b2 := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", act("walk-1", snap.FrameID), 200)
	if got := resp.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replay: got Idempotent-Replayed %q; want true", got)
	}
	if !bytes.Equal(b, b2) {
		t.Errorf("replay answered differently:\n%s\n%s", b, b2)
	}
	// Asked to act again if it had no effect: it had one (Settings came to
	// the front), so its outcome answers.
	resp, b2 = fs.do(t, "POST", "/v1/devices/"+dev+"/actions", strings.Replace(act("walk-1", snap.FrameID), "{", `{"retryIfUnchanged":true,`, 1), 200)
	if resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, b2) {
		t.Errorf("retryIfUnchanged after a change: got %q, %s; want the first outcome replayed", resp.Header.Get("Idempotent-Replayed"), b2)
	}
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/actions", act("walk-2", snap.FrameID), 409)
	if got := errorCode(t, b); got != "stale_frame" {
		t.Errorf("stale observedFrame: got %s; want stale_frame", got)
	}

	// Receipts.
	_, b = fs.do(t, "GET", "/v1/receipts/walk-1", "", 200)
	if got := decodeInto[domain.Receipt](t, b); got.State != "committed" || got.Frames.After != rc.Frames.After {
		t.Errorf("got receipt %s; want the committed one", b)
	}
	_, b = fs.do(t, "GET", "/v1/receipts/walk-2", "", 200)
	if got := decodeInto[domain.Receipt](t, b); got.State != "failed" || got.Error == nil || got.Error.Code != "stale_frame" {
		t.Errorf("got receipt %s; want failed with stale_frame", b)
	}
	_, b = fs.do(t, "GET", "/v1/receipts?status=committed", "", 200)
	if got := len(decodeInto[map[string][]any](t, b)["receipts"]); got != 1 {
		t.Errorf("got %d committed receipts; want 1", got)
	}
	_, b = fs.do(t, "POST", "/v1/receipts/walk-1/reviewed", `{"note":"looks right"}`, 200)
	if got := decodeInto[domain.Receipt](t, b); got.Reviewed == nil || got.Reviewed.Note != "looks right" {
		t.Errorf("got %s; want reviewed with the note", b)
	}

	// Frames: the after frame of the action was stored without a picture
	// and is drawn on first read.
	resp, b = fs.do(t, "GET", "/v1/frames/"+rc.Frames.After+"?format=png", "", 200)
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("frame PNG: %v", err)
	}
	_, b = fs.do(t, "GET", "/v1/frames/"+rc.Frames.After, "", 200)
	frame := decodeInto[struct {
		ScreenHash string           `json:"screenHash"`
		Snapshot   domain.UIElement `json:"snapshot"`
	}](t, b)
	if frame.ScreenHash != rc.Result.ScreenHash {
		t.Errorf("got after frame hash %s; want the action's %s", frame.ScreenHash, rc.Result.ScreenHash)
	}
	if _, ok := findText(frame.Snapshot, "Wi-Fi"); !ok {
		t.Errorf("the after frame's snapshot does not show Settings (no Wi-Fi row)")
	}

	// Stop, wake, release.
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/stop", `{"leaseId":"`+leaseID+`"}`, 200)
	if got := decodeInto[map[string]any](t, b)["status"]; got != "asleep" {
		t.Errorf("after stop: got status %v; want asleep", got)
	}
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/actions",
		`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"walk-3","leaseId":"`+leaseID+`"}`, 409)
	if got := decodeErrorBody(t, b)["reason"]; got != "asleep" {
		t.Errorf("action while asleep: got reason %v; want asleep", got)
	}
	_, b = fs.do(t, "POST", "/v1/devices/"+dev+"/wake", `{"leaseId":"`+leaseID+`"}`, 200)
	if got := decodeInto[map[string]any](t, b)["status"]; got != "online" {
		t.Errorf("after wake: got status %v; want online", got)
	}
	fs.do(t, "DELETE", "/v1/devices/"+dev+"/lease?leaseId="+leaseID, "", 204)
	_, b = fs.do(t, "GET", "/v1/devices/"+dev+"/driving", "", 200)
	if got := decodeInto[map[string]any](t, b)["driving"]; got != false {
		t.Errorf("after release: got driving %v; want false", got)
	}
}

func findText(e domain.UIElement, text string) (domain.UIElement, bool) {
	if e.Text == text || e.ContentDesc == text {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findText(c, text); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

// TestFleetRefusals checks the error answers of the fleet routes: code,
// status and shape.
func TestFleetRefusals(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	dev := fs.env.DeviceIDs[0]
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", "", 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	other := domain.NewID(domain.PrefixDevice)
	tap := func(key, lease string) string {
		return `{"action":"tap","arguments":{"x":10,"y":10},"idempotencyKey":"` + key + `","leaseId":"` + lease + `"}`
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		reason                   string
	}{
		{"unknown device", "GET", "/v1/devices/" + other, "", 409, "device_unavailable", "not_found"},
		{"malformed device id", "GET", "/v1/devices/nope", "", 409, "device_unavailable", "not_found"},
		{"lease an unknown device", "POST", "/v1/devices/" + other + "/lease", "", 409, "device_unavailable", "not_found"},
		{"ttl out of range", "POST", "/v1/devices/" + dev + "/lease", `{"ttlSeconds":5}`, 400, "invalid_argument", ""},
		{"renew another lease", "PATCH", "/v1/devices/" + dev + "/lease", `{"leaseId":"lse_x"}`, 409, "lease_mismatch", "not_current"},
		{"release without a lease id", "DELETE", "/v1/devices/" + dev + "/lease", "", 409, "lease_required", ""},
		{"action without a lease", "POST", "/v1/devices/" + dev + "/actions", tap("r1", ""), 409, "lease_required", ""},
		{"action with a wrong lease", "POST", "/v1/devices/" + dev + "/actions", tap("r2", "lse_nope"), 409, "lease_mismatch", "not_current"},
		{"action without a key", "POST", "/v1/devices/" + dev + "/actions", `{"action":"tap","arguments":{"x":1,"y":1},"leaseId":"` + leaseID + `"}`, 400, "invalid_argument", ""},
		{"unknown action", "POST", "/v1/devices/" + dev + "/actions", `{"action":"teleport","idempotencyKey":"r3","leaseId":"` + leaseID + `"}`, 400, "invalid_argument", ""},
		{"unknown argument", "POST", "/v1/devices/" + dev + "/actions", `{"action":"tap","arguments":{"x":1,"y":1,"z":1},"idempotencyKey":"r4","leaseId":"` + leaseID + `"}`, 400, "invalid_argument", ""},
		{"tap off screen", "POST", "/v1/devices/" + dev + "/actions", `{"action":"tap","arguments":{"x":5000,"y":1},"idempotencyKey":"r5","leaseId":"` + leaseID + `"}`, 400, "invalid_argument", ""},
		{"unknown key", "POST", "/v1/devices/" + dev + "/actions", `{"action":"key","arguments":{"key":"F13"},"idempotencyKey":"r6","leaseId":"` + leaseID + `"}`, 400, "invalid_argument", ""},
		{"observed frame unknown", "POST", "/v1/devices/" + dev + "/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"r7","leaseId":"` + leaseID + `","observedFrame":"frm_0190a1b2c3d4e5f60718293a4b5c6d7e"}`, 404, "frame_not_found", ""},
		{"open an app not installed", "POST", "/v1/devices/" + dev + "/actions", `{"action":"open_app","arguments":{"package":"com.example.counter"},"idempotencyKey":"r8","leaseId":"` + leaseID + `"}`, 400, "invalid_argument", "app_not_installed"},
		{"both actor filters", "GET", "/v1/receipts?actorUserId=u&actorApiKeyId=k", "", 400, "invalid_argument", ""},
		{"empty agentRunId", "GET", "/v1/receipts?agentRunId=", "", 400, "invalid_argument", ""},
		{"limit zero", "GET", "/v1/receipts?limit=0", "", 400, "invalid_argument", ""},
		{"unknown status", "GET", "/v1/receipts?status=done", "", 400, "invalid_argument", ""},
		{"unreadable before", "GET", "/v1/receipts?before=yesterday", "", 400, "invalid_argument", ""},
		{"unknown receipt", "GET", "/v1/receipts/none-such", "", 404, "receipt_not_found", ""},
		{"review an unknown receipt", "POST", "/v1/receipts/none-such/reviewed", "", 404, "receipt_not_found", ""},
		{"unknown frame", "GET", "/v1/frames/frm_0190a1b2c3d4e5f60718293a4b5c6d7e", "", 404, "frame_not_found", ""},
		{"malformed frame id", "GET", "/v1/frames/x", "", 404, "frame_not_found", ""},
		{"bad format", "GET", "/v1/frames/x?format=gif", "", 400, "invalid_argument", ""},
		{"rename to nothing", "PATCH", "/v1/devices/" + dev, `{"name":"  "}`, 400, "invalid_argument", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, b := fs.do(t, tt.method, tt.path, tt.body, tt.status)
			e := decodeErrorBody(t, b)
			if e["code"] != tt.code {
				t.Errorf("got code %v; want %s (%s)", e["code"], tt.code, b)
			}
			if tt.reason != "" && e["reason"] != tt.reason {
				t.Errorf("got reason %v; want %s", e["reason"], tt.reason)
			}
		})
	}
	t.Run("same key for a different action", func(t *testing.T) {
		fs.do(t, "POST", "/v1/devices/"+dev+"/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"same","leaseId":"`+leaseID+`"}`, 200)
		_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", `{"action":"key","arguments":{"key":"BACK"},"idempotencyKey":"same","leaseId":"`+leaseID+`"}`, 409)
		e := decodeErrorBody(t, b)
		if e["code"] != "idempotency_conflict" || e["retryable"] != false {
			t.Errorf("got %s; want idempotency_conflict, retryable false", b)
		}
	})
	t.Run("replay after the lease ended", func(t *testing.T) {
		fs.do(t, "DELETE", "/v1/devices/"+dev+"/lease?leaseId="+leaseID, "", 204)
		resp, _ := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"same","leaseId":"`+leaseID+`"}`, 200)
		if resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("got no Idempotent-Replayed; want the recorded outcome")
		}
	})
}
