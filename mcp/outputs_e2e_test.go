package mcp_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/mcp"
	"phonefleet/testutil"
)

// checker validates every successful tools/call answer against the
// outputSchema tools/list declared for the tool, and remembers which tools
// it saw answer.
type checker struct {
	a       agent
	schemas map[string]*jsonschema.Schema
	// full are the output schemas before compaction (the contract's
	// shapes, which tools/list no longer spells out): every answer matches
	// them too.
	full   map[string]*jsonschema.Schema
	called map[string]bool
}

func newChecker(t *testing.T, a agent) *checker {
	t.Helper()
	c := &checker{a: a, schemas: map[string]*jsonschema.Schema{}, full: map[string]*jsonschema.Schema{}, called: map[string]bool{}}
	full, err := mcp.FullOutputSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for name, raw := range full {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		comp := jsonschema.NewCompiler()
		comp.DefaultDraft(jsonschema.Draft2020)
		url := "mem:///" + name + ".full.json"
		if err := comp.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
		if c.full[name], err = comp.Compile(url); err != nil {
			t.Fatalf("%s: the full output schema does not compile: %v", name, err)
		}
	}
	for _, tl := range a.tools(t) {
		if tl.OutputSchema == nil {
			t.Errorf("%s: tools/list shows no outputSchema; want one on every tool", tl.Name)
			continue
		}
		raw, err := json.Marshal(tl.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		comp := jsonschema.NewCompiler()
		comp.DefaultDraft(jsonschema.Draft2020)
		url := "mem:///" + tl.Name + ".output.json"
		if err := comp.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
		if c.schemas[tl.Name], err = comp.Compile(url); err != nil {
			t.Fatalf("%s: the outputSchema does not compile: %v", tl.Name, err)
		}
	}
	return c
}

// call calls a tool that must succeed and checks its answer: the
// structuredContent is present, validates against the tool's outputSchema,
// and is the same JSON as the text block. It decodes the answer into out
// (when not nil).
func (c *checker) call(t *testing.T, name string, args map[string]any, out any) result {
	t.Helper()
	r := mustCall(t, c.a, name, args)
	c.called[name] = true
	if r.structured == nil {
		t.Fatalf("%s: got no structuredContent; want it beside the text block", name)
	}
	raw, err := json.Marshal(r.structured)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	schema, ok := c.schemas[name]
	if !ok {
		t.Fatalf("%s: no outputSchema was listed", name)
	}
	if err := schema.Validate(inst); err != nil {
		t.Errorf("%s: structuredContent does not validate against the outputSchema: %v\n%s", name, err, raw)
	}
	if err := c.full[name].Validate(inst); err != nil {
		t.Errorf("%s: structuredContent does not validate against the full output schema: %v\n%s", name, err, raw)
	}
	var fromText, fromStructured any
	r.json(t, &fromText)
	_ = json.Unmarshal(raw, &fromStructured)
	if !reflect.DeepEqual(fromText, fromStructured) {
		t.Errorf("%s: the text block and structuredContent differ:\n%s\n%s", name, r.texts[len(r.texts)-1], raw)
	}
	if out != nil {
		r.json(t, out)
	}
	return r
}

// TestEveryToolAnswersItsOutputSchema drives every tool once to success
// through the official go-sdk client, on both protocol revisions, as local
// mode's operator (who sees every tool), and validates each answer's
// structuredContent against the outputSchema tools/list declared. It fails
// if a listed tool was not called, so a new tool must join it.
func TestEveryToolAnswersItsOutputSchema(t *testing.T) {
	svc := startService(t, 2)
	var sdkClients []client
	for _, c := range clients {
		if strings.HasPrefix(c.name, "go-sdk/") {
			sdkClients = append(sdkClients, c)
		}
	}
	for i, cl := range sdkClients {
		t.Run(cl.name, func(t *testing.T) {
			dev := svc.fleet.DeviceIDs[i]
			a := cl.connect(t, svc.url, "") // no bearer: local mode's operator
			c := newChecker(t, a)
			var listed []string
			for name := range c.schemas {
				listed = append(listed, name)
			}

			// Devices, leases, observation.
			c.call(t, "list_devices", nil, nil)
			c.call(t, "get_device", map[string]any{"deviceId": dev}, nil)
			c.call(t, "get_driving", map[string]any{"deviceId": dev}, nil)
			var renamed struct {
				Name string `json:"name"`
			}
			c.call(t, "rename_device", map[string]any{"deviceId": dev, "name": "Schema phone " + cl.name}, &renamed)
			if renamed.Name != "Schema phone "+cl.name {
				t.Errorf("rename_device: got name %q", renamed.Name)
			}
			var lease struct {
				LeaseID string `json:"leaseId"`
			}
			c.call(t, "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 600}, &lease)
			var driving struct {
				Driving bool `json:"driving"`
			}
			c.call(t, "get_driving", map[string]any{"deviceId": dev}, &driving)
			if !driving.Driving {
				t.Error("get_driving: got driving false under a lease; want true")
			}
			c.call(t, "renew_lease", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "ttlSeconds": 600}, nil)
			c.call(t, "list_leases", map[string]any{"deviceId": dev}, nil)
			var home screenJSON
			c.call(t, "observe", map[string]any{"deviceId": dev, "maxWidth": 270}, &home)
			c.call(t, "get_frame", map[string]any{"frameId": home.FrameID}, nil)
			c.call(t, "wait_for", map[string]any{"deviceId": dev, "text": "Settings"}, nil)

			// Actions, each under its own key.
			l := lease.LeaseID
			key := func(n string) string { return cl.name + "-" + n }
			c.call(t, "tap_element", map[string]any{"deviceId": dev, "leaseId": l, "ref": home.ref(t, textIs("Settings")),
				"observedFrame": home.FrameID, "idempotencyKey": key("tap_element")}, nil)
			c.call(t, "press_key", map[string]any{"deviceId": dev, "leaseId": l, "key": "HOME", "idempotencyKey": key("press_key")}, nil)
			c.call(t, "tap", map[string]any{"deviceId": dev, "leaseId": l, "x": 5, "y": 5, "idempotencyKey": key("tap")}, nil)
			c.call(t, "double_tap", map[string]any{"deviceId": dev, "leaseId": l, "x": 5, "y": 5}, nil)
			c.call(t, "long_press", map[string]any{"deviceId": dev, "leaseId": l, "x": 5, "y": 5}, nil)
			c.call(t, "swipe", map[string]any{"deviceId": dev, "leaseId": l, "x1": 540, "y1": 1500, "x2": 540, "y2": 900}, nil)
			c.call(t, "install_catalog_app", map[string]any{"deviceId": dev, "leaseId": l, "package": sim.Catalog()[0].Package}, nil)
			c.call(t, "open_app", map[string]any{"deviceId": dev, "leaseId": l, "package": "com.example.notes"}, nil)
			var notes screenJSON
			c.call(t, "observe", map[string]any{"deviceId": dev, "screenshot": false, "elements": "interactive"}, &notes)
			c.call(t, "batch_actions", map[string]any{"deviceId": dev, "leaseId": l, "actions": []map[string]any{
				{"action": "tap_element", "ref": notes.ref(t, func(_, hint string) bool { return strings.HasPrefix(hint, "Write a note") })},
			}}, nil)
			c.call(t, "type_text", map[string]any{"deviceId": dev, "leaseId": l, "text": "schema", "idempotencyKey": key("type_text")}, nil)
			c.call(t, "stop_device", map[string]any{"deviceId": dev, "leaseId": l}, nil)
			c.call(t, "wake_device", map[string]any{"deviceId": dev, "leaseId": l}, nil)

			// Receipts.
			c.call(t, "get_receipt", map[string]any{"idempotencyKey": key("type_text")}, nil)
			var page struct {
				Receipts []struct {
					IdempotencyKey string `json:"idempotencyKey"`
				} `json:"receipts"`
			}
			c.call(t, "list_receipts", map[string]any{"deviceId": dev, "limit": 3}, &page)
			if len(page.Receipts) != 3 {
				t.Errorf("list_receipts: got %d receipts; want a page of 3", len(page.Receipts))
			}
			var reviewed struct {
				Reviewed struct {
					Note string `json:"note"`
				} `json:"reviewed"`
			}
			c.call(t, "review_receipt", map[string]any{"idempotencyKey": key("tap"), "note": "looked at it"}, &reviewed)
			if reviewed.Reviewed.Note != "looked at it" {
				t.Errorf("review_receipt: got %+v; want the review with its note", reviewed)
			}
			c.call(t, "release_lease", map[string]any{"deviceId": dev, "leaseId": l}, nil)

			// Webhooks.
			var created struct {
				Webhook struct {
					WebhookID string `json:"webhookId"`
				} `json:"webhook"`
			}
			c.call(t, "create_webhook", map[string]any{"url": "https://93.184.216.34/hook", "events": []string{"run.ended"}}, &created)
			w := created.Webhook.WebhookID
			c.call(t, "list_webhooks", nil, nil)
			c.call(t, "test_webhook", map[string]any{"webhookId": w}, nil)
			c.call(t, "list_webhook_deliveries", map[string]any{"webhookId": w}, nil)
			c.call(t, "update_webhook", map[string]any{"webhookId": w, "enabled": false}, nil)
			c.call(t, "rotate_webhook_secret", map[string]any{"webhookId": w}, nil)
			c.call(t, "delete_webhook", map[string]any{"webhookId": w}, nil)

			// Runs.
			var run struct {
				RunID string `json:"runId"`
			}
			c.call(t, "start_run", map[string]any{"deviceId": dev, "goal": "look around", "executor": "external"}, &run)
			c.call(t, "get_run", map[string]any{"runId": run.RunID}, nil)
			c.call(t, "list_runs", map[string]any{"deviceId": dev}, nil)
			c.call(t, "pause_run", map[string]any{"runId": run.RunID}, nil)
			c.call(t, "resume_run", map[string]any{"runId": run.RunID}, nil)
			c.call(t, "get_run_frames", map[string]any{"runId": run.RunID}, nil)
			c.call(t, "get_run_divergence", map[string]any{"runId": run.RunID}, nil)
			c.call(t, "cancel_run", map[string]any{"runId": run.RunID}, nil)

			// The app store.
			c.call(t, "get_app_catalog", nil, nil)
			c.call(t, "create_app_installation", map[string]any{"requestKey": strings.ReplaceAll(key("install"), "/", "-"), "package": "com.example.calculator",
				"version": "8.4", "devices": []string{dev}}, nil)
			c.call(t, "get_app_installation", map[string]any{"requestKey": strings.ReplaceAll(key("install"), "/", "-")}, nil)
			c.call(t, "get_app_inventory", map[string]any{"deviceId": dev}, nil)

			for _, name := range listed {
				if !c.called[name] {
					t.Errorf("%s: listed but never called; add it to this test", name)
				}
			}
			if len(listed) != len(svcToolNames(t)) {
				t.Errorf("got %d tools listed to the operator; want all %d", len(listed), len(svcToolNames(t)))
			}
		})
	}
}

// svcToolNames are the names of every tool of the surface.
func svcToolNames(t *testing.T) []string {
	t.Helper()
	s, err := mcp.New(mcp.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.ToolNames()
}

// TestWaitForSeesAnElementAppear starts wait_for on a text no element
// shows, while another goroutine types that text a moment later: the wait
// answers met, the element it found, and the frame it saw it on, which is
// a newer frame than the one observed before the wait and shows the text.
func TestWaitForSeesAnElementAppear(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	a := clients[2].connect(t, svc.url, "") // go-sdk, local mode's operator
	c := newChecker(t, a)
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	c.call(t, "acquire_lease", map[string]any{"deviceId": dev, "ttlSeconds": 600}, &lease)
	c.call(t, "open_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": "com.example.notes"}, nil)
	var notes screenJSON
	c.call(t, "observe", map[string]any{"deviceId": dev, "screenshot": false}, &notes)
	c.call(t, "tap_element", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID,
		"ref": notes.ref(t, func(_, hint string) bool { return strings.HasPrefix(hint, "Write a note") })}, nil)
	var before screenJSON
	c.call(t, "observe", map[string]any{"deviceId": dev, "screenshot": false}, &before)
	const text = "appeared later"
	for _, e := range before.Elements {
		if strings.Contains(e.Text, text) {
			t.Fatalf("the text %q is on screen before the wait", text)
		}
	}

	// The delayed action: typed by the same person through the application
	// while the wait runs. The pause only orders the two; nothing asserts
	// how long anything took.
	typed := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		_, err := svc.fleet.Fleet.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: svc.fleet.Auth, DeviceID: dev,
			Action: string(domain.ActionTypeText), Arguments: json.RawMessage(`{"text":"` + text + `"}`), IdempotencyKey: "typed-later",
			LeaseID: lease.LeaseID})
		typed <- err
	}()
	var got struct {
		Met          bool   `json:"met"`
		FrameID      string `json:"frameId"`
		Observations int    `json:"observations"`
		Element      *struct {
			Ref  string `json:"ref"`
			Text string `json:"text"`
		} `json:"element"`
	}
	c.call(t, "wait_for", map[string]any{"deviceId": dev, "text": text, "timeoutMs": 30000}, &got)
	if err := <-typed; err != nil {
		t.Fatalf("the delayed action failed: %v", err)
	}
	if !got.Met || got.Element == nil || got.Element.Text != text || got.Element.Ref == "" {
		t.Fatalf("got %+v; want met with the element holding %q", got, text)
	}
	if got.FrameID == before.FrameID {
		t.Errorf("got frame %s, the one observed before the wait; want the newer frame the text appeared on", got.FrameID)
	}
	var frame screenJSON
	c.call(t, "get_frame", map[string]any{"frameId": got.FrameID, "screenshot": false}, &frame)
	if !slices.ContainsFunc(frame.Elements, func(e struct {
		Ref      string `json:"ref"`
		Text     string `json:"text"`
		Hint     string `json:"hint"`
		Editable bool   `json:"editable"`
	}) bool {
		return e.Ref == got.Element.Ref && e.Text == text
	}) {
		t.Errorf("got frame %s with elements %+v; want it to show element %s holding %q", got.FrameID, frame.Elements, got.Element.Ref, text)
	}

	// Waiting for it to disappear times out: met false is an answer.
	var gone struct {
		Met bool `json:"met"`
	}
	c.call(t, "wait_for", map[string]any{"deviceId": dev, "until": "disappears", "text": text, "timeoutMs": 300}, &gone)
	if gone.Met {
		t.Error("got met for disappears while the text is on screen; want met false after the timeout")
	}
	env := mustFail(t, a, "wait_for", map[string]any{"deviceId": dev, "until": "stable", "text": text})
	if env["code"] != "invalid_argument" {
		t.Errorf("got %v; want invalid_argument for until stable with a text", env)
	}
}
