package service

import (
	"phonefleet/commands/fleet"
	"phonefleet/testutil"
)

// Live screens, live sessions and waits name a device: organisation A's
// phone must answer organisation B exactly as a device
// that never existed, with bodies that would be valid for A, so that a
// refusal comes from tenancy and not from validation.
func init() {
	var forClient *tenancyClient
	var deviceID string
	device := func(bodies map[string]string) func(c *tenancyClient) (map[string]string, map[string]string) {
		return func(c *tenancyClient) (map[string]string, map[string]string) {
			if forClient != c {
				ids, err := c.app.app.Fleet.RegisterDevices.Handle(testutil.Context(c.t),
					fleet.RegisterDevices{OrgID: c.org, Backend: "sim", Count: 1})
				if err != nil || len(ids) != 1 {
					c.t.Fatalf("register a sim phone for organisation A: %v (%v)", err, ids)
				}
				forClient, deviceID = c, ids[0]
			}
			return map[string]string{"deviceId": deviceID}, bodies
		}
	}
	tenancyFixtures["/v1/devices/{deviceId}/stream"] = device(nil)
	tenancyFixtures["/v1/devices/{deviceId}/live-session"] = device(map[string]string{"POST": `{"role":"watcher"}`})
	tenancyFixtures["/v1/devices/{deviceId}/wait"] = device(map[string]string{"POST": `{"until":"appears","text":"Settings","timeoutMs":1000}`})
}
