package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The devices of the usage route tests.
const (
	usageDevA = "dev_00000000000000000000000000000a01"
	usageDevB = "dev_00000000000000000000000000000b02"
	usageDevZ = "dev_00000000000000000000000000000f99" // organisation B's
)

// usagePrincipals are the callers of the usage route tests, chosen per
// request with the X-Test-Principal header.
var usagePrincipals = testPrincipals{
	"member":    {OrgID: "org_ua", Kind: domain.PrincipalConsole, UserID: "u_m", Role: domain.RoleMember},
	"reader":    {OrgID: "org_ua", Kind: domain.PrincipalAPIKey, APIKeyID: "key_r", Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"subset":    {OrgID: "org_ua", Kind: domain.PrincipalAPIKey, APIKeyID: "key_s", Scopes: []domain.Scope{domain.ScopeDevicesRead}, Devices: []string{usageDevA}},
	"runner":    {OrgID: "org_ua", Kind: domain.PrincipalAPIKey, APIKeyID: "key_x", Scopes: []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}},
	"app":       {OrgID: "org_ua", Kind: domain.PrincipalApp, UserID: "u_m", ClientID: "client_1", Scopes: domain.AllScopes},
	"other-org": {OrgID: "org_ub", Kind: domain.PrincipalConsole, UserID: "u_b", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

// usageEnv is a server whose usage route answers from a real usage read
// model, counting up to a fixed instant.
type usageEnv struct {
	t     *testing.T
	s     *Server
	v     *apitest.Validator
	store *eventstore.Store
}

func newUsageEnv(t *testing.T, now time.Time) *usageEnv {
	t.Helper()
	_, store := testStore(t, 4)
	runner := runProjections(t, store, projections.Usage{}, projections.Copilot{})
	p := provisioning.New(provisioning.Config{Store: store, Now: func() time.Time { return now },
		ReadModels: testutil.ReadModels{RM: runner}})
	app := commands.NewApplication(commands.Capabilities{Provisioning: p})
	s, _ := newTestServer(t, Deps{Auth: usagePrincipals, App: &app})
	return &usageEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), store: store}
}

// lease records a lease of device held by holder for org, from..until,
// released at end (nil: still held).
func (e *usageEnv) lease(org, device string, holder domain.Actor, from, until time.Time, end *time.Time) {
	e.t.Helper()
	leaseID := domain.NewID(domain.PrefixLease)
	evs := []domain.Event{domain.LeaseAcquired{DeviceID: device, LeaseID: leaseID, FencingToken: 1, Holder: holder, AcquiredAt: from, ExpiresAt: until}}
	if end != nil {
		evs = append(evs, domain.LeaseReleased{DeviceID: device, LeaseID: leaseID, ReleasedAt: *end})
	}
	news, err := eventstore.Encode(domain.Events, org, evs...)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Append(testutil.Context(e.t), domain.DeviceStream(device), eventstore.AnyVersion, news...); err != nil {
		e.t.Fatal(err)
	}
}

// get sends GET path as principal, checks the answer against the served
// OpenAPI document, and returns the status and the decoded body.
func (e *usageEnv) get(principal, path string) (int, map[string]any) {
	e.t.Helper()
	resp, raw := call(e.t, e.s, e.v, principal, httptest.NewRequest(http.MethodGet, path, nil))
	out := jsonObject(e.t, "GET "+path, raw)
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Cache-Control") != "no-store" {
		e.t.Errorf("GET %s: Cache-Control %q; want no-store", path, resp.Header.Get("Cache-Control"))
	}
	return resp.StatusCode, out
}

// TestUsageRoute: device time per device and in total, split at the
// month's end, with a run's time apart and an open lease counted to now;
// who may read it; the period rules; tenancy.
func TestUsageRoute(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC)
	e := newUsageEnv(t, now)
	person := domain.Actor{Kind: domain.ActorUser, ID: "u_m"}
	run := domain.Actor{Kind: domain.ActorRun, ID: "run_1"}
	tm := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	end := func(s string) *time.Time { v := tm(s); return &v }
	// Device A: 90.5 s on 10 February; a lease held since 23:45 on the
	// last day of February, still held at 00:30 (15 min February, 30 min
	// March).
	e.lease("org_ua", usageDevA, person, tm("2026-02-10T10:00:00Z"), tm("2026-02-10T11:00:00Z"), end("2026-02-10T10:01:30.5Z"))
	e.lease("org_ua", usageDevA, person, tm("2026-02-28T23:45:00Z"), tm("2026-03-01T00:45:00Z"), nil)
	// Device B: a run held it for 20 minutes in February.
	e.lease("org_ua", usageDevB, run, tm("2026-02-20T08:00:00Z"), tm("2026-02-20T09:00:00Z"), end("2026-02-20T08:20:00Z"))
	// Organisation B's device.
	e.lease("org_ub", usageDevZ, person, tm("2026-02-11T08:00:00Z"), tm("2026-02-11T09:00:00Z"), end("2026-02-11T08:10:00Z"))

	status, feb := e.get("member", "/v1/usage?period=2026-02-01")
	if status != http.StatusOK {
		t.Fatalf("February: got %d %v", status, feb)
	}
	wantFeb := map[string]any{
		"period": "2026-02-01", "periodStart": "2026-02-01T00:00:00.000000Z", "periodEnd": "2026-03-01T00:00:00.000000Z",
		"asOf": "2026-03-01T00:30:00.000000Z", "totalSeconds": 90.5 + 900 + 1200, "leaseSeconds": 90.5 + 900, "runSeconds": 1200.0,
	}
	for k, v := range wantFeb {
		if feb[k] != v {
			t.Errorf("February %s: got %v; want %v", k, feb[k], v)
		}
	}
	devices, _ := feb["devices"].([]any)
	if len(devices) != 2 {
		t.Fatalf("February devices: got %v; want A and B", feb["devices"])
	}
	a, b := devices[0].(map[string]any), devices[1].(map[string]any)
	if a["deviceId"] != usageDevA || a["seconds"] != 990.5 || a["leaseSeconds"] != 990.5 || a["runSeconds"] != 0.0 {
		t.Errorf("device A: got %v; want 990.5 s of leases", a)
	}
	if b["deviceId"] != usageDevB || b["seconds"] != 1200.0 || b["leaseSeconds"] != 0.0 || b["runSeconds"] != 1200.0 {
		t.Errorf("device B: got %v; want 1200 s of a run", b)
	}

	// The current period is the default: March, the open lease to now.
	status, mar := e.get("reader", "/v1/usage")
	if status != http.StatusOK || mar["period"] != "2026-03-01" || mar["totalSeconds"] != 1800.0 || len(mar["devices"].([]any)) != 1 {
		t.Errorf("current period: got %d %v; want March with device A's 1800 s", status, mar)
	}

	t.Run("a device", func(t *testing.T) {
		status, got := e.get("member", "/v1/usage?period=2026-02-01&deviceId="+usageDevB)
		if status != http.StatusOK || got["totalSeconds"] != 1200.0 || len(got["devices"].([]any)) != 1 {
			t.Errorf("device B: got %d %v; want its 1200 s only", status, got)
		}
	})
	t.Run("a key narrowed to device A", func(t *testing.T) {
		status, got := e.get("subset", "/v1/usage?period=2026-02-01")
		if status != http.StatusOK || got["totalSeconds"] != 990.5 || len(got["devices"].([]any)) != 1 {
			t.Errorf("got %d %v; want device A's 990.5 s only", status, got)
		}
		_, outside := e.get("subset", "/v1/usage?period=2026-02-01&deviceId="+usageDevB)
		_, unknown := e.get("subset", "/v1/usage?period=2026-02-01&deviceId=dev_00000000000000000000000000000c03")
		if len(outside["devices"].([]any)) != 0 || outside["totalSeconds"] != 0.0 || !sameJSON(outside, unknown) {
			t.Errorf("device B outside the key: got %v; unknown device: %v; want one empty report", outside, unknown)
		}
	})
	t.Run("tenancy", func(t *testing.T) {
		status, got := e.get("other-org", "/v1/usage?period=2026-02-01")
		if status != http.StatusOK || got["totalSeconds"] != 600.0 || len(got["devices"].([]any)) != 1 ||
			got["devices"].([]any)[0].(map[string]any)["deviceId"] != usageDevZ {
			t.Errorf("organisation B: got %d %v; want its own device's 600 s only", status, got)
		}
		_, foreign := e.get("other-org", "/v1/usage?period=2026-02-01&deviceId="+usageDevA)
		_, missing := e.get("other-org", "/v1/usage?period=2026-02-01&deviceId=dev_00000000000000000000000000000c03")
		if len(foreign["devices"].([]any)) != 0 || !sameJSON(foreign, missing) {
			t.Errorf("organisation A's device asked by B: got %v; a missing one: %v; want the same empty report", foreign, missing)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		for _, tt := range []struct {
			principal, path string
			status          int
			code            domain.Code
		}{
			{"member", "/v1/usage?period=2026-02-15", http.StatusBadRequest, domain.CodeInvalidArgument},
			{"member", "/v1/usage?period=2026-02", http.StatusBadRequest, domain.CodeInvalidArgument},
			{"member", "/v1/usage?period=February", http.StatusBadRequest, domain.CodeInvalidArgument},
			{"runner", "/v1/usage", http.StatusForbidden, domain.CodePermissionDenied},
			{"app", "/v1/usage", http.StatusForbidden, domain.CodePermissionDenied},
		} {
			t.Run(tt.principal+" "+tt.path, func(t *testing.T) {
				status, got := e.get(tt.principal, tt.path)
				body, _ := got["error"].(map[string]any)
				if status != tt.status || body["code"] != string(tt.code) {
					t.Fatalf("got %d %v; want %d %s", status, got, tt.status, tt.code)
				}
				switch tt.principal {
				case "member":
					if body["field"] != "period" {
						t.Errorf("got %v; want the refusal to name the field period", body)
					}
				case "runner":
					if body["scope"] != string(domain.ScopeDevicesRead) {
						t.Errorf("got %v; want the refusal to name devices:read", body)
					}
				case "app":
					if body["where"] != "the console's usage page" {
						t.Errorf("got %v; want the refusal to name the console's usage page", body)
					}
				}
			})
		}
	})
}

// sameJSON reports whether a and b encode alike.
func sameJSON(a, b map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
