package service

import (
	"encoding/json"
	"fmt"
	"net/http"

	"phonefleet/commands/fleet"
	"phonefleet/testutil"
)

// Fleet routes: organisation A gets a sim phone (registered as the operator
// command does), leases it, acts once (a receipt) and observes (a frame).
func init() {
	var cached map[string]string
	fleet := func(c *tenancyClient) (map[string]string, map[string]string) {
		if cached == nil {
			cached = fleetFixture(c)
		}
		bodies := map[string]string{
			"PATCH": `{"name":"renamed"}`,
			"POST":  fmt.Sprintf(`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"tenancy-b","leaseId":%q}`, cached["leaseId"]),
		}
		return map[string]string{"deviceId": cached["deviceId"], "frameId": cached["frameId"],
			"idempotencyKey": cached["idempotencyKey"]}, bodies
	}
	for _, p := range []string{"/v1/devices/{deviceId}", "/v1/devices/{deviceId}/actions", "/v1/devices/{deviceId}/driving",
		"/v1/devices/{deviceId}/lease", "/v1/devices/{deviceId}/screenshot", "/v1/devices/{deviceId}/snapshot",
		"/v1/devices/{deviceId}/stop", "/v1/devices/{deviceId}/wake", "/v1/frames/{frameId}",
		"/v1/receipts/{idempotencyKey}", "/v1/receipts/{idempotencyKey}/reviewed"} {
		tenancyFixtures[p] = fleet
	}
}

func fleetFixture(c *tenancyClient) map[string]string {
	ids, err := c.app.app.Fleet.RegisterDevices.Handle(testutil.Context(c.t),
		fleet.RegisterDevices{OrgID: c.org, Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		c.t.Fatalf("register a sim phone for organisation A: %v (%v)", err, ids)
	}
	dev := ids[0]
	status, _, body := c.do("POST", "/v1/devices/"+dev+"/lease", `{}`)
	if status != http.StatusOK && status != http.StatusCreated {
		c.t.Fatalf("lease organisation A's phone: got %d %s", status, body)
	}
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	if err := json.Unmarshal(body, &lease); err != nil || lease.LeaseID == "" {
		c.t.Fatalf("lease organisation A's phone: no leaseId in %s", body)
	}
	status, _, body = c.do("POST", "/v1/devices/"+dev+"/actions",
		fmt.Sprintf(`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"tenancy-a","leaseId":%q}`, lease.LeaseID))
	if status >= 300 {
		c.t.Fatalf("act on organisation A's phone: got %d %s", status, body)
	}
	status, _, body = c.do("GET", "/v1/devices/"+dev+"/screenshot?format=json", "")
	var frame struct {
		FrameID string `json:"frameId"`
	}
	if err := json.Unmarshal(body, &frame); status != http.StatusOK || err != nil || frame.FrameID == "" {
		c.t.Fatalf("observe organisation A's phone: got %d %.200s", status, body)
	}
	return map[string]string{"deviceId": dev, "leaseId": lease.LeaseID, "frameId": frame.FrameID, "idempotencyKey": "tenancy-a"}
}
