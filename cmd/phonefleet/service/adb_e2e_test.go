package service

import (
	"encoding/json"
	"image/png"
	"net/http"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// findUI returns the first element of the tree whose text or description
// is text.
func findUI(e domain.UIElement, text string) (domain.UIElement, bool) {
	if e.Text == text || e.ContentDesc == text {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findUI(c, text); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

// TestServeDrivesAnADBSimPhone runs the service as `make run` does with
// SERVICE_ADB_SIM_DEVICES=1 against a private adb server: the sim phone
// served over adb is discovered, appears in GET /v1/devices as an adb
// device, and is leased, observed and tapped over REST.
func TestServeDrivesAnADBSimPhone(t *testing.T) {
	server := testutil.ADBServer(t)
	env := localEnv(t, testutil.DatabaseURL(t), 0)
	env["SERVICE_ADB_SIM_DEVICES"], env["SERVICE_ADB_ADDR"] = "1", server
	_, base := startApp(t, env)
	c := auditClient{t: t, base: base}

	var dev string
	waitUntil(t, time.Minute, "the adb sim phone in GET /v1/devices", func() (bool, error) {
		r := c.must(http.MethodGet, "/v1/devices", nil, http.StatusOK, nil)
		list, _ := r.body["devices"].([]any)
		for _, d := range list {
			if m := d.(map[string]any); m["backend"] == "adb" && m["status"] == "online" {
				dev = m["deviceId"].(string)
			}
		}
		return dev != "", nil
	})

	lease := str(t, c.must(http.MethodPost, "/v1/devices/"+dev+"/lease", map[string]any{}, http.StatusCreated, nil).body, "leaseId")
	shot, err := http.Get(base + "/v1/devices/" + dev + "/screenshot")
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(shot.Body)
	shot.Body.Close()
	if err != nil || shot.StatusCode != http.StatusOK || img.Bounds().Dx() != 1080 {
		t.Fatalf("screenshot: got %d, %v; want a PNG 1080 wide", shot.StatusCode, err)
	}

	snap := c.must(http.MethodGet, "/v1/devices/"+dev+"/snapshot", nil, http.StatusOK, nil)
	var root domain.UIElement
	remarshal(t, snap.body["root"], &root)
	settings, ok := findUI(root, "Settings")
	if !ok {
		t.Fatalf("the adb phone's home screen has no Settings icon: %+v", root)
	}
	r := c.must(http.MethodPost, "/v1/devices/"+dev+"/actions", map[string]any{"action": "tap", "arguments": map[string]any{"ref": settings.Ref},
		"idempotencyKey": "serve-adb-tap", "leaseId": lease, "observedFrame": str(t, snap.body, "frameId")}, http.StatusOK, nil)
	if r.body["state"] != "committed" {
		t.Fatalf("tap: got %v; want committed", r.body)
	}
	if result, _ := r.body["result"].(map[string]any); result["targetText"] != "Settings" {
		t.Errorf("tap: got result %v; want the Settings icon as its target", r.body["result"])
	}
	after := c.must(http.MethodGet, "/v1/devices/"+dev+"/snapshot", nil, http.StatusOK, nil)
	remarshal(t, after.body["root"], &root)
	if _, ok := findUI(root, "Wi-Fi"); !ok {
		t.Errorf("after the tap the adb phone does not show Settings (no Wi-Fi row)")
	}
	c.must(http.MethodDelete, "/v1/devices/"+dev+"/lease?leaseId="+lease, nil, http.StatusNoContent, nil)
}

// remarshal decodes a JSON value already decoded as any into v.
func remarshal(t *testing.T, from, v any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}
