package mcp_test

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/mcp"
	"phonefleet/testutil"
)

var (
	readTools = []string{"get_device", "get_driving", "get_frame", "get_receipt", "list_devices", "list_leases", "list_receipts", "observe",
		"rename_device", "wait_for"}
	webhookTools = []string{"create_webhook", "delete_webhook", "list_webhook_deliveries", "list_webhooks", "rotate_webhook_secret",
		"test_webhook", "update_webhook"}
	leaseTools = []string{"acquire_lease", "release_lease", "renew_lease"}
	actTools   = []string{"batch_actions", "double_tap", "install_catalog_app", "long_press", "open_app", "press_key", "swipe", "tap",
		"stop_device", "tap_element", "type_text", "wake_device"}
)

func sorted(lists ...[]string) []string {
	out := slices.Concat(lists...)
	slices.Sort(out)
	return out
}

// TestToolListFollowsScopes lists the tools under four scope sets with
// every client and compares the lists: a tool the credential cannot use is
// absent; calling one that exists answers permission_denied naming the
// scope and runs nothing; a name that is no tool is JSON-RPC -32601.
func TestToolListFollowsScopes(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	read, lease, act := domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct
	sets := []struct {
		name   string
		scopes []domain.Scope
		want   []string
	}{
		{"devices:read", []domain.Scope{read}, sorted(readTools, webhookTools)},
		{"devices:read devices:lease", []domain.Scope{read, lease}, sorted(readTools, webhookTools, leaseTools)},
		{"devices:act", []domain.Scope{act}, sorted(actTools)},
		{"every device scope", []domain.Scope{read, lease, act}, sorted(readTools, webhookTools, leaseTools, actTools)},
	}
	for _, set := range sets {
		token := svc.key(t, set.scopes...)
		var first []string
		for _, c := range clients {
			t.Run(set.name+"/"+c.name, func(t *testing.T) {
				a := c.connect(t, svc.url, token)
				if name, version := a.serverInfo(); name != mcp.ServerName || version != mcp.ToolSurfaceVersion {
					t.Errorf("got serverInfo %s %s; want %s %s", name, version, mcp.ServerName, mcp.ToolSurfaceVersion)
				}
				if want := c.name[strings.Index(c.name, "/")+1:]; a.protocolVersion() != want {
					t.Errorf("got protocol version %s; want %s", a.protocolVersion(), want)
				}
				var got []string
				for _, tl := range a.tools(t) {
					got = append(got, tl.Name)
				}
				if !slices.Equal(got, set.want) {
					t.Errorf("got tools %v; want %v", got, set.want)
				}
				if first == nil {
					first = got
				} else if !slices.Equal(got, first) {
					t.Errorf("got tools %v; want the same list as the first client, %v", got, first)
				}
			})
		}
	}

	// A real tool the credential cannot use: refused naming the scope, and
	// nothing ran (no receipt exists under the key it was given).
	readOnly := svc.key(t, read)
	for _, c := range clients {
		t.Run("hidden tool/"+c.name, func(t *testing.T) {
			a := c.connect(t, svc.url, readOnly)
			key := "hidden-" + strings.ReplaceAll(c.name, "/", "-")
			env := mustFail(t, a, "tap", map[string]any{"deviceId": dev, "x": 10, "y": 10, "idempotencyKey": key})
			if env["code"] != "permission_denied" || env["scope"] != "devices:act" || env["retryable"] != false {
				t.Errorf("got %v; want permission_denied naming scope devices:act, not retryable", env)
			}
			env = mustFail(t, a, "get_receipt", map[string]any{"idempotencyKey": key})
			if env["code"] != "invalid_argument" || env["reason"] != "receipt_not_found" {
				t.Errorf("got %v; want invalid_argument with reason receipt_not_found: the refused tap must not have run", env)
			}
		})
	}

	// A name that is no tool is a protocol error, not a tool result.
	for _, c := range clients {
		t.Run("unknown tool/"+c.name, func(t *testing.T) {
			a := c.connect(t, svc.url, readOnly)
			_, err := a.call(t, "teleport_device", map[string]any{})
			if err == nil {
				t.Fatal("got a tool result; want a protocol error")
			}
			// mcp-go's client reports any HTTP 404 as a terminated session,
			// so on 2026-07-28 (where -32601 travels as HTTP 404) the code is
			// checked on the wire below instead.
			if c.name != "mcp-go/2026-07-28" && !isMethodNotFound(err) {
				t.Errorf("got %v; want JSON-RPC -32601 method not found", err)
			}
		})
	}
	for _, tt := range []struct {
		name, version, session string
		status, code           int
	}{
		{"session-based revision", "2025-11-25", "mcp-session-00000000-0000-4000-8000-000000000000", http.StatusOK, -32601},
		{"2026-07-28", "2026-07-28", "", http.StatusNotFound, -32601},
		// Streamable HTTP: a session-based request without Mcp-Session-Id
		// is a bad request (404 is for a session that is unknown or ended).
		{"session-based revision without a session", "2025-11-25", "", http.StatusBadRequest, -32600},
		{"no protocol version and no session", "", "", http.StatusBadRequest, -32600},
	} {
		t.Run("unknown tool on the wire/"+tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, svc.url+"/mcp", strings.NewReader(
				`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"teleport_device","arguments":{}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+readOnly)
			if tt.version != "" {
				req.Header.Set("Mcp-Protocol-Version", tt.version)
			}
			if tt.session != "" {
				req.Header.Set("Mcp-Session-Id", tt.session)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				ID    int `json:"id"`
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || body.ID != 7 || body.Error.Code != tt.code {
				t.Errorf("got HTTP %d, id %d, code %d; want HTTP %d, id 7, code %d", resp.StatusCode, body.ID, body.Error.Code, tt.status, tt.code)
			}
		})
	}
}

// screenJSON is what observe answers beside the image.
type screenJSON struct {
	DeviceID   string `json:"deviceId"`
	FrameID    string `json:"frameId"`
	ScreenHash string `json:"screenHash"`
	Width      int    `json:"width"`
	Height     int    `json:"height"`
	App        string `json:"app"`
	Image      *struct {
		Width int     `json:"width"`
		Scale float64 `json:"scale"`
	} `json:"image"`
	Elements []struct {
		Ref      string `json:"ref"`
		Text     string `json:"text"`
		Hint     string `json:"hint"`
		Editable bool   `json:"editable"`
	} `json:"elements"`
}

func (s screenJSON) ref(t *testing.T, match func(text, hint string) bool) string {
	t.Helper()
	for _, e := range s.Elements {
		if match(e.Text, e.Hint) {
			return e.Ref
		}
	}
	t.Fatalf("no element matches among %+v", s.Elements)
	return ""
}

func textIs(want string) func(string, string) bool {
	return func(text, _ string) bool { return text == want }
}

type actionJSON struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Replayed       bool   `json:"replayed"`
	Receipt        struct {
		ActionID string `json:"actionId"`
		State    string `json:"state"`
		Result   struct {
			Foreground string `json:"foreground"`
		} `json:"result"`
	} `json:"receipt"`
}

// TestAgentDrivesAPhone is an agent's session with every client, each on
// its own phone: lease → observe → tap an element by ref → observe shows
// the app it opened → a tap on the old frame is refused (stale_frame) and
// does nothing → a replayed idempotency key does not type twice → release.
func TestAgentDrivesAPhone(t *testing.T) {
	svc := startService(t, len(clients))
	token := svc.key(t, domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct)
	for i, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			dev := svc.fleet.DeviceIDs[i]
			a := c.connect(t, svc.url, token)

			var lease struct {
				LeaseID string `json:"leaseId"`
			}
			mustCall(t, a, "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 600}).json(t, &lease)

			// Observe, downscaled: a PNG 360 wide beside elements in device pixels.
			r := mustCall(t, a, "observe", map[string]any{"deviceId": dev, "maxWidth": 360})
			var home screenJSON
			r.json(t, &home)
			if len(r.images) != 1 {
				t.Fatalf("got %d image blocks; want 1", len(r.images))
			}
			img, err := png.Decode(bytes.NewReader(r.images[0]))
			if err != nil {
				t.Fatalf("the image block is not a PNG: %v", err)
			}
			if got := img.Bounds().Dx(); got != 360 || home.Image == nil || home.Image.Width != 360 || home.Width != 1080 {
				t.Errorf("got image %d wide (reported %+v), screen %d; want 360 and 1080", got, home.Image, home.Width)
			}
			if !domain.HasPrefix(home.FrameID, domain.PrefixFrame) || home.App != "com.android.launcher3" {
				t.Fatalf("got frame %q on %q; want a frm_ id on the launcher", home.FrameID, home.App)
			}

			// Tap the Settings icon by its ref, on the frame just seen.
			var tap actionJSON
			mustCall(t, a, "tap_element", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID,
				"ref": home.ref(t, textIs("Settings")), "observedFrame": home.FrameID}).json(t, &tap)
			if tap.Receipt.State != "committed" || !strings.HasPrefix(tap.IdempotencyKey, "mcp_") || tap.Replayed {
				t.Errorf("got %+v; want a committed receipt under a generated mcp_ key", tap)
			}
			var settings screenJSON
			r = mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false, "elements": "interactive"})
			r.json(t, &settings)
			if len(r.images) != 0 || settings.App != "com.android.settings" || settings.FrameID == home.FrameID {
				t.Fatalf("got %d images, app %q, frame %s; want no image and the Settings app on a new frame", len(r.images), settings.App, settings.FrameID)
			}

			// A tap decided on the home screen is refused, and nothing happens.
			env := mustFail(t, a, "tap", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "x": 540, "y": 1200,
				"observedFrame": home.FrameID, "idempotencyKey": "stale-" + dev})
			if env["code"] != "stale_frame" || env["idempotencyKey"] != "stale-"+dev || env["deviceId"] != dev {
				t.Errorf("got %v; want stale_frame carrying the idempotencyKey and deviceId", env)
			}
			var after screenJSON
			mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false}).json(t, &after)
			if after.ScreenHash != settings.ScreenHash {
				t.Errorf("got screen %s after the refused tap; want it unchanged, %s", after.ScreenHash, settings.ScreenHash)
			}

			// Type into Notes twice under one key: the text appears once.
			mustCall(t, a, "open_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": "com.example.notes"})
			var notes screenJSON
			mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false, "elements": "interactive"}).json(t, &notes)
			mustCall(t, a, "tap_element", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID,
				"ref": notes.ref(t, func(_, hint string) bool { return strings.HasPrefix(hint, "Write a note") })})
			key := "type-hello-" + dev
			var first, second actionJSON
			typeArgs := map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "text": "hello", "idempotencyKey": key}
			mustCall(t, a, "type_text", typeArgs).json(t, &first)
			mustCall(t, a, "type_text", typeArgs).json(t, &second)
			if first.Replayed || !second.Replayed || second.Receipt.ActionID != first.Receipt.ActionID || second.IdempotencyKey != key {
				t.Errorf("got %+v then %+v; want the second to replay the first's receipt", first, second)
			}
			var typedIn screenJSON
			mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false}).json(t, &typedIn)
			typed := 0
			for _, e := range typedIn.Elements {
				if e.Editable {
					typed++
					if e.Text != "hello" {
						t.Errorf("got the note field holding %q; want %q (typed once)", e.Text, "hello")
					}
				}
			}
			if typed != 1 {
				t.Errorf("got %d editable fields; want 1", typed)
			}
			var receipt struct {
				ActionID string `json:"actionId"`
				State    string `json:"state"`
			}
			mustCall(t, a, "get_receipt", map[string]any{"idempotencyKey": key}).json(t, &receipt)
			if receipt.ActionID != first.Receipt.ActionID || receipt.State != "committed" {
				t.Errorf("got receipt %+v; want action %s committed", receipt, first.Receipt.ActionID)
			}

			mustCall(t, a, "release_lease", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID})
			env = mustFail(t, a, "press_key", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "key": "HOME"})
			if env["code"] != "lease_mismatch" {
				t.Errorf("got %v after release; want lease_mismatch", env)
			}
		})
	}
}

// TestToolErrors checks the envelope of failures of every kind with every
// client: the JSON envelope with an MCP code for a refused call, and the
// plain "-32602:" sentence for arguments that fail the input schema.
func TestToolErrors(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	token := svc.key(t, domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct)
	missing := domain.NewID(domain.PrefixDevice)
	refusals := []struct {
		name  string
		tool  string
		args  map[string]any
		code  string
		extra map[string]any
	}{
		{"unknown device", "get_device", map[string]any{"deviceId": missing}, "device_unavailable",
			map[string]any{"reason": "not_found", "deviceId": missing}},
		{"action without a lease", "tap", map[string]any{"deviceId": dev, "x": 5, "y": 5, "idempotencyKey": "k1"}, "lease_required",
			map[string]any{"deviceId": dev, "idempotencyKey": "k1"}},
		{"unknown frame", "get_frame", map[string]any{"frameId": domain.NewID(domain.PrefixFrame)}, "frame_not_found", nil},
		{"unknown receipt", "get_receipt", map[string]any{"idempotencyKey": "never-used"}, "invalid_argument",
			map[string]any{"reason": "receipt_not_found"}},
		{"renew a lease never held", "renew_lease", map[string]any{"deviceId": dev, "leaseId": domain.NewID(domain.PrefixLease)},
			"lease_mismatch", map[string]any{"reason": "not_current"}},
	}
	invalid := []struct {
		name string
		tool string
		args map[string]any
		says string
	}{
		{"coordinate of the wrong type", "tap", map[string]any{"deviceId": dev, "x": "left", "y": 5}, "x"},
		{"required argument missing", "swipe", map[string]any{"deviceId": dev, "x1": 1, "y1": 1, "x2": 1}, "y2"},
		{"malformed device id", "observe", map[string]any{"deviceId": "phone-1"}, "deviceId"},
		{"unknown argument", "get_device", map[string]any{"deviceId": dev, "verbose": true}, "verbose"},
		{"value out of range", "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 5}, "ttlSeconds"},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			a := c.connect(t, svc.url, token)
			for _, tt := range refusals {
				t.Run(tt.name, func(t *testing.T) {
					env := mustFail(t, a, tt.tool, tt.args)
					if env["code"] != tt.code {
						t.Errorf("got code %v; want %s (%v)", env["code"], tt.code, env)
					}
					for k, v := range tt.extra {
						if env[k] != v {
							t.Errorf("got %s %v; want %v", k, env[k], v)
						}
					}
				})
			}
			for _, tt := range invalid {
				t.Run(tt.name, func(t *testing.T) {
					r, err := a.call(t, tt.tool, tt.args)
					if err != nil {
						t.Fatalf("got protocol error %v; want a failed result", err)
					}
					if !r.isError || len(r.texts) != 1 {
						t.Fatalf("got isError %v with %d text blocks; want isError and one", r.isError, len(r.texts))
					}
					text := r.texts[0]
					if !strings.HasPrefix(text, "-32602: ") || !strings.Contains(text, tt.says) || json.Valid([]byte(text)) {
						t.Errorf("got %q; want a plain sentence beginning \"-32602: \" naming %s", text, tt.says)
					}
				})
			}
			// The second acquire of a held device is retryable later.
			var l struct {
				LeaseID string `json:"leaseId"`
			}
			mustCall(t, a, "acquire_lease", map[string]any{"deviceId": dev}).json(t, &l)
			env := mustFail(t, a, "acquire_lease", map[string]any{"deviceId": dev})
			if env["code"] != "device_unavailable" || env["reason"] != "already_leased" || env["retryable"] != true {
				t.Errorf("got %v; want device_unavailable, already_leased, retryable", env)
			}
			mustCall(t, a, "release_lease", map[string]any{"deviceId": dev, "leaseId": l.LeaseID})
		})
	}
}

// TestBatchStopsAtFirstFailure runs a batch whose second step fails: the
// first committed, the third never ran, and re-sending the batch with its
// key replays the first step instead of acting again.
func TestBatchStopsAtFirstFailure(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	a := clients[2].connect(t, svc.url, svc.key(t, domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct))
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	mustCall(t, a, "acquire_lease", map[string]any{"deviceId": dev}).json(t, &lease)
	args := map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "idempotencyKey": "batch-1", "actions": []any{
		map[string]any{"action": "open_app", "package": "com.example.notes"},
		map[string]any{"action": "tap_element", "ref": "nosuchref"},
		map[string]any{"action": "press_key", "key": "HOME"},
	}}
	for round, wantReplayed := range []bool{false, true} {
		env := mustFail(t, a, "batch_actions", args)
		if env["code"] != "stale_frame" || env["reason"] != "element_gone" || env["failedStep"] != float64(1) ||
			env["idempotencyKey"] != "batch-1" {
			t.Errorf("round %d: got %v; want stale_frame element_gone at step 1 of batch-1", round, env)
		}
		steps, _ := env["steps"].([]any)
		if len(steps) != 3 {
			t.Fatalf("round %d: got steps %v; want 3", round, env["steps"])
		}
		wantStates := []string{"committed", "failed", "not_run"}
		for i, s := range steps {
			st := s.(map[string]any)
			if st["state"] != wantStates[i] || st["idempotencyKey"] != "batch-1."+string(rune('0'+i)) {
				t.Errorf("round %d: got step %d %v; want state %s under key batch-1.%d", round, i, st, wantStates[i], i)
			}
		}
		if got := steps[0].(map[string]any)["replayed"] == true; got != wantReplayed {
			t.Errorf("round %d: got step 0 replayed %v; want %v", round, got, wantReplayed)
		}
	}
	var sc screenJSON
	mustCall(t, a, "observe", map[string]any{"deviceId": dev, "screenshot": false}).json(t, &sc)
	if sc.App != "com.example.notes" {
		t.Errorf("got app %q; want Notes still in front (HOME never pressed)", sc.App)
	}
}

// TestWebhookTools drives a subscription through its tools with a key that
// holds devices:read only.
func TestWebhookTools(t *testing.T) {
	svc := startService(t, 0)
	a := clients[1].connect(t, svc.url, svc.key(t, domain.ScopeDevicesRead))
	var created struct {
		Webhook struct {
			WebhookID string `json:"webhookId"`
			Enabled   bool   `json:"enabled"`
		} `json:"webhook"`
		Secret string `json:"secret"`
	}
	mustCall(t, a, "create_webhook", map[string]any{"url": "https://93.184.216.34/hook", "events": []string{"run.ended"}}).json(t, &created)
	id := created.Webhook.WebhookID
	if !domain.HasPrefix(id, domain.PrefixWebhook) || created.Secret == "" || !created.Webhook.Enabled {
		t.Fatalf("got %+v; want an enabled whk_ webhook and its secret", created)
	}
	env := mustFail(t, a, "create_webhook", map[string]any{"url": "http://93.184.216.34/hook", "events": []string{"run.ended"}})
	if env["code"] != "invalid_argument" || env["reason"] != "scheme_not_https" {
		t.Errorf("got %v; want invalid_argument scheme_not_https", env)
	}
	var queued map[string]string
	mustCall(t, a, "test_webhook", map[string]any{"webhookId": id}).json(t, &queued)
	if !domain.HasPrefix(queued["deliveryId"], domain.PrefixDelivery) || queued["status"] != "pending" {
		t.Errorf("got %v; want a pending dlv_ delivery", queued)
	}
	var page struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	mustCall(t, a, "list_webhook_deliveries", map[string]any{"webhookId": id}).json(t, &page)
	if len(page.Deliveries) != 1 || page.Deliveries[0]["deliveryId"] != queued["deliveryId"] {
		t.Errorf("got %v; want the test delivery", page.Deliveries)
	}
	mustCall(t, a, "update_webhook", map[string]any{"webhookId": id, "enabled": false})
	env = mustFail(t, a, "test_webhook", map[string]any{"webhookId": id})
	if env["code"] != "invalid_argument" || env["state"] != "disabled" {
		t.Errorf("got %v; want invalid_argument with state disabled for a disabled webhook", env)
	}
	var rotated struct {
		Secret string `json:"secret"`
	}
	mustCall(t, a, "rotate_webhook_secret", map[string]any{"webhookId": id}).json(t, &rotated)
	if rotated.Secret == "" || rotated.Secret == created.Secret {
		t.Errorf("got secret %q; want a new one", rotated.Secret)
	}
	mustCall(t, a, "delete_webhook", map[string]any{"webhookId": id})
	var list struct {
		Webhooks []any `json:"webhooks"`
	}
	mustCall(t, a, "list_webhooks", nil).json(t, &list)
	if len(list.Webhooks) != 0 {
		t.Errorf("got %v; want no webhooks after delete", list.Webhooks)
	}
	env = mustFail(t, a, "delete_webhook", map[string]any{"webhookId": id})
	if env["code"] != "invalid_argument" || env["reason"] != "not_found" {
		t.Errorf("got %v; want invalid_argument not_found for a deleted webhook", env)
	}
}

// TestPayloadLimitAppliesToMCP sends a body over 1 MiB: the edge refuses it
// with the same 413 envelope as every route, before the MCP server reads it.
func TestPayloadLimitAppliesToMCP(t *testing.T) {
	svc := startService(t, 0)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"` + strings.Repeat("a", 1<<20) + `"}}`
	for _, chunked := range []bool{false, true} {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, svc.url+"/mcp", rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code != "payload_too_large" {
			t.Errorf("chunked %v: got %d %q; want 413 payload_too_large", chunked, resp.StatusCode, e.Error.Code)
		}
	}
}

// TestToolsAnswerAnotherOrganisationsIDsAsMissing calls, as organisation B,
// every tool that takes an id with ids of organisation A's resources and
// with ids that never existed: the two answers must be the same (spec 1,
// 7.2), and no answer to B may name A's resources.
func TestToolsAnswerAnotherOrganisationsIDsAsMissing(t *testing.T) {
	svc := startService(t, 1)
	all := []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct}
	orgA := clients[0].connect(t, svc.url, svc.key(t, all...))
	k, err := svc.mint.Handle(testutil.Context(t), keys.MintAPIKey{Auth: domain.LocalOperator(domain.NewID(domain.PrefixOrganisation)),
		Name: "organisation B", Scopes: all})
	if err != nil {
		t.Fatal(err)
	}
	orgB := clients[3].connect(t, svc.url, k.Token)

	// Organisation A's resources.
	dev := svc.fleet.DeviceIDs[0]
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	mustCall(t, orgA, "acquire_lease", map[string]any{"deviceId": dev}).json(t, &lease)
	var sc screenJSON
	mustCall(t, orgA, "observe", map[string]any{"deviceId": dev, "screenshot": false}).json(t, &sc)
	mustCall(t, orgA, "press_key", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "key": "HOME", "idempotencyKey": "org-a-key"})
	var hook struct {
		Webhook struct {
			WebhookID string `json:"webhookId"`
		} `json:"webhook"`
	}
	mustCall(t, orgA, "create_webhook", map[string]any{"url": "https://93.184.216.34/a", "events": []string{"run.ended"}}).json(t, &hook)
	ofA := map[string]string{"deviceId": dev, "leaseId": lease.LeaseID, "frameId": sc.FrameID, "webhookId": hook.Webhook.WebhookID,
		"idempotencyKey": "org-a-key"}
	never := map[string]string{"deviceId": domain.NewID(domain.PrefixDevice), "leaseId": domain.NewID(domain.PrefixLease),
		"frameId": domain.NewID(domain.PrefixFrame), "webhookId": domain.NewID(domain.PrefixWebhook), "idempotencyKey": "never-a-key"}

	calls := []struct {
		tool string
		ids  []string
		args map[string]any
	}{
		{"get_device", []string{"deviceId"}, nil},
		{"observe", []string{"deviceId"}, nil},
		{"acquire_lease", []string{"deviceId"}, nil},
		{"renew_lease", []string{"deviceId", "leaseId"}, nil},
		{"release_lease", []string{"deviceId", "leaseId"}, nil},
		{"wake_device", []string{"deviceId"}, nil},
		{"stop_device", []string{"deviceId"}, nil},
		{"get_driving", []string{"deviceId"}, nil},
		{"rename_device", []string{"deviceId"}, map[string]any{"name": "taken over"}},
		{"wait_for", []string{"deviceId"}, map[string]any{"text": "Settings", "timeoutMs": 1}},
		{"tap", []string{"deviceId", "leaseId"}, map[string]any{"x": 1, "y": 1, "idempotencyKey": "b-tap"}},
		{"tap_element", []string{"deviceId", "leaseId"}, map[string]any{"ref": "e9vjcu", "idempotencyKey": "b-tap-element"}},
		{"get_frame", []string{"frameId"}, nil},
		{"get_receipt", []string{"idempotencyKey"}, nil},
		{"update_webhook", []string{"webhookId"}, map[string]any{"enabled": false}},
		{"rotate_webhook_secret", []string{"webhookId"}, nil},
		{"test_webhook", []string{"webhookId"}, nil},
		{"delete_webhook", []string{"webhookId"}, nil},
		{"list_webhook_deliveries", []string{"webhookId"}, nil},
	}
	mask := func(s string) string {
		for _, ids := range []map[string]string{ofA, never} {
			for _, v := range ids {
				s = strings.ReplaceAll(s, v, "<id>")
			}
		}
		return s
	}
	for _, c := range calls {
		t.Run(c.tool, func(t *testing.T) {
			args := func(ids map[string]string) map[string]any {
				m := map[string]any{}
				for k, v := range c.args {
					m[k] = v
				}
				for _, name := range c.ids {
					m[name] = ids[name]
				}
				return m
			}
			a, err := orgB.call(t, c.tool, args(ofA))
			if err != nil {
				t.Fatal(err)
			}
			b, err := orgB.call(t, c.tool, args(never))
			if err != nil {
				t.Fatal(err)
			}
			if !a.isError {
				t.Fatalf("got success %v for organisation A's ids; want a failure", a.texts)
			}
			if got, want := mask(strings.Join(a.texts, "\n")), mask(strings.Join(b.texts, "\n")); got != want {
				t.Errorf("organisation A's ids answer\n%s\nbut ids that never existed answer\n%s", got, want)
			}
		})
	}
	for _, tool := range []string{"list_devices", "list_leases", "list_receipts", "list_webhooks"} {
		r := mustCall(t, orgB, tool, nil)
		for _, v := range ofA {
			if strings.Contains(strings.Join(r.texts, ""), v) {
				t.Errorf("%s: organisation B's answer names organisation A's %s", tool, v)
			}
		}
	}
}

// TestReceiptKeysWithReservedCharactersOverMCP: an action sent with an
// idempotency key holding characters a URL reserves (/, %, ?, #, spaces,
// dot segments) is read, listed and reviewed by that key through the
// tools, with every client.
func TestReceiptKeysWithReservedCharactersOverMCP(t *testing.T) {
	svc := startService(t, len(clients))
	for i, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			dev := svc.fleet.DeviceIDs[i]
			a := c.connect(t, svc.url, "") // the local operator: a person, who may review
			var lease struct {
				LeaseID string `json:"leaseId"`
			}
			mustCall(t, a, "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 600}).json(t, &lease)
			for _, key := range []string{"run_x/step-1/0", "100%", "what?", "a#b", "two words", "a/../b"} {
				key := c.name + ":" + key
				mustCall(t, a, "press_key", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "key": "HOME", "idempotencyKey": key})
				var rc struct {
					IdempotencyKey string `json:"idempotencyKey"`
					State          string `json:"state"`
				}
				mustCall(t, a, "get_receipt", map[string]any{"idempotencyKey": key}).json(t, &rc)
				if rc.IdempotencyKey != key || rc.State != "committed" {
					t.Fatalf("get_receipt %q: got %+v; want its committed receipt", key, rc)
				}
				mustCall(t, a, "review_receipt", map[string]any{"idempotencyKey": key, "note": "seen"}).json(t, &rc)
				if rc.IdempotencyKey != key {
					t.Fatalf("review_receipt %q: got %+v", key, rc)
				}
			}
		})
	}
}
