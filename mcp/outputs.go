package mcp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Every tool declares an outputSchema (JSON Schema draft 2020-12) and
// answers structuredContent that it describes, beside the text block
// holding the same JSON. Failures carry no structuredContent (spec 2.3):
// the schema describes success only.
//
// Where a tool answers a shape the REST contract also answers (a device, a
// lease, a receipt, a run, a webhook …), its schema IS the contract's: the
// OpenAPI components of http/openapi/*.yaml, copied into
// openapi_components.json (the closure of the components named here, refs
// rewritten to #/$defs/…). TestOpenAPIComponentsAreCurrent fails when the
// copy differs from the YAML, so the two surfaces cannot drift apart
// silently; regenerate it with
//
//	go generate ./mcp
//
// Shapes only this surface answers (an observation, an action's outcome, a
// batch) are written here; TestMCPShapesMatchTheirGoTypes checks that their
// properties are the Go types' JSON fields.

//go:generate go test -count=1 -run TestOpenAPIComponentsAreCurrent . -args -update

//go:embed openapi_components.json
var openapiComponents []byte

// ref is the schema of a result that is the contract's component name.
func ref(name string) string { return `{"type":"object","$ref":"#/$defs/` + name + `"}` }

// Schemas of the results only this surface answers.
const (
	oString   = `{"type":"string"}`
	oInt      = `{"type":"integer"}`
	oBool     = `{"type":"boolean"}`
	oDateTime = `{"type":"string","format":"date-time"}`

	// oElement is one compacted UI element (type element).
	oElement = `{"type":"object","additionalProperties":false,"required":["ref","bounds"],"properties":{` +
		`"ref":{"type":"string","description":"Pass it as tap_element's ref."},` +
		`"class":` + oString + `,"id":{"type":"string","description":"The resource id, without its package."},` +
		`"text":` + oString + `,"hint":` + oString + `,"desc":` + oString + `,` +
		`"label":{"type":"string","description":"For an element with no text of its own: what its content says."},` +
		`"bounds":{"type":"array","items":{"type":"integer"},"minItems":4,"maxItems":4,"description":"[left, top, right, bottom] in device pixels."},` +
		`"clickable":` + oBool + `,"longClickable":` + oBool + `,"editable":` + oBool + `,"focusable":` + oBool + `,` +
		`"focused":` + oBool + `,"checkable":` + oBool + `,"checked":` + oBool + `,"scrollable":` + oBool + `,"disabled":` + oBool + `,` +
		`"mark":{"type":"integer","minimum":1,"description":"The number of this element's box on a set-of-marks screenshot."}}}`

	// oScreen is what observe and get_frame answer beside the image (type
	// screen).
	oScreen = `{"type":"object","additionalProperties":false,` +
		`"required":["deviceId","frameId","screenHash","capturedAt","width","height"],"properties":{` +
		`"deviceId":` + oString + `,"frameId":{"type":"string","description":"Pass it as an action's observedFrame."},` +
		`"screenHash":` + oString + `,"capturedAt":` + oDateTime + `,` +
		`"width":{"type":"integer","description":"Screen width in device pixels: the coordinate space of actions and bounds."},` +
		`"height":` + oInt + `,"screenOn":` + oBool + `,` +
		`"image":{"type":"object","additionalProperties":false,"required":["width","height","scale"],"properties":{` +
		`"width":` + oInt + `,"height":` + oInt + `,"scale":{"type":"number","description":"Device pixels per image pixel."}}},` +
		`"app":{"type":"string","description":"The package of the window in front."},` +
		`"elements":{"type":"array","items":` + oElement + `},"elementsOmitted":` + oInt + `,` +
		`"marks":{"type":"array","description":"The boxes of a set-of-marks screenshot, in number order.","items":{"type":"object","additionalProperties":false,` +
		`"required":["mark","ref","bounds"],"properties":{"mark":{"type":"integer","minimum":1},"ref":` + oString + `,` +
		`"bounds":{"type":"array","items":{"type":"integer"},"minItems":4,"maxItems":4}}}}}}`

	// oAction is what an action tool answers (type actionResult).
	oAction = `{"type":"object","additionalProperties":false,"required":["idempotencyKey","replayed","receipt"],"properties":{` +
		`"idempotencyKey":` + oString + `,"replayed":{"type":"boolean","description":"True when this is the recorded outcome of an earlier call with the key."},` +
		`"receipt":{"$ref":"#/$defs/Receipt"}}}`

	// oBatch is what batch_actions answers (its steps are type stepReport).
	oBatch = `{"type":"object","additionalProperties":false,"required":["deviceId","idempotencyKey","completed","steps"],"properties":{` +
		`"deviceId":` + oString + `,"idempotencyKey":` + oString + `,"completed":` + oInt + `,` +
		`"steps":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["index","action","idempotencyKey","state"],"properties":{` +
		`"index":` + oInt + `,"action":` + oString + `,"idempotencyKey":` + oString + `,` +
		`"state":{"type":"string","enum":["pending","committed","failed","not_run"]},"replayed":` + oBool + `,` +
		`"result":{"$ref":"#/$defs/ActionResult"},"frameAfter":` + oString + `,` +
		`"error":{"type":"object","description":"The step's error envelope, without name."}}}}}}`

	// oReleased is what release_lease answers.
	oReleased = `{"type":"object","additionalProperties":false,"required":["deviceId","leaseId","released"],"properties":{` +
		`"deviceId":` + oString + `,"leaseId":` + oString + `,"released":{"const":true}}}`

	// oWebhookDeleted is what delete_webhook answers.
	oWebhookDeleted = `{"type":"object","additionalProperties":false,"required":["webhookId","deleted"],"properties":{` +
		`"webhookId":` + oString + `,"deleted":{"const":true}}}`
)

// outputSchemas names every tool's output schema; a tool missing here
// fails New.
var outputSchemas = map[string]string{
	"list_devices":  ref("DevicePage"),
	"get_device":    ref("Device"),
	"rename_device": ref("Device"),
	"wake_device":   ref("Device"),
	"stop_device":   ref("Device"),
	"get_driving":   ref("Driving"),
	"acquire_lease": ref("Lease"),
	"renew_lease":   ref("Lease"),
	"release_lease": oReleased,
	"list_leases":   ref("LeasePage"),
	"observe":       oScreen,
	"get_frame":     oScreen,
	"wait_for":      ref("WaitResult"),

	"get_receipt":    ref("Receipt"),
	"list_receipts":  ref("ReceiptPage"),
	"review_receipt": ref("Receipt"),

	"tap": oAction, "double_tap": oAction, "long_press": oAction, "swipe": oAction, "type_text": oAction,
	"press_key": oAction, "open_app": oAction, "install_catalog_app": oAction, "tap_element": oAction,
	"batch_actions": oBatch,

	"list_webhooks":           ref("WebhookList"),
	"create_webhook":          ref("WebhookWithSecret"),
	"update_webhook":          ref("Webhook"),
	"rotate_webhook_secret":   ref("WebhookWithSecret"),
	"test_webhook":            ref("WebhookTestQueued"),
	"delete_webhook":          oWebhookDeleted,
	"list_webhook_deliveries": ref("WebhookDeliveryPage"),

	"start_run":          ref("StartedRun"),
	"list_runs":          ref("RunPage"),
	"get_run":            ref("Run"),
	"pause_run":          ref("Run"),
	"resume_run":         ref("Run"),
	"cancel_run":         ref("Run"),
	"get_run_frames":     ref("RunFramePage"),
	"get_run_divergence": ref("RunDivergence"),

	"get_app_catalog":         ref("AppCatalog"),
	"create_app_installation": ref("AppRequest"),
	"get_app_installation":    ref("AppRequest"),
	"get_app_inventory":       ref("AppInventory"),
}

// components are the contract's schemas, by name (openapi_components.json).
type components map[string]json.RawMessage

// loadComponents reads the embedded copy of the contract's schemas.
func loadComponents() (components, error) {
	var c components
	if err := json.Unmarshal(openapiComponents, &c); err != nil {
		return nil, fmt.Errorf("mcp: openapi_components.json: %w", err)
	}
	return c, nil
}

// defRefs returns the component names schema refers to (#/$defs/Name).
func defRefs(schema []byte) []string {
	var names []string
	const prefix = `"#/$defs/`
	for rest := schema; ; {
		i := bytes.Index(rest, []byte(prefix))
		if i < 0 {
			break
		}
		rest = rest[i+len(prefix):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			break
		}
		names = append(names, string(rest[:j]))
	}
	return names
}

// closure returns the names of the components roots refer to, directly or
// through other components, sorted; missing lists names the components
// lack.
func (c components) closure(roots ...string) (names, missing []string) {
	seen := map[string]bool{}
	var visit func(schema []byte)
	visit = func(schema []byte) {
		for _, n := range defRefs(schema) {
			if seen[n] {
				continue
			}
			seen[n] = true
			def, ok := c[n]
			if !ok {
				missing = append(missing, n)
				continue
			}
			names = append(names, n)
			visit(def)
		}
	}
	for _, r := range roots {
		visit([]byte(r))
	}
	sort.Strings(names)
	sort.Strings(missing)
	return names, missing
}

// outputSchema builds the output schema of tool name: its root with the
// components it needs as $defs.
func (c components) outputSchema(name string) (json.RawMessage, error) {
	root, ok := outputSchemas[name]
	if !ok {
		return nil, fmt.Errorf("mcp: tool %s declares no output schema (mcp/outputs.go)", name)
	}
	names, missing := c.closure(root)
	if len(missing) > 0 {
		return nil, fmt.Errorf("mcp: tool %s: output schema names %s, which openapi_components.json lacks: run go generate ./mcp",
			name, strings.Join(missing, ", "))
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(root), &doc); err != nil {
		return nil, fmt.Errorf("mcp: tool %s: output schema: %w", name, err)
	}
	if target, ok := doc["$ref"]; ok && len(doc) == 2 {
		// A result that is one component is that component at the top
		// (type, properties, required), not a bare $ref: clients that read
		// only the top-level properties (mcp-go's Tool.OutputSchema) see
		// the fields too.
		var to string
		_ = json.Unmarshal(target, &to)
		comp := c[strings.TrimPrefix(to, "#/$defs/")]
		doc = nil
		if err := json.Unmarshal(comp, &doc); err != nil {
			return nil, fmt.Errorf("mcp: tool %s: output schema: %w", name, err)
		}
		doc["type"] = json.RawMessage(`"object"`)
		names, _ = c.closure(string(comp))
	}
	if len(names) > 0 {
		defs := make(map[string]json.RawMessage, len(names))
		for _, n := range names {
			defs[n] = c[n]
		}
		b, err := json.Marshal(defs)
		if err != nil {
			return nil, err
		}
		doc["$defs"] = b
	}
	return json.Marshal(doc)
}
