package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/schedules"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// schPrincipals are the callers of the schedule route tests, chosen per
// request with the X-Test-Principal header.
var schPrincipals = testPrincipals{
	"runner":    {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}},
	"reader":    {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_2", Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeRunsStart}},
	"subset":    {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_3", Scopes: domain.AllScopes, Devices: []string{"dev_00000000000000000000000000000001"}},
	"other-org": {OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

// schEnv is a server whose schedule routes run against a real database
// with the schedules (and device) read models running.
type schEnv struct {
	t *testing.T
	s *Server
	v *apitest.Validator
}

func newSchEnv(t *testing.T) *schEnv {
	t.Helper()
	_, store := testStore(t, 6)
	runner := runProjections(t, store, append(projections.Fleet(), projections.Schedules{})...)
	sc := schedules.New(schedules.Config{Store: store, ReadModels: testutil.ReadModels{RM: runner}})
	app := commands.NewApplication(commands.Capabilities{Schedules: sc})
	s, _ := newTestServer(t, Deps{Auth: schPrincipals, App: &app})
	return &schEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler())}
}

// do sends one request as principal and checks the answer against the
// served OpenAPI document; it returns the status and the raw body.
func (e *schEnv) do(principal, method, path, body string) (int, []byte) {
	e.t.Helper()
	resp, raw := call(e.t, e.s, e.v, principal, httptest.NewRequest(method, path, strings.NewReader(body)))
	return resp.StatusCode, raw
}

func (e *schEnv) json(principal, method, path, body string) (int, map[string]any) {
	e.t.Helper()
	status, raw := e.do(principal, method, path, body)
	var out map[string]any
	if len(raw) > 0 {
		out = jsonObject(e.t, method+" "+path, raw)
	}
	return status, out
}

const schBody = `{"name":"weekday check","cron":"0 9 * * 1-5","timezone":"Europe/Paris","goal":"open settings and check the battery","maxSteps":20,"successCheck":{"text":"Battery"}}`

func TestScheduleRoutesCreateReadChangeAndDelete(t *testing.T) {
	e := newSchEnv(t)
	status, created := e.json("runner", "POST", "/v1/schedules", schBody)
	if status != http.StatusCreated {
		t.Fatalf("create: got %d %v; want 201", status, created)
	}
	id := created["scheduleId"].(string)
	if created["enabled"] != true || created["deviceId"] != nil || created["executor"] != "builtin" || created["deadlineSeconds"] != float64(1800) || created["nextFireAt"] == nil {
		t.Errorf("create: got %v; want an enabled builtin schedule on any device with defaults filled in", created)
	}
	next, _ := time.Parse(time.RFC3339, created["nextFireAt"].(string))
	if paris, _ := time.LoadLocation("Europe/Paris"); next.In(paris).Hour() != 9 || next.In(paris).Weekday() == time.Saturday || next.In(paris).Weekday() == time.Sunday {
		t.Errorf("nextFireAt %s: want 09:00 on a weekday in Paris", next)
	}

	if status, got := e.json("runner", "GET", "/v1/schedules/"+id, ""); status != http.StatusOK || got["name"] != "weekday check" {
		t.Errorf("get: got %d %v", status, got)
	}
	status, list := e.json("runner", "GET", "/v1/schedules?limit=10", "")
	if items, _ := list["schedules"].([]any); status != http.StatusOK || len(items) != 1 {
		t.Errorf("list: got %d %v; want the one schedule", status, list)
	}
	if status, got := e.json("other-org", "GET", "/v1/schedules", ""); status != http.StatusOK || len(got["schedules"].([]any)) != 0 {
		t.Errorf("list as another organisation: got %d %v; want none", status, got)
	}

	status, off := e.json("runner", "PATCH", "/v1/schedules/"+id, `{"enabled":false,"goal":"open settings","successCheck":null}`)
	if status != http.StatusOK || off["enabled"] != false || off["nextFireAt"] != nil || off["goal"] != "open settings" || off["successCheck"] != nil || off["cron"] != "0 9 * * 1-5" {
		t.Errorf("patch: got %d %v; want switched off with the new goal, no check, the rest kept", status, off)
	}
	status, on := e.json("runner", "PATCH", "/v1/schedules/"+id, `{"enabled":true,"cron":"@hourly","timezone":"UTC"}`)
	if status != http.StatusOK || on["nextFireAt"] == nil || on["cron"] != "@hourly" {
		t.Errorf("patch: got %d %v; want switched on, hourly", status, on)
	}

	if status, got := e.json("runner", "GET", "/v1/schedules/"+id+"/firings", ""); status != http.StatusOK || len(got["firings"].([]any)) != 0 {
		t.Errorf("firings: got %d %v; want none yet", status, got)
	}

	if status, _ := e.do("runner", "DELETE", "/v1/schedules/"+id, ""); status != http.StatusNoContent {
		t.Errorf("delete: got %d; want 204", status)
	}
	if status, got := e.json("runner", "GET", "/v1/schedules/"+id, ""); status != http.StatusNotFound || errCode(got) != "not_found" {
		t.Errorf("get after delete: got %d %v; want 404 not_found", status, got)
	}
}

func TestScheduleRoutesRefuseInvalidSettingsNamingTheField(t *testing.T) {
	e := newSchEnv(t)
	for _, tc := range []struct {
		name, body, field, mention string
	}{
		{"six-field cron", `{"name":"n","cron":"0 0 9 * * *","goal":"g"}`, "cron", "expected exactly 5 fields"},
		{"out of range", `{"name":"n","cron":"99 * * * *","goal":"g"}`, "cron", "99"},
		{"never fires", `{"name":"n","cron":"0 0 31 2 *","goal":"g"}`, "cron", "never fires"},
		{"unknown zone", `{"name":"n","cron":"@daily","timezone":"Nowhere/City","goal":"g"}`, "timezone", "Nowhere/City"},
		{"no goal", `{"name":"n","cron":"@daily"}`, "goal", "goal"},
		{"external", `{"name":"n","cron":"@daily","goal":"g","executor":"external"}`, "executor", "builtin"},
		{"unknown device", `{"name":"n","cron":"@daily","goal":"g","deviceId":"dev_0123456789abcdef0123456789abcdef"}`, "deviceId", "dev_0123456789abcdef0123456789abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.json("runner", "POST", "/v1/schedules", tc.body)
			er, _ := body["error"].(map[string]any)
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" || er["field"] != tc.field {
				t.Fatalf("got %d %v; want 400 invalid_argument naming %s", status, body, tc.field)
			}
			if msg, _ := er["message"].(string); !strings.Contains(msg, tc.mention) {
				t.Errorf("got message %q; want it to name %q", msg, tc.mention)
			}
		})
	}
	_, created := e.json("runner", "POST", "/v1/schedules", schBody)
	id := created["scheduleId"].(string)
	if status, body := e.json("runner", "PATCH", "/v1/schedules/"+id, `{"cron":"every day"}`); status != http.StatusBadRequest || errCode(body) != "invalid_argument" {
		t.Errorf("patch with an invalid cron: got %d %v; want 400 invalid_argument", status, body)
	}
	// One paging rule (docs/decisions.md): below 1 or not a number is
	// refused naming the field, above the maximum is clamped.
	for _, q := range []string{"limit=0", "limit=-3", "limit=ten", "after=zzz"} {
		status, body := e.json("runner", "GET", "/v1/schedules?"+q, "")
		if er, _ := body["error"].(map[string]any); status != http.StatusBadRequest || er["field"] != strings.Split(q, "=")[0] {
			t.Errorf("%s: got %d %v; want 400 naming the field", q, status, body)
		}
	}
	if status, body := e.json("runner", "GET", "/v1/schedules?limit=500", ""); status != http.StatusOK {
		t.Errorf("limit 500: got %d %v; want 200 (clamped to 100)", status, body)
	}
}

func TestScheduleRoutesNeedRunsStartAndDevicesAct(t *testing.T) {
	e := newSchEnv(t)
	_, created := e.json("runner", "POST", "/v1/schedules", schBody)
	id := created["scheduleId"].(string)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/schedules", schBody},
		{"GET", "/v1/schedules", ""},
		{"GET", "/v1/schedules/" + id, ""},
		{"PATCH", "/v1/schedules/" + id, `{"enabled":false}`},
		{"DELETE", "/v1/schedules/" + id, ""},
		{"GET", "/v1/schedules/" + id + "/firings", ""},
	} {
		status, body := e.json("reader", r.method, r.path, r.body)
		er, _ := body["error"].(map[string]any)
		if status != http.StatusForbidden || errCode(body) != "permission_denied" || er["scope"] != "devices:act" {
			t.Errorf("%s %s without devices:act: got %d %v; want 403 naming devices:act", r.method, r.path, status, body)
		}
	}
}

// TestAnotherOrganisationsScheduleAnswersLikeAMissingOne walks every
// schedule route with another organisation's id, a well-formed id that
// names nothing and a malformed one: one answer, byte for byte apart from
// the id the message names.
func TestAnotherOrganisationsScheduleAnswersLikeAMissingOne(t *testing.T) {
	e := newSchEnv(t)
	_, created := e.json("runner", "POST", "/v1/schedules", `{"name":"n","cron":"@daily","goal":"g","deviceId":null}`)
	id := created["scheduleId"].(string)
	missing := domain.NewID(domain.PrefixSchedule)
	for _, r := range []struct{ method, suffix, body string }{
		{"GET", "", ""},
		{"PATCH", "", `{"enabled":false}`},
		{"DELETE", "", ""},
		{"GET", "/firings", ""},
	} {
		theirs, theirBody := e.do("other-org", r.method, "/v1/schedules/"+id+r.suffix, r.body)
		none, noneBody := e.do("other-org", r.method, "/v1/schedules/"+missing+r.suffix, r.body)
		bad, badBody := e.do("other-org", r.method, "/v1/schedules/nonsense"+r.suffix, r.body)
		norm := func(b []byte, id string) string { return strings.ReplaceAll(string(b), id, "ID") }
		if theirs != http.StatusNotFound || theirs != none || none != bad ||
			norm(theirBody, id) != norm(noneBody, missing) || norm(noneBody, missing) != norm(badBody, "nonsense") {
			t.Errorf("%s %s: got %d %s / %d %s / %d %s; want one not_found answer", r.method, r.suffix,
				theirs, theirBody, none, noneBody, bad, badBody)
		}
	}
	// The schedule is untouched.
	if status, got := e.json("runner", "GET", "/v1/schedules/"+id, ""); status != http.StatusOK || got["enabled"] != true {
		t.Errorf("got %d %v; want the schedule unchanged", status, got)
	}
	// A credential narrowed to other devices does not see a schedule on a
	// device outside its subset; one on any device it does.
	if status, got := e.json("subset", "GET", "/v1/schedules/"+id, ""); status != http.StatusOK {
		t.Errorf("subset key, any-device schedule: got %d %v; want 200", status, got)
	}
}
