package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
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

// TestAppsDevicesOfAnotherOrganisation names organisation A's phone where
// the app routes take a device in the body or the query: organisation B
// gets exactly the answer a device id that never existed gets, and A's
// phone is untouched (no request recorded for it).
func TestAppsDevicesOfAnotherOrganisation(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startHosted(t, idp)
	aud := "http://tenancy.test/mcp"
	orgA := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_a", "org_a", "admin"), app: a, org: "org_a"}
	orgB := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_b", "org_b", "admin")}
	ids, err := a.app.Fleet.RegisterDevices.Handle(testutil.Context(t), fleet.RegisterDevices{OrgID: orgA.org, Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		t.Fatalf("register a sim phone for organisation A: %v (%v)", err, ids)
	}
	theirs, never := ids[0], domain.NewID(domain.PrefixDevice)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/app-store/installations", `{"requestKey":"b-1","package":"com.example.calculator","version":"8.4","devices":["%s"]}`},
		{"POST", "/v1/app-library/inventory/refreshes", `{"requestKey":"b-2","devices":["%s"]}`},
		{"GET", "/v1/app-library/inventory?deviceId=%s", ""},
	} {
		call := func(dev string) string {
			path, body := tc.path, tc.body
			if strings.Contains(path, "%s") {
				path = fmt.Sprintf(path, dev)
			} else {
				body = fmt.Sprintf(body, dev)
			}
			st, h, b := orgB.do(tc.method, path, body)
			if st < 400 {
				t.Fatalf("%s %s with organisation A's phone: got %d %s; want a refusal", tc.method, tc.path, st, b)
			}
			return comparable(st, h, b, []string{theirs, never})
		}
		if got, want := call(theirs), call(never); got != want {
			t.Errorf("%s %s: another organisation's phone answers\n%s\nbut a never-existing one answers\n%s", tc.method, tc.path, got, want)
		}
	}
	st, _, body := orgA.do("GET", "/v1/app-store/installations", "")
	if st != http.StatusOK || strings.Contains(string(body), theirs) {
		t.Errorf("organisation A's installations: got %d %s; want none on its phone", st, body)
	}
}
