package service

import (
	"encoding/json"
	"net/http"
)

// Schedule routes: organisation A makes a schedule through the API (any
// free device, so it needs no phone); organisation B calls every schedule
// route with its id. B's PATCH and DELETE must be refused as for a
// schedule that never existed, which also means they change nothing.
func init() {
	schedule := func(c *tenancyClient) (map[string]string, map[string]string) {
		status, _, body := c.do("POST", "/v1/schedules", `{"name":"tenancy","cron":"0 3 29 2 *","goal":"open settings"}`)
		if status != http.StatusCreated {
			c.t.Fatalf("create a schedule for organisation A: got %d %s", status, body)
		}
		var out struct {
			ID string `json:"scheduleId"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.ID == "" {
			c.t.Fatalf("create a schedule for organisation A: no scheduleId in %s", body)
		}
		return map[string]string{"scheduleId": out.ID}, map[string]string{"PATCH": `{"enabled":false}`}
	}
	for _, p := range []string{"/v1/schedules/{scheduleId}", "/v1/schedules/{scheduleId}/firings"} {
		tenancyFixtures[p] = schedule
	}
}
