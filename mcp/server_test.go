package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// newTestServer is the surface with every tool and nothing behind it: the
// fleet tools answer internal_error, which these tests never reach.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// protocolDefaultHint is what MCP tells a client to assume of a hint a
// tool leaves out.
var protocolDefaultHint = map[string]bool{"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}

// readHints answers the four hints as a client reads them: a hint left
// out is the protocol's default, and a read-only tool neither destroys
// nor repeats anything.
func readHints(a mcpgo.ToolAnnotation) hints {
	get := func(v *bool, hint string) bool {
		if v == nil {
			return protocolDefaultHint[hint]
		}
		return *v
	}
	h := hints{readOnly: get(a.ReadOnlyHint, "readOnlyHint"), openWorld: get(a.OpenWorldHint, "openWorldHint")}
	if !h.readOnly {
		h.destructive = get(a.DestructiveHint, "destructiveHint")
		h.idempotent = get(a.IdempotentHint, "idempotentHint")
	}
	return h
}

// wantHints is what a client must read off a few tools of each kind.
var wantHints = map[string]hints{
	"tap":           {destructive: true, openWorld: true},
	"open_app":      {openWorld: true},
	"observe":       {readOnly: true},
	"list_devices":  {readOnly: true},
	"renew_lease":   {idempotent: true},
	"release_lease": {},
}

// TestToolDefinitions checks what every client relies on: stable
// snake_case names, a title and a description to act on, behaviour
// annotations a client reads right (hints equal to the protocol's
// defaults left out), a closed object schema, and at least one scope.
func TestToolDefinitions(t *testing.T) {
	s := newTestServer(t)
	if got := len(s.ToolNames()); got != 45 {
		t.Errorf("got %d tools; want 44", got)
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, name := range s.ToolNames() {
		t.Run(name, func(t *testing.T) {
			tl := s.tools[name]
			d := tl.def
			if !snake.MatchString(d.Name) {
				t.Errorf("got name %q; want snake_case", d.Name)
			}
			if d.Title == "" || len(d.Description) < 40 {
				t.Errorf("got title %q and a %d-character description; want both, the description at least 40", d.Title, len(d.Description))
			}
			a := d.Annotations
			for hint, v := range map[string]*bool{"readOnlyHint": a.ReadOnlyHint, "destructiveHint": a.DestructiveHint,
				"idempotentHint": a.IdempotentHint, "openWorldHint": a.OpenWorldHint} {
				if v != nil && *v == protocolDefaultHint[hint] {
					t.Errorf("got %s stated as its protocol default %v; want it left out", hint, *v)
				}
			}
			if a.ReadOnlyHint != nil && (a.DestructiveHint != nil || a.IdempotentHint != nil) {
				t.Errorf("got a read-only tool with destructive or idempotent hints %+v; the protocol gives them no meaning there", a)
			}
			if want, ok := wantHints[name]; ok {
				if got := readHints(a); got != want {
					t.Errorf("a client reads hints %+v; want %+v", got, want)
				}
			}
			var schema struct {
				Type                 string `json:"type"`
				AdditionalProperties *bool  `json:"additionalProperties"`
			}
			if err := json.Unmarshal(d.RawInputSchema, &schema); err != nil || schema.Type != "object" ||
				schema.AdditionalProperties == nil || *schema.AdditionalProperties {
				t.Errorf("got schema %s; want a closed object", d.RawInputSchema)
			}
			if len(tl.scopes) == 0 {
				t.Error("got no scope; every tool needs one")
			}
		})
	}
}

// TestToolVisibility applies the rule of the package comment to several
// credentials: tools/list shows exactly the usable tools, and a call to
// any other real tool is refused naming what is missing.
func TestToolVisibility(t *testing.T) {
	s := newTestServer(t)
	read, lease, act, runs := domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct, domain.ScopeRunsStart
	runTools := []string{"cancel_run", "get_run", "get_run_divergence", "get_run_frames", "list_runs", "pause_run", "resume_run", "start_run"}
	tests := []struct {
		name string
		auth domain.Auth
		// see are the tools listed; every other tool is refused.
		see []string
		// refusal says what a refused call names: a scope, or where.
		refusal func(tool string) map[string]any
	}{
		{
			name: "local operator", auth: domain.LocalOperator("org_1"), see: s.ToolNames(),
		},
		{
			name: "key with devices:read",
			auth: domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{read}},
			see: []string{"create_webhook", "delete_webhook", "get_device", "get_driving", "get_frame", "get_receipt", "list_devices",
				"list_leases", "list_receipts", "list_webhook_deliveries", "list_webhooks", "observe", "rename_device", "rotate_webhook_secret",
				"test_webhook", "update_webhook", "wait_for"},
			refusal: func(tool string) map[string]any {
				if m := appToolRefusal(tool); m != nil {
					return m
				}
				if tool == "review_receipt" {
					return map[string]any{"scope": nil, "where": nil} // a person's act: no scope lacks, no app
				}
				if slices.Contains([]string{"acquire_lease", "renew_lease", "release_lease"}, tool) {
					return map[string]any{"scope": "devices:lease"}
				}
				if slices.Contains(runTools, tool) {
					return map[string]any{"scope": "runs:start"}
				}
				return map[string]any{"scope": "devices:act"}
			},
		},
		{
			name: "key with no scope",
			auth: domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_2"},
			see:  nil,
			refusal: func(tool string) map[string]any {
				if m := appToolRefusal(tool); m != nil {
					return m
				}
				return map[string]any{"scope": string(s.tools[tool].scopes[0])}
			},
		},
		{
			name: "OAuth app with every device scope",
			auth: domain.Auth{OrgID: "org_1", Kind: domain.PrincipalApp, UserID: "u", ClientID: "c", Scopes: []domain.Scope{read, lease, act}},
			see: []string{"acquire_lease", "batch_actions", "double_tap", "get_device", "get_driving", "get_frame", "get_receipt",
				"install_catalog_app", "list_devices", "list_leases", "long_press", "observe", "open_app", "press_key", "release_lease",
				"renew_lease", "swipe", "tap", "tap_element", "type_text", "wait_for", "wake_device"},
			refusal: func(tool string) map[string]any {
				if m := appToolRefusal(tool); m != nil {
					return m
				}
				switch {
				case slices.Contains(runTools, tool):
					return map[string]any{"scope": "runs:start"}
				case tool == "list_receipts":
					return map[string]any{"where": "the console's receipts page (an app reads one receipt by its idempotency key: get_receipt)"}
				case tool == "rename_device" || tool == "stop_device":
					return map[string]any{"where": "the console's device page"}
				case tool == "review_receipt":
					return map[string]any{"where": "the console"}
				}
				return map[string]any{"where": "the REST API (/v1/webhooks)"}
			},
		},
		{
			// Spec 5.2, 5.4: run tools need runs:start AND devices:act, and
			// an app holding both sees them.
			name: "OAuth app with runs:start and devices:act",
			auth: domain.Auth{OrgID: "org_1", Kind: domain.PrincipalApp, UserID: "u", ClientID: "c", Scopes: []domain.Scope{runs, act}},
			see: []string{"batch_actions", "cancel_run", "double_tap", "get_run", "get_run_divergence", "get_run_frames", "install_catalog_app", "list_runs",
				"long_press", "open_app", "pause_run", "press_key", "resume_run", "start_run", "swipe", "tap", "tap_element", "type_text",
				"wake_device"},
			refusal: func(tool string) map[string]any {
				if m := appToolRefusal(tool); m != nil {
					return m
				}
				if slices.Contains([]string{"acquire_lease", "renew_lease", "release_lease"}, tool) {
					return map[string]any{"scope": "devices:lease"}
				}
				if tool == "stop_device" {
					return map[string]any{"where": "the console's device page"}
				}
				return map[string]any{"scope": "devices:read"}
			},
		},
		{
			name: "key with runs:start alone",
			auth: domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_3", Scopes: []domain.Scope{runs}},
			see:  nil,
			refusal: func(tool string) map[string]any {
				if m := appToolRefusal(tool); m != nil {
					return m
				}
				if slices.Contains(runTools, tool) {
					return map[string]any{"scope": "devices:act"}
				}
				return map[string]any{"scope": string(s.tools[tool].scopes[0])}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.WithValue(domain.WithAuth(testutil.Context(t), tt.auth), rpcMethodKey{}, string(mcpgo.MethodToolsList))
			var all []mcpgo.Tool
			for _, n := range s.ToolNames() {
				all = append(all, s.tools[n].def)
			}
			var got []string
			for _, tl := range s.filterTools(ctx, all) {
				got = append(got, tl.Name)
			}
			if !slices.Equal(got, tt.see) {
				t.Errorf("got tools/list %v; want %v", got, tt.see)
			}
			callCtx := context.WithValue(ctx, rpcMethodKey{}, string(mcpgo.MethodToolsCall))
			if n := len(s.filterTools(callCtx, all)); n != len(all) {
				t.Errorf("got %d tools visible to tools/call; want all %d, so the handler can name the scope", n, len(all))
			}
			for _, name := range s.ToolNames() {
				if slices.Contains(tt.see, name) {
					continue
				}
				req := mcpgo.CallToolRequest{}
				req.Params.Name = name
				req.Params.RawArguments = json.RawMessage(`{"deviceId":"not a device"}`)
				res, err := s.handle(s.tools[name])(callCtx, req)
				if err != nil || !res.IsError {
					t.Fatalf("%s: got %v, %v; want a failed result", name, res, err)
				}
				var env map[string]any
				if err := json.Unmarshal([]byte(res.Content[0].(mcpgo.TextContent).Text), &env); err != nil {
					t.Fatalf("%s: got %v; want the envelope (the scope is checked before the arguments)", name, res.Content)
				}
				if env["code"] != "permission_denied" || env["name"] != name {
					t.Errorf("%s: got %v; want permission_denied", name, env)
				}
				for k, v := range tt.refusal(name) {
					if env[k] != v {
						t.Errorf("%s: got %s %v; want %v", name, k, env[k], v)
					}
				}
			}
		})
	}
}

// TestEnvelope checks the rendering of failures: only MCP codes, the
// REST-only codes translated, extras kept, retryable always a boolean.
func TestEnvelope(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		want  map[string]any
		fault bool
	}{
		{"MCP code with extras", domain.Errorf(domain.CodeStaleFrame, "the screen changed").With("deviceId", "dev_1"),
			map[string]any{"name": "tap", "code": "stale_frame", "message": "the screen changed", "retryable": false, "deviceId": "dev_1"}, false},
		{"retryable set by the occurrence", domain.Errorf(domain.CodeIdempotencyConflict, "in flight").WithRetryable(true),
			map[string]any{"name": "tap", "code": "idempotency_conflict", "message": "in flight", "retryable": true}, false},
		{"retryable by default for device_busy", domain.Errorf(domain.CodeDeviceBusy, "busy").With("retryAfterMs", 50),
			map[string]any{"name": "tap", "code": "device_busy", "message": "busy", "retryable": true, "retryAfterMs": 50}, false},
		{"not_found becomes invalid_argument", domain.Errorf(domain.CodeNotFound, "no webhook whk_1"),
			map[string]any{"name": "tap", "code": "invalid_argument", "message": "no webhook whk_1", "retryable": false, "reason": "not_found"}, false},
		{"receipt_not_found becomes invalid_argument", domain.Errorf(domain.CodeReceiptNotFound, "no receipt"),
			map[string]any{"name": "tap", "code": "invalid_argument", "message": "no receipt", "retryable": false, "reason": "receipt_not_found"}, false},
		{"wrong_state keeps its state", domain.Errorf(domain.CodeWrongState, "disabled").With("state", "disabled"),
			map[string]any{"name": "tap", "code": "invalid_argument", "message": "disabled", "retryable": false, "reason": "wrong_state", "state": "disabled"}, false},
		{"other REST code becomes internal_error", domain.Errorf(domain.CodeServiceUnavailable, "not served").With("x", 1),
			map[string]any{"name": "tap", "code": "internal_error", "message": "not served", "retryable": false}, false},
		{"plain error is a fault", errors.New("connection reset"),
			map[string]any{"name": "tap", "code": "internal_error", "message": "internal error", "retryable": false}, true},
		{"annotation fills in", annotate(domain.Errorf(domain.CodeLeaseRequired, "no lease"), "idempotencyKey", "k", "code", "nope"),
			map[string]any{"name": "tap", "code": "lease_required", "message": "no lease", "retryable": false, "idempotencyKey": "k"}, false},
		{"error's own field beats an annotation", annotate(domain.Errorf(domain.CodeLeaseRequired, "x").With("deviceId", "dev_a"), "deviceId", "dev_b"),
			map[string]any{"name": "tap", "code": "lease_required", "message": "x", "retryable": false, "deviceId": "dev_a"}, false},
		{"override beats the error's field", override(annotate(domain.Errorf(domain.CodeLeaseRequired, "x").With("idempotencyKey", "k.0"), "deviceId", "d"), "idempotencyKey", "k"),
			map[string]any{"name": "tap", "code": "lease_required", "message": "x", "retryable": false, "idempotencyKey": "k", "deviceId": "d"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fault := envelope("tap", tt.err)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tt.want)
			if string(gb) != string(wb) || fault != tt.fault {
				t.Errorf("got %s (fault %v); want %s (fault %v)", gb, fault, wb, tt.fault)
			}
		})
	}
}

// TestCompactElements checks the flattening of a UI snapshot per mode.
func TestCompactElements(t *testing.T) {
	snapshot, _ := json.Marshal(domain.UIElement{Ref: "root", Class: "android.widget.FrameLayout", Package: "com.example.notes",
		Bounds: [4]int{0, 0, 1080, 2400}, Enabled: true, Children: []domain.UIElement{
			{Ref: "title", Class: "android.widget.TextView", Text: "Notes", Bounds: [4]int{0, 100, 1080, 200}, Enabled: true},
			{Ref: "input", Class: "android.widget.EditText", ResourceID: "com.example.notes:id/input", Hint: "Write a note…",
				Bounds: [4]int{40, 300, 760, 450}, Clickable: true, Focusable: true, Enabled: true},
			{Ref: "save", Class: "android.widget.Button", Text: "Save", ContentDesc: "Save", Bounds: [4]int{790, 300, 1040, 450}, Clickable: true},
			{Ref: "below", Class: "android.widget.Button", Text: "Below the fold", Bounds: [4]int{0, 2500, 1080, 2600}, Clickable: true, Enabled: true},
			{Ref: "layout", Class: "android.widget.LinearLayout", Bounds: [4]int{0, 500, 1080, 900}, Enabled: true},
			{Ref: "row", Class: "android.widget.LinearLayout", Bounds: [4]int{0, 900, 1080, 1000}, Clickable: true, Enabled: true,
				Children: []domain.UIElement{
					{Ref: "t1", Class: "android.widget.TextView", Text: "Wi-Fi", Bounds: [4]int{40, 910, 600, 950}, Enabled: true},
					{Ref: "t2", Class: "android.widget.TextView", Text: "Connected", Bounds: [4]int{40, 950, 600, 990}, Enabled: true},
					{Ref: "sw", Class: "android.widget.Switch", Text: "On", Bounds: [4]int{900, 920, 1040, 980}, Clickable: true,
						Checkable: true, Checked: true, Enabled: true},
				}},
		}})
	const row = `{"ref":"row","class":"LinearLayout","label":"Wi-Fi · Connected","bounds":[0,900,1080,1000],"clickable":true}`
	const sw = `{"ref":"sw","class":"Switch","text":"On","bounds":[900,920,1040,980],"clickable":true,"checkable":true,"checked":true}`
	tests := []struct {
		name     string
		mode     string
		onScreen bool
		max      int
		want     string
		omitted  int
	}{
		{"all on screen", "all", true, 10, `[{"ref":"title","class":"TextView","text":"Notes","bounds":[0,100,1080,200]},` +
			`{"ref":"input","class":"EditText","id":"input","hint":"Write a note…","bounds":[40,300,760,450],"clickable":true,"editable":true},` +
			`{"ref":"save","class":"Button","text":"Save","bounds":[790,300,1040,450],"clickable":true,"disabled":true},` + row + `,` +
			`{"ref":"t1","class":"TextView","text":"Wi-Fi","bounds":[40,910,600,950]},` +
			`{"ref":"t2","class":"TextView","text":"Connected","bounds":[40,950,600,990]},` + sw + `]`, 0},
		{"interactive", "interactive", true, 10, `[{"ref":"input","class":"EditText","id":"input","hint":"Write a note…","bounds":[40,300,760,450],"clickable":true,"editable":true},` +
			`{"ref":"save","class":"Button","text":"Save","bounds":[790,300,1040,450],"clickable":true,"disabled":true},` + row + `,` + sw + `]`, 0},
		{"off-screen kept on request", "interactive", false, 10, `[{"ref":"input","class":"EditText","id":"input","hint":"Write a note…","bounds":[40,300,760,450],"clickable":true,"editable":true},` +
			`{"ref":"save","class":"Button","text":"Save","bounds":[790,300,1040,450],"clickable":true,"disabled":true},` +
			`{"ref":"below","class":"Button","text":"Below the fold","bounds":[0,2500,1080,2600],"clickable":true},` + row + `,` + sw + `]`, 0},
		{"capped", "all", true, 1, `[{"ref":"title","class":"TextView","text":"Notes","bounds":[0,100,1080,200]}]`, 6},
		{"none", "none", true, 10, `null`, 0},
	}
	// One cache serves every case, twice each: it must tell the options
	// apart and answer a repeat exactly as a fresh compaction.
	var cache elementCache
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, compact := range []func(json.RawMessage, string, bool, int, int, int) (compacted, error){
				compactElements, cache.compact, cache.compact,
			} {
				c, err := compact(snapshot, tt.mode, tt.onScreen, 1080, 2400, tt.max)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := json.Marshal(c.elements)
				if string(got) != tt.want || c.omitted != tt.omitted {
					t.Errorf("got %s (%d omitted); want %s (%d omitted)", got, c.omitted, tt.want, tt.omitted)
				}
				if string(c.json) != tt.want {
					t.Errorf("got the list encoded as %s; want %s", c.json, tt.want)
				}
				if tt.mode != "none" && c.app != "com.example.notes" {
					t.Errorf("got app %q; want com.example.notes", c.app)
				}
			}
		})
	}
	// Other bytes are another screen, whatever the options.
	changed := json.RawMessage(strings.Replace(string(snapshot), `"text":"Notes"`, `"text":"Other"`, 1))
	c, err := cache.compact(changed, "all", true, 1080, 2400, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.json; !strings.Contains(string(got), `"text":"Other"`) {
		t.Errorf("a changed snapshot was answered from the cache: %s", got)
	}
}

// TestScreenJSONIsMarshal checks that a screen written with its elements'
// own encoding is the bytes json.Marshal writes for it, whichever of the
// optional members are present.
func TestScreenJSONIsMarshal(t *testing.T) {
	on := true
	els := []element{{Ref: "a", Class: "Button", Text: "Save <&> “now”", Bounds: [4]int{1, 2, 3, 4}, Clickable: true},
		{Ref: "b", Label: "Wi-Fi · On", Bounds: [4]int{0, 0, 10, 10}, Checked: true}}
	base := screen{DeviceID: "dev_1", FrameID: "frm_1", ScreenHash: "sha256:ab", CapturedAt: time.Date(2026, 11, 29, 15, 4, 5, 123456789, time.UTC),
		Width: 1080, Height: 2400}
	for _, c := range []struct {
		name string
		edit func(*screen)
	}{
		{"no elements", func(*screen) {}},
		{"elements", func(sc *screen) { sc.Elements = els }},
		{"elements, app, screen on, image", func(sc *screen) {
			sc.Elements, sc.App, sc.ScreenOn, sc.Image = els, "com.example.<notes>", &on, &imageSize{Width: 540, Height: 1200, Scale: 2}
		}},
		{"elements and more omitted", func(sc *screen) { sc.Elements, sc.ElementsOmitted = els, 7 }},
		{"an empty list", func(sc *screen) { sc.Elements = []element{} }},
		{"omitted only", func(sc *screen) { sc.ElementsOmitted = 3 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := base
			c.edit(&sc)
			want, err := json.Marshal(sc)
			if err != nil {
				t.Fatal(err)
			}
			list, _ := json.Marshal(sc.Elements)
			if got, err := screenJSON(sc, list); err != nil || string(got) != string(want) {
				t.Errorf("got  %s (%v)\nwant %s", got, err, want)
			}
		})
	}
}

// TestInvalidParams checks the refusal of arguments that fail the input
// schema: isError and a plain sentence beginning with -32602, naming what
// is wrong; never the JSON envelope.
func TestInvalidParams(t *testing.T) {
	s := newTestServer(t)
	ctx := domain.WithAuth(testutil.Context(t), domain.LocalOperator("org_1"))
	dev := domain.NewID(domain.PrefixDevice)
	tests := []struct {
		name string
		tool string
		args string
		want []string
	}{
		{"wrong type", "tap", `{"deviceId":"` + dev + `","x":"a","y":1}`, []string{"x: got string, want integer"}},
		{"missing", "tap", `{"deviceId":"` + dev + `","x":1}`, []string{"missing property 'y'"}},
		{"extra", "get_device", `{"deviceId":"` + dev + `","z":1}`, []string{"'z' not allowed"}},
		{"not an id", "observe", `{"deviceId":"dev_x"}`, []string{"deviceId", "does not match pattern"}},
		{"enum", "observe", `{"deviceId":"` + dev + `","elements":"some"}`, []string{"elements"}},
		{"batch step", "batch_actions", `{"deviceId":"` + dev + `","actions":[{"action":"fly"}]}`, []string{"actions.0.action"}},
		{"not an object", "list_devices", `[1]`, []string{"got array, want object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mcpgo.CallToolRequest{}
			req.Params.Name, req.Params.RawArguments = tt.tool, json.RawMessage(tt.args)
			res, err := s.handle(s.tools[tt.tool])(ctx, req)
			if err != nil || !res.IsError || len(res.Content) != 1 {
				t.Fatalf("got %v, %v; want one failed text block", res, err)
			}
			text := res.Content[0].(mcpgo.TextContent).Text
			if !strings.HasPrefix(text, "-32602: invalid params: the arguments of "+tt.tool) || json.Valid([]byte(text)) {
				t.Errorf("got %q; want a plain sentence beginning -32602", text)
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("got %q; want it to say %q", text, w)
				}
			}
		})
	}
}

// TestAcceptedArgumentsAreRemembered checks the memory of arguments that
// passed the input schema: a repeat is not validated again, a refusal is
// never remembered (the same bad arguments are refused every time), and
// the memory holds the last few small argument objects only.
func TestAcceptedArgumentsAreRemembered(t *testing.T) {
	s := newTestServer(t)
	ctx := domain.WithAuth(testutil.Context(t), domain.LocalOperator("org_1"))
	obs := s.tools["observe"]
	call := func(args string) *mcpgo.CallToolResult {
		t.Helper()
		req := mcpgo.CallToolRequest{}
		req.Params.Name, req.Params.RawArguments = "observe", json.RawMessage(args)
		res, err := s.handle(obs)(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	refused := func(res *mcpgo.CallToolResult) bool {
		return res.IsError && strings.HasPrefix(res.Content[0].(mcpgo.TextContent).Text, "-32602")
	}
	good := `{"deviceId":"` + domain.NewID(domain.PrefixDevice) + `"}`
	bad := `{"deviceId":"dev_x"}`
	for n := range 2 {
		if res := call(good); refused(res) {
			t.Fatalf("call %d: valid arguments refused: %v", n, res.Content)
		}
		if !obs.accepted.has([]byte(good)) {
			t.Fatalf("call %d: valid arguments not remembered", n)
		}
		if res := call(bad); !refused(res) {
			t.Fatalf("call %d: invalid arguments not refused: %v", n, res.Content)
		}
		if obs.accepted.has([]byte(bad)) {
			t.Fatalf("call %d: refused arguments remembered", n)
		}
	}
	// A large object is validated every time; the oldest of more than
	// acceptedArgsSize is forgotten.
	large := `{"deviceId":"` + domain.NewID(domain.PrefixDevice) + `","leaseId":"lse_` + strings.Repeat("0", 32) + `"` + strings.Repeat(" ", maxAcceptedArgs) + `}`
	if res := call(large); refused(res) || obs.accepted.has([]byte(large)) {
		t.Fatalf("a large valid object: refused %v, remembered %v", refused(res), obs.accepted.has([]byte(large)))
	}
	for range acceptedArgsSize {
		call(`{"deviceId":"` + domain.NewID(domain.PrefixDevice) + `"}`)
	}
	if obs.accepted.has([]byte(good)) {
		t.Error("the oldest accepted arguments were not forgotten")
	}
}

// TestPanicIsAToolFailure checks that a tool that panics answers the
// internal_error envelope (and is logged) instead of breaking the call.
func TestPanicIsAToolFailure(t *testing.T) {
	s := newTestServer(t)
	boom := newTool("boom", "Boom", "A tool that panics, for this test only; it exists nowhere else.", object(nil), hints{readOnly: true},
		domain.ScopeDevicesRead)
	boom.run = func(context.Context, domain.Auth, json.RawMessage) (*mcpgo.CallToolResult, error) { panic("kaboom") }
	if err := boom.compile(); err != nil {
		t.Fatal(err)
	}
	ctx := domain.WithAuth(testutil.Context(t), domain.LocalOperator("org_1"))
	res, err := s.handle(boom)(ctx, mcpgo.CallToolRequest{})
	if err != nil || !res.IsError {
		t.Fatalf("got %v, %v; want a failed result", res, err)
	}
	text := res.Content[0].(mcpgo.TextContent).Text
	if want := `{"code":"internal_error","message":"internal error","name":"boom","retryable":false}`; text != want {
		t.Errorf("got %s; want %s", text, want)
	}
}

// appToolRefusal is the refusal of an app store tool to a credential
// without the apps scopes: the first scope it lacks.
func appToolRefusal(tool string) map[string]any {
	switch tool {
	case "create_app_installation":
		return map[string]any{"scope": "apps:write"}
	case "get_app_catalog", "get_app_installation", "get_app_inventory":
		return map[string]any{"scope": "apps:read"}
	}
	return nil
}

// The transport holds each tool with a bare input schema (registered):
// that loses nothing only while no tool binds a parameter to an
// Mcp-Param-* header, which the transport finds in the registered schema.
func TestNoToolBindsAParameterToAHeader(t *testing.T) {
	s := newTestServer(t)
	for _, tools := range []map[string]*tool{s.tools, s.meta} {
		for name, tl := range tools {
			if b := mcpgo.ExtractParamHeaderBindings(&tl.def); len(b) != 0 {
				t.Errorf("%s binds %v to headers; register it with its whole input schema (registered)", name, b)
			}
		}
	}
}

// tools/list answers every tool's whole input schema, not the bare one
// the transport holds.
func TestToolsListShowsEachToolsWholeInputSchema(t *testing.T) {
	s := newTestServer(t)
	ctx := context.WithValue(domain.WithAuth(testutil.Context(t), domain.LocalOperator("org_1")), rpcMethodKey{}, string(mcpgo.MethodToolsList))
	ctx = context.WithValue(ctx, chosenKey{}, chosenAll(t))
	resp := s.mcp.HandleMessage(ctx, json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	raw, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Result struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Result.Tools) == 0 {
		t.Fatalf("tools/list answered %.300s (%v); want the tools", raw, err)
	}
	for _, tl := range list.Result.Tools {
		def := s.tools[tl.Name]
		if def == nil {
			def = s.meta[tl.Name]
		}
		if def == nil {
			t.Errorf("tools/list names %s, which is no tool", tl.Name)
			continue
		}
		var got, want any
		_ = json.Unmarshal(tl.InputSchema, &got)
		_ = json.Unmarshal(def.def.RawInputSchema, &want)
		if !reflect.DeepEqual(got, want) || len(def.def.RawInputSchema) <= len(`{"type":"object"}`) {
			t.Errorf("%s: tools/list input schema %s; want the whole one %s", tl.Name, tl.InputSchema, def.def.RawInputSchema)
		}
	}
}

// chosenAll is the choice of every toolset and the meta tools.
func chosenAll(t *testing.T) chosenTools {
	t.Helper()
	c, err := parseToolsets(strings.Join(append(toolsetNames(), toolsetMeta), ","))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
