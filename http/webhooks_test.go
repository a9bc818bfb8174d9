package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// whPrincipals are the callers of the webhook route tests, chosen per
// request with the X-Test-Principal header.
var whPrincipals = testPrincipals{
	"console":   {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ann", Role: domain.RoleMember, Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"admin":     {OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_bob", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
	"app":       {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_cat", ClientID: "client_x", Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"app-other": {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_dan", ClientID: "client_x", Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"key":       {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesRead}},
	"noscope":   {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_2", Scopes: []domain.Scope{domain.ScopeDevicesAct, domain.ScopeRunsStart}},
	"other-org": {OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes},
}

type whResolver map[string]string

func (m whResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// whEnv is a server whose webhook routes run against a real database with
// the webhooks projection running.
type whEnv struct {
	t    *testing.T
	s    *Server
	v    *apitest.Validator
	pool *pgxpool.Pool
	base webhooks.Webhooks
}

func newWHEnv(t *testing.T) *whEnv {
	t.Helper()
	pool, store := testStore(t, 6)
	runner := runProjections(t, store, projections.Webhooks{})
	box, err := domain.NewSecretBox(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	base := webhooks.Webhooks{Store: store, Box: box, ReadModels: testutil.ReadModels{RM: runner}}
	// The hosted policy: no private address at all.
	resolver := whResolver{"hooks.example.com": "93.184.216.34", "intranet.example.com": "192.168.7.7"}
	app := commands.NewApplication(commands.Capabilities{Webhooks: &webhooks.Capability{Webhooks: base,
		Create: webhooks.CreateWebhookHandler{Resolver: resolver}, Queries: projections.WebhookQueries{DB: pool}}})
	s, _ := newTestServer(t, Deps{Auth: whPrincipals, App: &app})
	return &whEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), pool: pool, base: base}
}

// do sends one request as principal and checks the answer against the
// served OpenAPI document; it returns the status and the decoded body.
func (e *whEnv) do(principal, method, path, body string) (int, map[string]any) {
	e.t.Helper()
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, path, nil)
	} else {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
	}
	resp, raw := call(e.t, e.s, e.v, principal, req)
	var out map[string]any
	if len(raw) > 0 {
		out = jsonObject(e.t, method+" "+path, raw)
	}
	return resp.StatusCode, out
}

func (e *whEnv) create(principal, url string) (string, string) {
	e.t.Helper()
	status, body := e.do(principal, "POST", "/v1/webhooks", `{"url":`+strconv.Quote(url)+`,"events":["run.ended"]}`)
	if status != http.StatusCreated {
		e.t.Fatalf("create as %s: got %d %v; want 201", principal, status, body)
	}
	return body["webhook"].(map[string]any)["webhookId"].(string), body["secret"].(string)
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func errReason(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	r, _ := e["reason"].(string)
	return r
}

func TestWebhookRoutesLifecycle(t *testing.T) {
	e := newWHEnv(t)
	status, body := e.do("console", "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/in","events":["run.ended","fulfilment.changed"]}`)
	if status != http.StatusCreated {
		t.Fatalf("create: got %d %v; want 201", status, body)
	}
	wh := body["webhook"].(map[string]any)
	id, secret := wh["webhookId"].(string), body["secret"].(string)
	if wh["secretHint"] != secret[len(secret)-4:] || wh["enabled"] != true || wh["secretRotatedAt"] != nil || wh["url"] != "https://hooks.example.com/in" {
		t.Fatalf("create: got %v; want hint = last 4 of the secret, enabled, never rotated", wh)
	}

	t.Run("list shows it without the secret", func(t *testing.T) {
		status, body := e.do("console", "GET", "/v1/webhooks", "")
		list := body["webhooks"].([]any)
		if status != http.StatusOK || len(list) != 1 || list[0].(map[string]any)["webhookId"] != id {
			t.Fatalf("got %d %v; want the one webhook", status, body)
		}
		raw, _ := json.Marshal(body)
		if strings.Contains(string(raw), secret) {
			t.Fatal("the list reveals the secret")
		}
	})
	t.Run("read one without the secret", func(t *testing.T) {
		status, body := e.do("console", "GET", "/v1/webhooks/"+id, "")
		if status != http.StatusOK || body["webhookId"] != id || body["url"] != "https://hooks.example.com/in" || body["secret"] != nil {
			t.Fatalf("got %d %v; want 200 with the webhook and no secret", status, body)
		}
		for _, bad := range []string{"nope", domain.NewID(domain.PrefixWebhook)} {
			if status, body := e.do("console", "GET", "/v1/webhooks/"+bad, ""); status != http.StatusNotFound || errCode(body) != "not_found" {
				t.Errorf("GET /v1/webhooks/%s: got %d %v; want 404 not_found", bad, status, body)
			}
		}
	})
	t.Run("patch", func(t *testing.T) {
		for _, tc := range []struct {
			name, body string
			status     int
			enabled    any
		}{
			{"switch off", `{"enabled":false}`, 200, false},
			{"switch off again", `{"enabled":false}`, 200, false},
			{"switch on", `{"enabled":true}`, 200, true},
			{"enabled missing", `{}`, 400, nil},
			{"enabled not a boolean", `{"enabled":"yes"}`, 400, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, body := e.do("console", "PATCH", "/v1/webhooks/"+id, tc.body)
				if status != tc.status || (tc.enabled != nil && body["enabled"] != tc.enabled) {
					t.Fatalf("got %d %v; want %d enabled %v", status, body, tc.status, tc.enabled)
				}
			})
		}
	})
	t.Run("rotate returns a new secret once", func(t *testing.T) {
		status, body := e.do("console", "POST", "/v1/webhooks/"+id+"/rotate", "")
		if status != http.StatusOK {
			t.Fatalf("got %d %v; want 200", status, body)
		}
		next := body["secret"].(string)
		wh := body["webhook"].(map[string]any)
		if next == secret || wh["secretHint"] != next[len(next)-4:] || wh["secretRotatedAt"] == nil {
			t.Fatalf("got %v; want a new secret, its hint and secretRotatedAt", body)
		}
	})
	var queued []string
	t.Run("test queues a pending run.ended delivery", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			status, body := e.do("console", "POST", "/v1/webhooks/"+id+"/test", "")
			if status != http.StatusAccepted || body["status"] != "pending" {
				t.Fatalf("got %d %v; want 202 pending", status, body)
			}
			queued = append(queued, body["deliveryId"].(string))
		}
		status, body := e.do("console", "GET", "/v1/webhooks/"+id+"/deliveries", "")
		rows := body["deliveries"].([]any)
		if status != http.StatusOK || len(rows) != 5 || body["nextBefore"] != nil {
			t.Fatalf("got %d %v; want 5 rows on one page", status, body)
		}
		first := rows[0].(map[string]any)
		if first["status"] != "pending" || first["attempts"] != float64(0) || first["responseStatus"] != nil || first["event"] != "run.ended" ||
			!strings.Contains(first["payloadPreview"].(string), `"test":true`) {
			t.Fatalf("got row %v; want a pending run.ended test delivery never tried", first)
		}
	})
	t.Run("deliveries page newest first", func(t *testing.T) {
		var got []string
		cursor := ""
		for page := 0; page < 5; page++ {
			path := "/v1/webhooks/" + id + "/deliveries?limit=2"
			if cursor != "" {
				path += "&nextBefore=" + cursor
			}
			status, body := e.do("console", "GET", path, "")
			if status != http.StatusOK {
				t.Fatalf("got %d %v; want 200", status, body)
			}
			for _, r := range body["deliveries"].([]any) {
				got = append(got, r.(map[string]any)["deliveryId"].(string))
			}
			next, _ := body["nextBefore"].(string)
			if next == "" {
				break
			}
			cursor = next
		}
		if len(got) != 5 {
			t.Fatalf("got %d deliveries over the pages; want 5", len(got))
		}
		// The tests were queued one after the other: newest first is the
		// reverse of queueing order, unless two share a microsecond.
		seen := map[string]bool{}
		for _, g := range got {
			if seen[g] {
				t.Fatalf("delivery %s appears twice across pages", g)
			}
			seen[g] = true
		}
		if got[0] != queued[4] || got[4] != queued[0] {
			t.Errorf("got order %v; want newest first (%v reversed)", got, queued)
		}
	})
	t.Run("bad page parameters", func(t *testing.T) {
		for _, q := range []string{"limit=0", "limit=-1", "limit=ten", "nextBefore=yesterday", "nextBefore=123_dlv_nothex"} {
			status, body := e.do("console", "GET", "/v1/webhooks/"+id+"/deliveries?"+q, "")
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" {
				t.Errorf("%s: got %d %v; want 400 invalid_argument", q, status, body)
			}
		}
		for _, q := range []string{"limit=100", "limit=101"} { // above the maximum: clamped
			if status, _ := e.do("console", "GET", "/v1/webhooks/"+id+"/deliveries?"+q, ""); status != http.StatusOK {
				t.Errorf("%s: got %d; want 200", q, status)
			}
		}
	})
	t.Run("test on a switched-off webhook", func(t *testing.T) {
		e.do("console", "PATCH", "/v1/webhooks/"+id, `{"enabled":false}`)
		status, body := e.do("console", "POST", "/v1/webhooks/"+id+"/test", "")
		// invalid_argument naming the state: wrong_state is the order code (spec 7.2).
		if e, _ := body["error"].(map[string]any); status != http.StatusBadRequest || errCode(body) != "invalid_argument" || e["state"] != "disabled" {
			t.Fatalf("got %d %v; want 400 invalid_argument with state disabled", status, body)
		}
		rows := e.deliveryStatuses(id)
		for d, s := range rows {
			if s != "failed" {
				t.Errorf("delivery %s: got %s after switching off; want failed (abandoned)", d, s)
			}
		}
	})
	t.Run("delete removes it and its deliveries", func(t *testing.T) {
		status, body := e.do("console", "DELETE", "/v1/webhooks/"+id, "")
		if status != http.StatusNoContent || body != nil {
			t.Fatalf("got %d %v; want 204 with no body", status, body)
		}
		if _, body := e.do("console", "GET", "/v1/webhooks", ""); len(body["webhooks"].([]any)) != 0 {
			t.Fatalf("got %v after delete; want no webhooks", body)
		}
		for _, r := range []struct{ method, path string }{
			{"GET", "/v1/webhooks/" + id}, {"GET", "/v1/webhooks/" + id + "/deliveries"}, {"PATCH", "/v1/webhooks/" + id}, {"DELETE", "/v1/webhooks/" + id},
			{"POST", "/v1/webhooks/" + id + "/rotate"}, {"POST", "/v1/webhooks/" + id + "/test"},
		} {
			body := ""
			if r.method == "PATCH" {
				body = `{"enabled":true}`
			}
			if status, got := e.do("console", r.method, r.path, body); status != http.StatusNotFound || errCode(got) != "not_found" {
				t.Errorf("%s %s after delete: got %d %v; want 404 not_found", r.method, r.path, status, got)
			}
		}
		if rows := e.deliveryStatuses(id); len(rows) != 0 {
			t.Errorf("got %d delivery rows after delete; want none", len(rows))
		}
		var events int
		e.pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM events WHERE data->>'webhookId' = $1`, id).Scan(&events)
		if events == 0 {
			t.Error("the webhook's events are gone; want them kept")
		}
	})
}

func (e *whEnv) deliveryStatuses(webhookID string) map[string]string {
	e.t.Helper()
	rows, err := e.pool.Query(testutil.Context(e.t), `SELECT delivery_id, status FROM webhook_deliveries WHERE webhook_id = $1`, webhookID)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, s string
		rows.Scan(&id, &s)
		out[id] = s
	}
	return out
}

// TestWebhookSubscribeRefusals is the SSRF table at subscribe time, under
// the hosted policy (no private address of any kind).
func TestWebhookSubscribeRefusals(t *testing.T) {
	e := newWHEnv(t)
	tests := []struct {
		name, url, events, reason string
	}{
		{"http", "http://hooks.example.com/in", `["run.ended"]`, "scheme_not_https"},
		{"credentials", "https://user:secret@hooks.example.com/in", `["run.ended"]`, "has_credentials"},
		{"127.0.0.1", "https://127.0.0.1/in", `["run.ended"]`, "private_address"},
		{"localhost", "https://localhost:8443/in", `["run.ended"]`, "private_address"},
		{"[::1]", "https://[::1]/in", `["run.ended"]`, "private_address"},
		{"[::ffff:127.0.0.1]", "https://[::ffff:127.0.0.1]/in", `["run.ended"]`, "private_address"},
		{"169.254.169.254", "https://169.254.169.254/latest/meta-data", `["run.ended"]`, "private_address"},
		{"10/8", "https://10.20.30.40/in", `["run.ended"]`, "private_address"},
		{"172.16/12", "https://172.31.255.1/in", `["run.ended"]`, "private_address"},
		{"192.168/16", "https://192.168.1.1/in", `["run.ended"]`, "private_address"},
		{"fd00::/8", "https://[fd12:3456::1]/in", `["run.ended"]`, "private_address"},
		{"a name resolving to a private address", "https://intranet.example.com/in", `["run.ended"]`, "private_address"},
		{"not a URL", "hooks.example.com/in", `["run.ended"]`, "not_a_url"},
		{"too long", "https://hooks.example.com/" + strings.Repeat("x", 1990), `["run.ended"]`, "too_long"},
		{"unknown event", "https://hooks.example.com/in", `["run.started"]`, "unknown_event"},
		{"no events", "https://hooks.example.com/in", `[]`, "no_events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.do("console", "POST", "/v1/webhooks", `{"url":`+strconv.Quote(tt.url)+`,"events":`+tt.events+`}`)
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" || errReason(body) != tt.reason {
				t.Fatalf("got %d %v; want 400 invalid_argument reason %s", status, body, tt.reason)
			}
		})
	}
	if _, body := e.do("console", "GET", "/v1/webhooks", ""); len(body["webhooks"].([]any)) != 0 {
		t.Fatalf("got %v; want nothing created by refused requests", body)
	}
}

func TestWebhookTenancyAppsAndLimits(t *testing.T) {
	e := newWHEnv(t)
	consoleID, _ := e.create("console", "https://hooks.example.com/console")
	appID, _ := e.create("app", "https://hooks.example.com/app")

	t.Run("another organisation's id answers like a missing one", func(t *testing.T) {
		missing := domain.NewID(domain.PrefixWebhook)
		for _, r := range []struct{ method, suffix, body string }{
			{"GET", "", ""}, {"PATCH", "", `{"enabled":false}`}, {"DELETE", "", ""}, {"POST", "/rotate", ""}, {"POST", "/test", ""}, {"GET", "/deliveries", ""},
		} {
			s1, b1 := e.do("other-org", r.method, "/v1/webhooks/"+consoleID+r.suffix, r.body)
			s2, b2 := e.do("other-org", r.method, "/v1/webhooks/"+missing+r.suffix, r.body)
			j1, _ := json.Marshal(b1)
			j2, _ := json.Marshal(b2)
			if s1 != http.StatusNotFound || s1 != s2 || strings.ReplaceAll(string(j1), consoleID, "ID") != strings.ReplaceAll(string(j2), missing, "ID") {
				t.Errorf("%s %s: got %d %s for another organisation's webhook and %d %s for a missing one; want the same 404",
					r.method, r.suffix, s1, j1, s2, j2)
			}
		}
		if _, body := e.do("other-org", "GET", "/v1/webhooks", ""); len(body["webhooks"].([]any)) != 0 {
			t.Errorf("got %v; want another organisation to list none", body)
		}
	})
	t.Run("apps see only the webhooks they made for that person", func(t *testing.T) {
		list := func(p string) []string {
			_, body := e.do(p, "GET", "/v1/webhooks", "")
			var ids []string
			for _, w := range body["webhooks"].([]any) {
				ids = append(ids, w.(map[string]any)["webhookId"].(string))
			}
			return ids
		}
		if got := list("app"); len(got) != 1 || got[0] != appID {
			t.Errorf("app lists %v; want only %s", got, appID)
		}
		if got := list("app-other"); len(got) != 0 {
			t.Errorf("the same app for another person lists %v; want none", got)
		}
		if got := list("console"); len(got) != 2 {
			t.Errorf("console lists %v; want both", got)
		}
		if status, body := e.do("app", "GET", "/v1/webhooks/"+appID, ""); status != http.StatusOK || body["webhookId"] != appID {
			t.Errorf("app reading its own webhook: got %d %v; want 200", status, body)
		}
		for _, r := range []struct{ principal, id string }{{"app", consoleID}, {"app-other", appID}} {
			s1, b1 := e.do(r.principal, "GET", "/v1/webhooks/"+r.id, "")
			missing := domain.NewID(domain.PrefixWebhook)
			s2, b2 := e.do(r.principal, "GET", "/v1/webhooks/"+missing, "")
			j1, _ := json.Marshal(b1)
			j2, _ := json.Marshal(b2)
			if s1 != http.StatusNotFound || s1 != s2 || strings.ReplaceAll(string(j1), r.id, "ID") != strings.ReplaceAll(string(j2), missing, "ID") {
				t.Errorf("%s reading %s: got %d %s; want the 404 of a missing webhook (%d %s)", r.principal, r.id, s1, j1, s2, j2)
			}
		}
		if status, body := e.do("app", "PATCH", "/v1/webhooks/"+consoleID, `{"enabled":false}`); status != http.StatusNotFound {
			t.Errorf("app patching a console webhook: got %d %v; want 404", status, body)
		}
		if status, _ := e.do("app-other", "POST", "/v1/webhooks/"+appID+"/test", ""); status != http.StatusNotFound {
			t.Errorf("another person's app testing: got %d; want 404", status)
		}
	})
	t.Run("devices:read and no role gate", func(t *testing.T) {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/webhooks", ""}, {"GET", "/v1/webhooks/" + consoleID, ""},
			{"POST", "/v1/webhooks", `{"url":"https://hooks.example.com/x","events":["run.ended"]}`},
			{"PATCH", "/v1/webhooks/" + consoleID, `{"enabled":true}`}, {"DELETE", "/v1/webhooks/" + consoleID, ""},
			{"POST", "/v1/webhooks/" + consoleID + "/rotate", ""}, {"POST", "/v1/webhooks/" + consoleID + "/test", ""},
			{"GET", "/v1/webhooks/" + consoleID + "/deliveries", ""},
		} {
			if status, body := e.do("noscope", r.method, r.path, r.body); status != http.StatusForbidden || errCode(body) != "permission_denied" {
				t.Errorf("%s %s without devices:read: got %d %v; want 403 permission_denied", r.method, r.path, status, body)
			}
		}
		if status, _ := e.do("key", "POST", "/v1/webhooks/"+consoleID+"/test", ""); status != http.StatusAccepted {
			t.Errorf("a key with devices:read only: got %d; want 202", status)
		}
	})
	t.Run("switched off because the person left: only that person switches it on", func(t *testing.T) {
		n, err := webhooks.DisableDepartedPersonWebhooksHandler{Webhooks: e.base}.Handle(testutil.Context(t),
			webhooks.DisableDepartedPersonWebhooks{OrgID: "org_a", UserID: "u_cat"})
		if err != nil || n != 1 {
			t.Fatalf("got %d, %v; want the app's one webhook switched off", n, err)
		}
		_, body := e.do("app", "GET", "/v1/webhooks", "")
		if w := body["webhooks"].([]any)[0].(map[string]any); w["enabled"] != false || w["disabledReason"] != "person_left" {
			t.Fatalf("got %v; want disabled with reason person_left", w)
		}
		if status, body := e.do("admin", "PATCH", "/v1/webhooks/"+appID, `{"enabled":true}`); status != http.StatusForbidden || errCode(body) != "permission_denied" {
			t.Errorf("an admin switching it on: got %d %v; want 403 permission_denied", status, body)
		}
		if status, body := e.do("app", "PATCH", "/v1/webhooks/"+appID, `{"enabled":true}`); status != http.StatusOK || body["enabled"] != true {
			t.Errorf("the person switching it on: got %d %v; want 200 enabled", status, body)
		}
	})
	t.Run("at most 20 per organisation, counting every webhook", func(t *testing.T) {
		for i := 2; i < domain.MaxWebhooksPerOrg; i++ {
			e.create("key", "https://hooks.example.com/"+strconv.Itoa(i))
		}
		status, body := e.do("app", "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/21","events":["run.ended"]}`)
		if status != http.StatusBadRequest || errReason(body) != "too_many_webhooks" {
			t.Fatalf("21st webhook: got %d %v; want 400 reason too_many_webhooks", status, body)
		}
		if status, _ := e.do("other-org", "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/b","events":["run.ended"]}`); status != http.StatusCreated {
			t.Fatalf("another organisation's first webhook: got %d; want 201", status)
		}
	})
}
