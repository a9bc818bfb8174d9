package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// auditClient drives the service over REST as the local operator (or, with
// a bearer token, as an API key).
type auditClient struct {
	t    *testing.T
	base string
}

// auditResponse is one answer: status, headers and the JSON body, if any.
type auditResponse struct {
	status int
	header http.Header
	body   map[string]any
}

// call sends one request. hdr adds headers (X-Request-Id, Authorization).
func (c auditClient) call(method, path string, body any, hdr map[string]string) auditResponse {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := auditResponse{status: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			c.t.Fatalf("%s %s: answer is not a JSON object: %v (%q)", method, path, err, raw)
		}
	}
	return out
}

// must is call that fails the test unless the answer has status want.
func (c auditClient) must(method, path string, body any, want int, hdr map[string]string) auditResponse {
	c.t.Helper()
	r := c.call(method, path, body, hdr)
	if r.status != want {
		c.t.Fatalf("%s %s: got %d %v; want %d", method, path, r.status, r.body, want)
	}
	return r
}

// str reads a string at a path of nested JSON objects.
func str(t *testing.T, m map[string]any, keys ...string) string {
	t.Helper()
	var cur any = m
	for _, k := range keys {
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("got %v; want an object holding %q", cur, strings.Join(keys, "."))
		}
		cur = obj[k]
	}
	s, ok := cur.(string)
	if !ok || s == "" {
		t.Fatalf("got %s = %v in %v; want a non-empty string", strings.Join(keys, "."), cur, m)
	}
	return s
}

// waitUntil polls cond every 50 ms until it holds or within passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditRow is one row of the audit feed or of events.
type auditRow struct {
	position int64
	eventID  string
	stream   string
	typ      string
	meta     eventstore.Metadata
	rawMeta  string
}

func (r auditRow) String() string { return fmt.Sprintf("%s@%d", r.typ, r.position) }

// TestEveryEventCarriesItsMetadata starts the real service in local mode
// (two sim phones, a loopback webhook receiver trusted through
// SERVICE_WEBHOOK_CA_FILE), appends through every command reachable in
// local mode — over REST, one over MCP, and through the workers (executor,
// lease expiry, webhook dispatcher) and start-up — and checks that every
// event, in events and in the audit feed, carries actor kind and id,
// request, correlation and causation ids set by the service itself; that
// the drive covered every event type it meant to; and that a request's
// X-Request-Id and an action's outcome are correlated as documented
// (eventstore/metadata.go).
//
// Not driven here, because local mode has no route to them (they are
// covered by their own tests in commands and internal/identity):
// commands.DisableDepartedPersonWebhooksHandler (issued by the identity
// capability in hosted mode) and the organisation binding of
// internal/identity/binding.go (organisation.instance_bound, hosted OAuth
// sign-in). action.outcome_unknown needs the process to die mid-action
// (workers/abandoned_actions_test.go).
func TestEveryEventCarriesItsMetadata(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	ca := rcv.CAFile
	env := map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_MODE": "local", "SERVICE_WEBHOOK_CA_FILE": ca, "SERVICE_SIM_DEVICES": "2",
	}
	a, base := startApp(t, env)
	pool := a.db.Pool
	ctx := testutil.Context(t)
	c := auditClient{t: t, base: base}
	run := fmt.Sprintf("%d", time.Now().UnixNano())

	// The two sim phones registered at start-up.
	var devices []string
	waitUntil(t, 20*time.Second, "the two sim phones listed", func() (bool, error) {
		r := c.must("GET", "/v1/devices", nil, http.StatusOK, nil)
		list, _ := r.body["devices"].([]any)
		devices = devices[:0]
		for _, d := range list {
			devices = append(devices, str(t, d.(map[string]any), "deviceId"))
		}
		return len(devices) == 2, nil
	})
	sort.Strings(devices)
	d1, d2 := devices[0], devices[1]

	// A short lease on d2 first, so its expiry (recorded by the lease-expiry
	// worker) overlaps with the rest of the drive.
	short := str(t, c.must("POST", "/v1/devices/"+d2+"/lease", map[string]any{"ttlSeconds": 10}, http.StatusCreated, nil).body, "leaseId")

	// Leases: acquire (with our own request id), renew.
	acquireReq := "req-audit-acquire-" + run
	r := c.must("POST", "/v1/devices/"+d1+"/lease", map[string]any{"ttlSeconds": 300}, http.StatusCreated,
		map[string]string{"X-Request-Id": acquireReq})
	if got := r.header.Get("X-Request-Id"); got != acquireReq {
		t.Errorf("acquire: got X-Request-Id %q echoed; want %q", got, acquireReq)
	}
	lease := str(t, r.body, "leaseId")
	c.must("PATCH", "/v1/devices/"+d1+"/lease", map[string]any{"leaseId": lease, "ttlSeconds": 300}, http.StatusOK, nil)

	// Observe: a screenshot stores a frame (frame.captured).
	shot := c.must("GET", "/v1/devices/"+d1+"/screenshot", nil, http.StatusOK, nil)
	frameBefore := shot.header.Get("Frame-Id")
	if frameBefore == "" {
		t.Fatal("screenshot: got no Frame-Id; want the stored frame's id")
	}

	// Actions: committed ones, then a tap decided on the frame from before
	// open_app, which the executor refuses as stale (action.failed).
	openKey, staleKey := "audit-open-"+run, "audit-stale-"+run
	actReq := "req-audit-act-" + run
	c.must("POST", "/v1/devices/"+d1+"/actions", map[string]any{"action": "open_app",
		"arguments": map[string]any{"package": "com.example.notes"}, "idempotencyKey": openKey, "leaseId": lease},
		http.StatusOK, map[string]string{"X-Request-Id": actReq})
	c.must("POST", "/v1/devices/"+d1+"/actions", map[string]any{"action": "tap",
		"arguments": map[string]any{"x": 400, "y": 380}, "idempotencyKey": "audit-tap-" + run, "leaseId": lease}, http.StatusOK, nil)
	c.must("POST", "/v1/devices/"+d1+"/actions", map[string]any{"action": "type_text",
		"arguments": map[string]any{"text": "audited"}, "idempotencyKey": "audit-type-" + run, "leaseId": lease}, http.StatusOK, nil)
	failReq := "req-audit-stale-" + run
	stale := c.call("POST", "/v1/devices/"+d1+"/actions", map[string]any{"action": "tap",
		"arguments": map[string]any{"x": 10, "y": 10}, "idempotencyKey": staleKey, "leaseId": lease, "observedFrame": frameBefore},
		map[string]string{"X-Request-Id": failReq})
	if code, _ := stale.body["error"].(map[string]any)["code"].(string); stale.status/100 == 2 || code != "stale_frame" {
		t.Fatalf("tap on a stale frame: got %d %v; want the stale_frame failure", stale.status, stale.body)
	}

	// Devices: rename, stop and wake (the holder presents its lease).
	c.must("PATCH", "/v1/devices/"+d1, map[string]any{"name": "audited phone"}, http.StatusOK, nil)
	c.must("POST", "/v1/devices/"+d1+"/stop", map[string]any{"leaseId": lease}, http.StatusOK, nil)
	c.must("POST", "/v1/devices/"+d1+"/wake", map[string]any{"leaseId": lease}, http.StatusOK, nil)

	// Receipts: a person reviews one.
	c.must("POST", "/v1/receipts/"+openKey+"/reviewed", map[string]any{"note": "checked"}, http.StatusOK, nil)

	// Release the lease.
	c.must("DELETE", "/v1/devices/"+d1+"/lease?leaseId="+lease, nil, http.StatusNoContent, nil)

	// One command over MCP (sessionless revision), with our own request id.
	mcpReq := "req-audit-mcp-" + run
	func() {
		tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPHeaders(map[string]string{"X-Request-Id": mcpReq}))
		if err != nil {
			t.Fatal(err)
		}
		mc := mcpclient.NewClient(tr)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := mc.Start(cctx); err != nil {
			t.Fatal(err)
		}
		defer mc.Close()
		if _, err := mc.Initialize(cctx, mcpgo.InitializeRequest{}); err != nil {
			t.Fatal(err)
		}
		req := mcpgo.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "wake_device", map[string]any{"deviceId": d1}
		res, err := mc.CallTool(cctx, req)
		if err != nil || res.IsError {
			t.Fatalf("MCP wake_device: got %v %+v; want the device", err, res)
		}
	}()

	// API keys: mint, rotate, renew, narrow; act with the key; revoke it
	// (by the operator) and revoke a second key by itself.
	minted := c.must("POST", "/v1/api-keys", map[string]any{"name": "audit", "scopes": []string{"devices:read", "devices:act"}},
		http.StatusCreated, nil)
	keyID := str(t, minted.body, "key", "id")
	token := str(t, c.must("POST", "/v1/api-keys/"+keyID+"/rotate", nil, http.StatusOK, nil).body, "token")
	c.must("PATCH", "/v1/api-keys/"+keyID, map[string]any{"expiresInDays": 30}, http.StatusOK, nil)
	c.must("PATCH", "/v1/api-keys/"+keyID, map[string]any{"scopes": []string{"devices:read"}}, http.StatusOK, nil)
	keyShot := c.must("GET", "/v1/devices/"+d2+"/screenshot", nil, http.StatusOK, map[string]string{"Authorization": "Bearer " + token})
	keyFrame := keyShot.header.Get("Frame-Id")
	c.must("DELETE", "/v1/api-keys/"+keyID, nil, http.StatusNoContent, nil)
	self := c.must("POST", "/v1/api-keys", map[string]any{"name": "audit-self", "scopes": []string{"devices:read"}}, http.StatusCreated, nil)
	selfID := str(t, self.body, "key", "id")
	c.must("DELETE", "/v1/api-keys/current", nil, http.StatusNoContent, map[string]string{"Authorization": "Bearer " + str(t, self.body, "token")})

	// Webhooks: create, disable, enable, rotate the secret, test (and let
	// the dispatcher record the attempt), delete.
	hook := str(t, c.must("POST", "/v1/webhooks", map[string]any{"url": rcv.URL + "/in", "events": []string{"run.ended"}},
		http.StatusCreated, nil).body, "webhook", "webhookId")
	c.must("PATCH", "/v1/webhooks/"+hook, map[string]any{"enabled": false}, http.StatusOK, nil)
	c.must("PATCH", "/v1/webhooks/"+hook, map[string]any{"enabled": true}, http.StatusOK, nil)
	c.must("POST", "/v1/webhooks/"+hook+"/rotate", nil, http.StatusOK, nil)
	c.must("POST", "/v1/webhooks/"+hook+"/test", nil, http.StatusAccepted, nil)
	count := func(q string, args ...any) func() (bool, error) {
		return func() (bool, error) {
			var n int
			err := pool.QueryRow(ctx, q, args...).Scan(&n)
			return n > 0, err
		}
	}
	waitUntil(t, 30*time.Second, "the dispatcher recording the test delivery's attempt",
		count(`SELECT count(*) FROM events WHERE event_type = 'webhook.delivery_attempted' AND data->>'webhookId' = $1`, hook))
	if got, _ := rcv.received(); len(got) == 0 {
		t.Error("the receiver got no request; want the test delivery")
	}
	c.must("DELETE", "/v1/webhooks/"+hook, nil, http.StatusNoContent, nil)

	// The short lease ends by itself (ttl 10 s; the worker sweeps each second).
	waitUntil(t, 60*time.Second, "lease.expired recorded by the lease-expiry worker",
		count(`SELECT count(*) FROM events WHERE event_type = 'lease.expired' AND data->>'leaseId' = $1`, short))

	// The audit feed catches up with every event appended.
	waitUntil(t, 30*time.Second, "the audit feed holding every event", func() (bool, error) {
		var missing int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM audit_feed a WHERE a.position = e.position)`).Scan(&missing)
		return missing == 0, err
	})

	load := func(q string) []auditRow {
		t.Helper()
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []auditRow
		for rows.Next() {
			var r auditRow
			var meta []byte
			if err := rows.Scan(&r.position, &r.eventID, &r.stream, &r.typ, &meta); err != nil {
				t.Fatal(err)
			}
			r.rawMeta = string(meta)
			if err := json.Unmarshal(meta, &r.meta); err != nil {
				t.Fatalf("%s: metadata %s is not an object: %v", r, meta, err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	feed := load(`SELECT position, event_id::text, stream_id, event_type, metadata FROM audit_feed ORDER BY position`)
	events := load(`SELECT position, event_id::text, stream_id, event_type, metadata FROM events ORDER BY position`)
	if len(feed) != len(events) {
		t.Errorf("got %d audit rows for %d events; want one per event", len(feed), len(events))
	}
	byPos := map[int64]auditRow{}
	for _, e := range events {
		byPos[e.position] = e
	}

	// (1) Every row names its actor, request, correlation and cause, set
	// by the service: none may carry the test's own context metadata
	// (which the workers inherit here, but not under `phonefleet serve`),
	// and the audit row's metadata is the event's.
	testMeta, _ := eventstore.MetadataFrom(ctx)
	check := func(source string, rows []auditRow) {
		t.Helper()
		var bad []string
		for _, r := range rows {
			var missing []string
			for _, f := range []struct{ name, v string }{{"actorKind", r.meta.ActorKind}, {"actorId", r.meta.ActorID},
				{"requestId", r.meta.RequestID}, {"correlationId", r.meta.CorrelationID}, {"causationId", r.meta.CausationID}} {
				if f.v == "" {
					missing = append(missing, f.name)
				}
			}
			if len(missing) > 0 {
				bad = append(bad, fmt.Sprintf("%s lacks %s (metadata %s)", r, strings.Join(missing, ", "), r.rawMeta))
			}
			if r.meta.RequestID == testMeta.RequestID || r.meta.ActorKind == testMeta.ActorKind && r.meta.ActorID == testMeta.ActorID {
				bad = append(bad, fmt.Sprintf("%s carries the test context's metadata %s (no edge or worker set its own)", r, r.rawMeta))
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s: %d of %d rows without complete metadata:\n  %s", source, len(bad), len(rows), strings.Join(bad, "\n  "))
		}
	}
	check("events", events)
	check("audit_feed", feed)
	for _, f := range feed {
		e, ok := byPos[f.position]
		if !ok {
			t.Errorf("audit row %s: got no event at that position; want one", f)
			continue
		}
		if f.meta != e.meta || f.typ != e.typ || f.eventID != e.eventID {
			t.Errorf("audit row %s: got %s %s; want the event's %s %s", f, f.eventID, f.rawMeta, e.eventID, e.rawMeta)
		}
	}

	// (2) The drive covered every event type it meant to.
	seen := map[string]int{}
	for _, f := range feed {
		seen[f.typ]++
	}
	for _, want := range []struct{ typ, from string }{
		{"organisation.created", "start-up (EnsureLocalOrganisation)"},
		{"device.registered", "start-up (SeedLocalFleet)"},
		{"fleet.seeded", "start-up (SeedLocalFleet)"},
		{"lease.acquired", "POST /v1/devices/{id}/lease"},
		{"lease.renewed", "PATCH /v1/devices/{id}/lease"},
		{"lease.released", "DELETE /v1/devices/{id}/lease"},
		{"lease.expired", "the lease-expiry worker"},
		{"frame.captured", "GET /v1/devices/{id}/screenshot"},
		{"action.requested", "POST /v1/devices/{id}/actions"},
		{"action.committed", "the executor"},
		{"action.failed", "the executor (stale_frame)"},
		{"device.renamed", "PATCH /v1/devices/{id}"},
		{"device.stopped", "POST /v1/devices/{id}/stop"},
		{"device.woken", "POST /v1/devices/{id}/wake and MCP wake_device"},
		{"receipt.reviewed", "POST /v1/receipts/{key}/reviewed"},
		{"api_key.minted", "POST /v1/api-keys"},
		{"api_key.rotated", "POST /v1/api-keys/{id}/rotate"},
		{"api_key.renewed", "PATCH /v1/api-keys/{id} expiresInDays"},
		{"api_key.narrowed", "PATCH /v1/api-keys/{id} scopes"},
		{"api_key.revoked", "DELETE /v1/api-keys/{id} and /current"},
		{"webhook.subscribed", "POST /v1/webhooks"},
		{"webhook.disabled", "PATCH /v1/webhooks/{id} enabled false"},
		{"webhook.enabled", "PATCH /v1/webhooks/{id} enabled true"},
		{"webhook.secret_rotated", "POST /v1/webhooks/{id}/rotate"},
		{"webhook.test_requested", "POST /v1/webhooks/{id}/test"},
		{"webhook.delivery_attempted", "the webhook dispatcher"},
		{"webhook.deleted", "DELETE /v1/webhooks/{id}"},
	} {
		if seen[want.typ] == 0 {
			t.Errorf("got no %s in the audit feed; want one from %s", want.typ, want.from)
		}
	}
	t.Logf("audit feed: %d events of %d types: %v", len(feed), len(seen), seen)

	// (3) Correlation.
	find := func(q string, args ...any) auditRow {
		t.Helper()
		var r auditRow
		var meta []byte
		err := pool.QueryRow(ctx, `SELECT position, event_id::text, stream_id, event_type, metadata FROM events WHERE `+q, args...).
			Scan(&r.position, &r.eventID, &r.stream, &r.typ, &meta)
		if err != nil {
			t.Fatalf("event where %s %v: %v", q, args, err)
		}
		r.rawMeta = string(meta)
		_ = json.Unmarshal(meta, &r.meta)
		return r
	}
	operator := eventstore.Metadata{ActorKind: "user", ActorID: "local-operator"}
	// A request's events carry its X-Request-Id as request, correlation and
	// cause, and the authenticated actor.
	for _, tc := range []struct {
		name, q, arg, req string
	}{
		{"lease.acquired", `event_type = 'lease.acquired' AND data->>'leaseId' = $1`, lease, acquireReq},
		{"action.requested (open_app)", `event_type = 'action.requested' AND data->>'idempotencyKey' = $1`, openKey, actReq},
		{"action.requested (stale tap)", `event_type = 'action.requested' AND data->>'idempotencyKey' = $1`, staleKey, failReq},
		{"device.woken (MCP)", `event_type = 'device.woken' AND metadata->>'requestId' = $1`, mcpReq, mcpReq},
	} {
		e := find(tc.q, tc.arg)
		want := eventstore.Metadata{ActorKind: operator.ActorKind, ActorID: operator.ActorID, RequestID: tc.req, CorrelationID: tc.req, CausationID: tc.req}
		if e.meta != want {
			t.Errorf("%s: got metadata %+v; want %+v", tc.name, e.meta, want)
		}
	}
	// An action's outcome, recorded by the executor, shares its request's
	// request and correlation ids and names action.requested as its cause.
	for _, tc := range []struct{ key, outcome string }{{openKey, "action.committed"}, {staleKey, "action.failed"}} {
		req := find(`event_type = 'action.requested' AND data->>'idempotencyKey' = $1`, tc.key)
		out := find(`event_type = $1 AND stream_id = $2`, tc.outcome, req.stream)
		want := eventstore.Metadata{ActorKind: req.meta.ActorKind, ActorID: req.meta.ActorID, RequestID: req.meta.RequestID,
			CorrelationID: req.meta.CorrelationID, CausationID: req.eventID}
		if out.meta != want {
			t.Errorf("%s of %s: got metadata %+v; want %+v (caused by action.requested %s)", tc.outcome, tc.key, out.meta, want, req.eventID)
		}
	}
	// An API key's act names the key as its actor.
	if keyFrame != "" {
		e := find(`event_type = 'frame.captured' AND data->'frame'->>'frameId' = $1`, keyFrame)
		if e.meta.ActorKind != "api_key" || e.meta.ActorID != keyID {
			t.Errorf("frame.captured by the key: got actor %s %s; want api_key %s", e.meta.ActorKind, e.meta.ActorID, keyID)
		}
	}
	if e := find(`event_type = 'api_key.revoked' AND data->>'keyId' = $1`, selfID); e.meta.ActorKind != "api_key" || e.meta.ActorID != selfID {
		t.Errorf("api_key.revoked by the key itself: got actor %s %s; want api_key %s", e.meta.ActorKind, e.meta.ActorID, selfID)
	}
	// Workers and start-up act as the system.
	for _, typ := range []string{"organisation.created", "fleet.seeded", "lease.expired", "webhook.delivery_attempted"} {
		e := find(`event_type = $1 ORDER BY position LIMIT 1`, typ)
		if e.meta.ActorKind != "system" {
			t.Errorf("%s: got actor %s %s; want the system", e, e.meta.ActorKind, e.meta.ActorID)
		}
	}
}
