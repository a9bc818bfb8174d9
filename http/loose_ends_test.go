package httpapi

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil/fleettest"
)

// mountedRouteKeys returns every route of s as "METHOD path" with each
// parameter written {}, the form of the app list.
func mountedRouteKeys(t *testing.T, s *Server) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	err := s.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil
		}
		tmpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil
		}
		for _, m := range methods {
			keys[appRouteKey(m, tmpl)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestAppRoutesExist: the app list names only routes the server mounts, and
// names every mounted route of spec 5.2's list for apps (runs, frames and
// the run script; reading one webhook).
func TestAppRoutesExist(t *testing.T) {
	s, _ := newTestServer(t, Deps{})
	mounted := mountedRouteKeys(t, s)
	// Hosted-only routes (checkout, say) are mounted in hosted mode only.
	hosted, _ := newTestServer(t, Deps{Mode: "hosted"})
	for r := range mountedRouteKeys(t, hosted) {
		mounted[r] = true
	}
	var stale []string
	for r := range appRoutes {
		if !mounted[r] {
			stale = append(stale, r)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("the app list names routes that are not mounted: %v", stale)
	}
	for _, r := range []string{
		"POST /v1/runs", "GET /v1/runs", "GET /v1/runs/{}", "POST /v1/runs/{}/pause", "POST /v1/runs/{}/resume",
		"POST /v1/runs/{}/cancel", "GET /v1/runs/{}/frames", "GET /v1/runs/{}/script", "GET /v1/frames/{}",
		"GET /v1/webhooks/{}", "GET /v1/devices/{}/driving", "POST /mcp",
	} {
		if !mounted[r] {
			t.Errorf("%s is not mounted", r)
		}
		if !appRoutes[r] {
			t.Errorf("%s is an app route of spec 5.2 but not on the app list", r)
		}
	}
}

// TestAppGateOnNewRoutes: an OAuth app reaches GET /v1/webhooks/{id} and
// is refused GET /v1/time (not on spec 5.2's list).
func TestAppGateOnNewRoutes(t *testing.T) {
	e := newWHEnv(t)
	id, _ := e.create("app", "https://hooks.example.com/app")
	if status, body := e.do("app", "GET", "/v1/webhooks/"+id, ""); status != http.StatusOK {
		t.Fatalf("app reading its webhook: got %d %v; want 200", status, body)
	}
	if status, body := e.do("app", "GET", "/v1/time", ""); status != http.StatusForbidden || errCode(body) != "permission_denied" {
		t.Fatalf("app reading the time: got %d %v; want 403 permission_denied", status, body)
	}
}

// TestServerTime: GET /v1/time answers the server's clock in both forms,
// to any authenticated caller without a scope, and refuses no credential.
func TestServerTime(t *testing.T) {
	e := newWHEnv(t)
	before := time.Now().UTC().Truncate(time.Microsecond)
	status, body := e.do("noscope", "GET", "/v1/time", "")
	after := time.Now().UTC()
	if status != http.StatusOK {
		t.Fatalf("got %d %v; want 200", status, body)
	}
	got, err := time.Parse(time.RFC3339Nano, body["time"].(string))
	if err != nil {
		t.Fatalf("time %v: %v", body["time"], err)
	}
	if got.Before(before) || got.After(after) || got.Location() != time.UTC {
		t.Fatalf("got %v; want a UTC time between %v and %v", got, before, after)
	}
	if sec := int64(body["unixSeconds"].(float64)); sec != got.Unix() {
		t.Fatalf("got unixSeconds %d; want %d, the same instant", sec, got.Unix())
	}
	req := httptest.NewRequest("GET", "/v1/time", nil)
	req.Header.Set("X-Test-Principal", "nobody")
	resp, raw := apitest.Do(t, e.s.Handler(), req)
	e.v.Check(t, req, resp, raw)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("got %d; want 401", resp.StatusCode)
	}
}

// TestMissingDeviceAnswersOneCode: a device the caller cannot see answers
// device_unavailable with reason not_found on every device route, read or
// command alike.
func TestMissingDeviceAnswersOneCode(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	missing := domain.NewID(domain.PrefixDevice)
	base := "/v1/devices/" + missing
	for _, r := range []struct{ method, path, body string }{
		{"GET", base, ""},
		{"GET", base + "/driving", ""},
		{"PATCH", base, `{"name":"x"}`},
		{"GET", base + "/screenshot", ""},
		{"GET", base + "/snapshot", ""},
		{"POST", base + "/lease", ""},
		{"PATCH", base + "/lease", `{"leaseId":"lse_x"}`},
		{"DELETE", base + "/lease?leaseId=lse_x", ""},
		{"POST", base + "/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"k1","leaseId":"lse_x"}`},
		{"POST", base + "/wake", `{"leaseId":"lse_x"}`},
		{"POST", base + "/stop", `{"leaseId":"lse_x"}`},
	} {
		t.Run(r.method+" "+r.path[len(base):], func(t *testing.T) {
			req := httptest.NewRequest(r.method, r.path, nil)
			if r.body != "" {
				req = httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
			}
			resp, b := apitest.Do(t, fs.s.Handler(), req)
			e := decodeErrorBody(t, b)
			if resp.StatusCode != http.StatusConflict || e["code"] != "device_unavailable" || e["reason"] != "not_found" || e["deviceId"] != missing {
				t.Fatalf("got %d %s; want 409 device_unavailable, reason not_found, deviceId %s", resp.StatusCode, b, missing)
			}
		})
	}
}
