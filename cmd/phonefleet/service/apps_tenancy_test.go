package service

import (
	"encoding/json"
	"fmt"
	"net/http"

	"phonefleet/commands/fleet"
	"phonefleet/testutil"
)

// App store and library routes: organisation A gets a sim phone of its
// own, asks for an installation on it and an inventory refresh (each under
// a requestKey); B calls every route naming them.
func init() {
	var cached map[string]string
	apps := func(c *tenancyClient) (map[string]string, map[string]string) {
		if cached == nil {
			ids, err := c.app.app.Fleet.RegisterDevices.Handle(testutil.Context(c.t), fleet.RegisterDevices{OrgID: c.org, Backend: "sim", Count: 1})
			if err != nil || len(ids) != 1 {
				c.t.Fatalf("register a sim phone for organisation A: %v (%v)", err, ids)
			}
			status, _, body := c.do("POST", "/v1/app-store/installations",
				fmt.Sprintf(`{"requestKey":"tenancy-install-a","package":"com.example.calculator","version":"8.4","devices":[%q]}`, ids[0]))
			if status != http.StatusAccepted {
				c.t.Fatalf("install for organisation A: got %d %s", status, body)
			}
			var out struct {
				ID string `json:"installationId"`
			}
			if err := json.Unmarshal(body, &out); err != nil || out.ID == "" {
				c.t.Fatalf("install for organisation A: no installationId in %s", body)
			}
			status, _, body = c.do("POST", "/v1/app-library/inventory/refreshes", fmt.Sprintf(`{"requestKey":"tenancy-refresh-a","devices":[%q]}`, ids[0]))
			if status != http.StatusAccepted {
				c.t.Fatalf("refresh for organisation A: got %d %s", status, body)
			}
			cached = map[string]string{"installationId": out.ID, "requestKey": "tenancy-install-a"}
		}
		return cached, nil
	}
	for _, p := range []string{"/v1/app-store/installations/{installationId}", "/v1/app-store/installations/by-request/{requestKey}",
		"/v1/app-library/requests/{requestKey}"} {
		tenancyFixtures[p] = apps
	}
}
