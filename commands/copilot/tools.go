package copilot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/chat"
)

// ToolObserve is the tool that looks at the screen; every other tool is a
// device action named by its action type.
const ToolObserve = "observe"

// ToolWaitFor waits for the screen through the fleet's WaitFor (as POST
// /v1/devices/{deviceId}/wait and MCP's wait_for do); ToolStartRun hands
// the device to an autonomous run through the application's StartRun, as
// the person (POST /v1/runs).
const (
	ToolWaitFor  = "wait_for"
	ToolStartRun = "start_run"
)

// ToolListDevices lists the person's devices and their state: a fleet
// thread's first tool (it names the device each other call acts on).
const ToolListDevices = "list_devices"

// maxListedDevices bounds the devices list_devices gives the model.
const maxListedDevices = 200

// maxObservedElements bounds the element list an observation gives the
// model (its budget).
const maxObservedElements = 80

// actionTools are the device actions offered, with their descriptions
// and argument schemas (the arguments domain.ParseAction reads).
var actionTools = []struct {
	action domain.ActionType
	desc   string
	params string
}{
	{domain.ActionTap, "Tap an element by its ref from the latest observation, or a point (x, y in screen pixels).",
		`{"type":"object","properties":{"ref":{"type":"string"},"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0}},"additionalProperties":false}`},
	{domain.ActionDoubleTap, "Double-tap a point.",
		`{"type":"object","properties":{"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0}},"required":["x","y"],"additionalProperties":false}`},
	{domain.ActionLongPress, "Press and hold a point.",
		`{"type":"object","properties":{"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0},"durationMs":{"type":"integer","minimum":0,"maximum":10000}},"required":["x","y"],"additionalProperties":false}`},
	{domain.ActionSwipe, "Swipe from (x1, y1) to (x2, y2); swipe up to scroll down.",
		`{"type":"object","properties":{"x1":{"type":"integer","minimum":0},"y1":{"type":"integer","minimum":0},"x2":{"type":"integer","minimum":0},"y2":{"type":"integer","minimum":0},"durationMs":{"type":"integer","minimum":0,"maximum":10000}},"required":["x1","y1","x2","y2"],"additionalProperties":false}`},
	{domain.ActionTypeText, "Type text into the focused field (tap the field first). Typing into a password field may wait for the person's approval.",
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`},
	{domain.ActionKey, "Press a key: BACK, HOME, ENTER, DEL, APP_SWITCH, VOLUME_UP, VOLUME_DOWN, POWER.",
		`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}`},
	{domain.ActionOpenApp, "Open an installed app by its Android package name.",
		`{"type":"object","properties":{"package":{"type":"string"}},"required":["package"],"additionalProperties":false}`},
	{domain.ActionInstallApp, "Install an app by its Android package name; it may wait for the person's approval.",
		`{"type":"object","properties":{"package":{"type":"string"}},"required":["package"],"additionalProperties":false}`},
}

// toolsFor are the tools the person's credential allows: observing needs
// devices:read, acting devices:act and devices:lease (a turn takes the
// lease when the person holds none). A fleet thread's tools also list the
// devices, and each device tool takes the deviceId it acts on.
func toolsFor(a domain.Auth, fleet bool) []chat.Tool {
	out := deviceTools(a)
	if !fleet {
		return out
	}
	for i := range out {
		out[i].Parameters = withDeviceID(out[i].Parameters)
		out[i].Description = "On the phone named by deviceId (from list_devices): " + out[i].Description
	}
	if a.Has(domain.ScopeDevicesRead) {
		out = append([]chat.Tool{{Name: ToolListDevices,
			Description: "List the person's phones: deviceId, name, model, status (online or asleep), whether leased and by whom (you: the person). Every other tool names the phone it acts on by deviceId.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)}}, out...)
	}
	return out
}

// withDeviceID adds a required deviceId to a tool's argument schema.
func withDeviceID(params json.RawMessage) json.RawMessage {
	var schema map[string]any
	if json.Unmarshal(params, &schema) != nil {
		return params
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props["deviceId"] = map[string]any{"type": "string", "description": "The phone this call is for (a deviceId from list_devices)."}
	schema["properties"] = props
	req, _ := schema["required"].([]any)
	schema["required"] = append([]any{"deviceId"}, req...)
	out, _ := json.Marshal(schema)
	return out
}

// deviceTools are the tools about one device.
func deviceTools(a domain.Auth) []chat.Tool {
	var out []chat.Tool
	if a.Has(domain.ScopeDevicesRead) {
		out = append(out, chat.Tool{Name: ToolObserve,
			Description: "Look at the screen now: its size, a frame id, and the elements (ref, class, text, id, bounds). Observe before acting, and again when the screen may have changed.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"elements":{"type":"string","enum":["interactive","all"]}},"additionalProperties":false}`)})
	}
	if a.Has(domain.ScopeDevicesRead) {
		out = append(out, chat.Tool{Name: ToolWaitFor,
			Description: "Wait until an element (text, resourceId) appears or disappears, or the screen is stable; answers whether it happened and the frame it saw.",
			Parameters: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"until":{"type":"string","enum":["appears","disappears","stable"]},`+
				`"text":{"type":"string","minLength":1,"maxLength":200},"resourceId":{"type":"string","minLength":1,"maxLength":200},`+
				`"stableMs":{"type":"integer","minimum":%d,"maximum":%d},"timeoutMs":{"type":"integer","minimum":1,"maximum":%d}},"additionalProperties":false}`,
				fleet.MinStableMs, fleet.MaxStableMs, fleet.MaxWaitTimeoutMs))})
	}
	if a.Has(domain.ScopeDevicesAct) && a.Has(domain.ScopeDevicesLease) {
		for _, t := range actionTools {
			out = append(out, chat.Tool{Name: string(t.action), Description: t.desc, Parameters: json.RawMessage(t.params)})
		}
	}
	if a.Has(domain.ScopeRunsStart) {
		out = append(out, chat.Tool{Name: ToolStartRun,
			Description: "Hand the phone to an autonomous run that pursues a goal on its own, as the person (the phone's lease taken for this chat is given back first). Answers the run's id and state.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"goal":{"type":"string","minLength":1,"maxLength":2000},"maxSteps":{"type":"integer","minimum":1,"maximum":200}},"required":["goal"],"additionalProperties":false}`)})
	}
	return out
}

// call is a tool call of the model, checked.
type call struct {
	id   string
	tool string
	// args are the model's arguments as it wrote them (with deviceId on
	// a fleet thread).
	args json.RawMessage
	// device is the device the call is for: the thread's, or the one a
	// fleet thread's call names ("" for list_devices).
	device string
	action domain.Action
	// elements is observe's argument.
	elements string
	// wait is wait_for's condition.
	wait fleet.WaitCondition
	// run is start_run's arguments.
	run runArgs
}

type runArgs struct {
	Goal     string `json:"goal"`
	MaxSteps int    `json:"maxSteps"`
}

// errMalformed describes a tool call the copilot will not carry out.
type errMalformed struct{ msg string }

func (e errMalformed) Error() string { return e.msg }

// checkCall checks one tool call against the tools offered: a known tool,
// arguments that are a JSON object its action accepts. On a fleet thread
// (device "") each tool but list_devices names its device in deviceId,
// which is taken out before the tool's own arguments are read.
func checkCall(tc chat.ToolCall, offered []chat.Tool, device string) (call, error) {
	name := tc.Function.Name
	known := false
	for _, t := range offered {
		known = known || t.Name == name
	}
	if !known {
		return call{}, errMalformed{fmt.Sprintf("the model called %q, which is not one of its tools", clip(name, 64))}
	}
	args := strings.TrimSpace(tc.Function.Arguments)
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil {
		return call{}, errMalformed{fmt.Sprintf("the model's arguments to %s are not a JSON object: %s", name, clip(args, 200))}
	}
	c := call{id: tc.ID, tool: name, args: json.RawMessage(args), device: device}
	if name == ToolListDevices {
		return c, nil
	}
	own := c.args // the tool's own arguments
	if device == "" {
		var id string
		if err := json.Unmarshal(obj["deviceId"], &id); err != nil || strings.TrimSpace(id) == "" {
			return call{}, errMalformed{fmt.Sprintf("the model's call of %s names no deviceId (a string from list_devices): %s", name, clip(args, 200))}
		}
		delete(obj, "deviceId")
		c.device = id
		own, _ = json.Marshal(obj)
	}
	if name == ToolObserve {
		var o struct {
			Elements string `json:"elements"`
		}
		_ = json.Unmarshal(own, &o)
		switch o.Elements {
		case "", domain.ElementsInteractive:
			c.elements = domain.ElementsInteractive
		case domain.ElementsAll:
			c.elements = domain.ElementsAll
		default:
			return call{}, errMalformed{fmt.Sprintf("observe: elements must be interactive or all, not %q", clip(o.Elements, 40))}
		}
		return c, nil
	}
	switch name {
	case ToolWaitFor:
		dec := json.NewDecoder(bytes.NewReader(own))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.wait); err != nil {
			return call{}, errMalformed{fmt.Sprintf("the model's arguments to wait_for are not valid: %v", err)}
		}
		return c, nil
	case ToolStartRun:
		dec := json.NewDecoder(bytes.NewReader(own))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.run); err != nil || strings.TrimSpace(c.run.Goal) == "" {
			return call{}, errMalformed{fmt.Sprintf("the model's call of start_run needs a goal: %s", clip(args, 200))}
		}
		return c, nil
	}
	action, err := domain.ParseAction(name, own)
	if err != nil {
		return call{}, errMalformed{fmt.Sprintf("the model's call of %s is not a valid action: %v", name, err)}
	}
	c.action = action
	return c, nil
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
