package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil/fleettest"
)

// TestWaitRoute waits on a sim phone through POST /v1/devices/{id}/wait,
// checking every answer against the contract (wait.yaml): an element on
// screen is met at once with its ref; a wait for it to disappear times out
// as a 200 with met false; a still screen is met; a condition that cannot
// hold, an unknown field and a missing device are refused.
func TestWaitRoute(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	dev := fs.env.DeviceIDs[0]
	path := "/v1/devices/" + dev + "/wait"

	_, b := fs.do(t, "POST", path, `{"text":"Settings"}`, 200)
	got := decodeInto[struct {
		Met          bool   `json:"met"`
		Until        string `json:"until"`
		FrameID      string `json:"frameId"`
		Observations int    `json:"observations"`
		Element      *struct {
			Ref  string `json:"ref"`
			Text string `json:"text"`
		} `json:"element"`
	}](t, b)
	if !got.Met || got.Until != "appears" || !domain.HasPrefix(got.FrameID, domain.PrefixFrame) || got.Observations != 1 ||
		got.Element == nil || got.Element.Text != "Settings" || got.Element.Ref == "" {
		t.Errorf("got %s; want met at once on the Settings icon", b)
	}

	_, b = fs.do(t, "POST", path, `{"until":"disappears","text":"Settings","timeoutMs":300}`, 200)
	if m := decodeInto[map[string]any](t, b); m["met"] != false || m["element"] != nil {
		t.Errorf("got %s; want met false (the icon stays)", b)
	}
	_, b = fs.do(t, "POST", path, `{"until":"stable","stableMs":200,"timeoutMs":5000}`, 200)
	if m := decodeInto[map[string]any](t, b); m["met"] != true {
		t.Errorf("got %s; want a still home screen met", b)
	}

	for _, body := range []string{`{"until":"stable","text":"x"}`, `{}`, `{"text":"x","timeoutMs":30001}`, ``} {
		_, b = fs.do(t, "POST", path, body, 400)
		if code := errorCode(t, b); code != "invalid_argument" {
			t.Errorf("%s: got %s; want invalid_argument", body, code)
		}
	}
	// A device that does not exist: the answer the contract describes, with
	// the code the fleet's routes give a missing device.
	req := httptest.NewRequest("POST", "/v1/devices/"+domain.NewID(domain.PrefixDevice)+"/wait", strings.NewReader(`{"text":"x"}`))
	resp, b := apitest.Do(t, fs.s.Handler(), req)
	fs.v.Check(t, req, resp, b)
	if code := errorCode(t, b); resp.StatusCode/100 != 4 || code != "device_unavailable" && code != "not_found" {
		t.Errorf("got %d %s for a missing device; want a 4xx device_unavailable or not_found", resp.StatusCode, code)
	}
}
