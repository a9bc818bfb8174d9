package service

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// TestEveryListPagesOneWay checks the one paging rule (docs/decisions.md,
// "Paging") on every list of the running service: a limit below 1 or not a
// number and a cursor the list did not return are refused the same way
// (400 invalid_argument naming the field), a limit above the maximum is
// clamped, and every answer is one the OpenAPI document describes.
func TestEveryListPagesOneWay(t *testing.T) {
	a, base, c, sims := startWithSims(t, 1)
	operator, err := a.deps.Auth.Authenticate(httptest.NewRequest("GET", "/v1/devices", nil))
	if err != nil {
		t.Fatal(err)
	}
	started, err := a.app.Runs.StartRun.Handle(testutil.Context(t), runs.StartRun{Auth: operator,
		DeviceID: sims[0], Goal: "be listed", Executor: domain.ExecutorExternal})
	if err != nil {
		t.Fatal(err)
	}

	lists := []struct {
		path   string
		cursor string // the list's cursor parameter
	}{
		{"/v1/devices", "after"},
		{"/v1/leases", "after"},
		{"/v1/receipts", "before"},
		{"/v1/runs", "before"},
		{"/v1/runs/" + started.Run.RunID + "/frames", "after"},
		{"/v1/schedules", "after"},
		{"/v1/console/events", "before"},
		{"/v1/app-store/installations", "before"},
	}
	for _, l := range lists {
		t.Run(strings.TrimPrefix(l.path, "/v1/"), func(t *testing.T) {
			c.t = t
			for _, q := range []string{"limit=0", "limit=-1", "limit=ten", "limit=1.5", l.cursor + "=zzz"} {
				resp, body := c.do("GET", base+l.path+"?"+q, "", nil, true)
				var e struct {
					Error struct {
						Code  string `json:"code"`
						Field string `json:"field"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil {
					t.Fatalf("%s?%s: %v in %s", l.path, q, err, body)
				}
				if want := strings.Split(q, "=")[0]; resp.StatusCode != 400 || e.Error.Code != "invalid_argument" || e.Error.Field != want {
					t.Errorf("%s?%s: got %d %s; want 400 invalid_argument naming %s", l.path, q, resp.StatusCode, body, want)
				}
			}
			for _, q := range []string{"limit=1", "limit=100000"} {
				if resp, body := c.do("GET", base+l.path+"?"+q, "", nil, true); resp.StatusCode != 200 {
					t.Errorf("%s?%s: got %d %s; want 200", l.path, q, resp.StatusCode, body)
				}
			}
		})
	}
}
