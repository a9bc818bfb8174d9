package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
)

// An action tool is one input on a leased device. Every one runs
// commands.PerformAction — the handler behind POST
// /v1/devices/{deviceId}/actions — so it records a receipt, honours the
// idempotency key, needs the lease in force and refuses a stale
// observedFrame exactly as REST does.

// actionArgs are the arguments every action tool shares, plus each
// action's own.
type actionArgs struct {
	DeviceID       string `json:"deviceId"`
	LeaseID        string `json:"leaseId"`
	ObservedFrame  string `json:"observedFrame"`
	IdempotencyKey string `json:"idempotencyKey"`
	// RetryIfUnchanged: see fleet.PerformAction.
	RetryIfUnchanged bool `json:"retryIfUnchanged"`
	gesture
}

// gesture is an action's own arguments, as a tool call and a batch step
// both carry them; absent ones stay nil.
type gesture struct {
	X          *int    `json:"x"`
	Y          *int    `json:"y"`
	X1         *int    `json:"x1"`
	Y1         *int    `json:"y1"`
	X2         *int    `json:"x2"`
	Y2         *int    `json:"y2"`
	DurationMs *int    `json:"durationMs"`
	Text       *string `json:"text"`
	Key        *string `json:"key"`
	Package    *string `json:"package"`
	Ref        *string `json:"ref"`
}

// arguments is the action's arguments object as POST …/actions takes it:
// only the fields that were sent.
func (a gesture) arguments() map[string]any {
	m := map[string]any{}
	for name, v := range map[string]*int{"x": a.X, "y": a.Y, "x1": a.X1, "y1": a.Y1, "x2": a.X2, "y2": a.Y2, "durationMs": a.DurationMs} {
		if v != nil {
			m[name] = *v
		}
	}
	for name, v := range map[string]*string{"text": a.Text, "key": a.Key, "package": a.Package, "ref": a.Ref} {
		if v != nil {
			m[name] = *v
		}
	}
	return m
}

// actionResult is what an action tool answers: the key (the caller's or
// the generated one), whether the answer is the recorded outcome of an
// earlier call with that key, and the receipt.
type actionResult struct {
	IdempotencyKey string         `json:"idempotencyKey"`
	Replayed       bool           `json:"replayed"`
	Receipt        domain.Receipt `json:"receipt"`
}

// newIdempotencyKey generates a key for an agent that sent none.
func newIdempotencyKey() string { return domain.NewID("mcp") }

// perform runs one action through the REST path's command handler. A
// failure carries the key and device in its envelope, so the agent can
// retry the very action (or, after action_outcome_unknown, choose a new key).
func perform(ctx context.Context, app *commands.Application, a domain.Auth, typ domain.ActionType, args actionArgs) (fleet.ActOutcome, error) {
	raw, err := json.Marshal(args.arguments())
	if err != nil {
		return fleet.ActOutcome{}, err
	}
	out, err := app.Fleet.PerformAction.Handle(ctx, fleet.PerformAction{Auth: a, DeviceID: args.DeviceID, Action: string(typ),
		Arguments: raw, IdempotencyKey: args.IdempotencyKey, RetryIfUnchanged: args.RetryIfUnchanged, LeaseID: args.LeaseID,
		ObservedFrame: args.ObservedFrame})
	return out, annotate(err, "idempotencyKey", args.IdempotencyKey, "deviceId", args.DeviceID)
}

// actionTool defines the tool name for action typ: its own properties
// beside the shared ones, and its required ones beside deviceId.
func (s *Server) actionTool(name, title, description string, typ domain.ActionType, h hints, required []string, own ...prop) *tool {
	props := append([]prop{{"deviceId", sDeviceID}, {"leaseId", sLeaseID}}, own...)
	props = append(props, prop{"observedFrame", sObservedFrame}, prop{"idempotencyKey", sIdempotencyKey},
		prop{"retryIfUnchanged", `{"type":"boolean","description":"With the key of an earlier call: act again if that call's effect was unchanged."}`})
	t := newTool(name, title, description, object(append([]string{"deviceId"}, required...), props...), h, domain.ScopeDevicesAct)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args actionArgs) (*mcpgo.CallToolResult, error) {
		if args.IdempotencyKey == "" {
			args.IdempotencyKey = newIdempotencyKey()
		}
		out, err := perform(ctx, app, a, typ, args)
		if err != nil {
			return nil, err
		}
		return jsonResult(actionResult{IdempotencyKey: args.IdempotencyKey, Replayed: out.Replayed, Receipt: out.Receipt})
	})
	return t
}

// actionTools are the tools of the eight action types of POST …/actions.
func (s *Server) actionTools() []*tool {
	gesture := hints{destructive: true, openWorld: true}
	return []*tool{
		s.actionTool("tap", "Tap", "Tap at (x, y). Prefer tap_element for a UI element.",
			domain.ActionTap, gesture, []string{"x", "y"}, prop{"x", coord("Horizontal position")}, prop{"y", coord("Vertical position")}),
		s.actionTool("double_tap", "Double tap", "Tap twice quickly at (x, y) in device pixels.",
			domain.ActionDoubleTap, gesture, []string{"x", "y"}, prop{"x", coord("Horizontal position")}, prop{"y", coord("Vertical position")}),
		s.actionTool("long_press", "Long press", "Press and hold at (x, y) for durationMs milliseconds.",
			domain.ActionLongPress, gesture, []string{"x", "y"}, prop{"x", coord("Horizontal position")}, prop{"y", coord("Vertical position")},
			prop{"durationMs", sDuration}),
		s.actionTool("swipe", "Swipe", "Swipe from (x1, y1) to (x2, y2); scroll down by swiping up.",
			domain.ActionSwipe, gesture, []string{"x1", "y1", "x2", "y2"}, prop{"x1", coord("Start, horizontal")}, prop{"y1", coord("Start, vertical")},
			prop{"x2", coord("End, horizontal")}, prop{"y2", coord("End, vertical")}, prop{"durationMs", sDuration}),
		s.actionTool("type_text", "Type text", "Type text into the focused field; ENTER or DEL: press_key.",
			domain.ActionTypeText, gesture, []string{"text"},
			prop{"text", fmt.Sprintf(`{"type":"string","minLength":1,"maxLength":%d,"description":"The text to type."}`, domain.MaxTextRunes)}),
		s.actionTool("press_key", "Press a key", "Press a key: HOME, BACK, ENTER, DEL, APP_SWITCH, POWER, KEYCODE_….",
			domain.ActionKey, gesture, []string{"key"},
			prop{"key", `{"type":"string","maxLength":64,"pattern":"^[A-Za-z0-9_]+$","description":"The key name, e.g. BACK."}`}),
		s.actionTool("open_app", "Open an app", "Bring an installed app to the front by its package name.",
			domain.ActionOpenApp, hints{openWorld: true}, []string{"package"}, prop{"package", sPackage}),
		s.actionTool("install_catalog_app", "Install an app", "Install an app from the device's catalog by its package name.",
			domain.ActionInstallApp, hints{openWorld: true}, []string{"package"}, prop{"package", sPackage}),
	}
}

const sPackage = `{"type":"string","maxLength":255,"pattern":"^[A-Za-z0-9_.]+$","description":"The app's package name, e.g. com.example.notes."}`

func (s *Server) tapElementTool() *tool {
	return s.actionTool("tap_element", "Tap a UI element",
		"Tap a UI element by its ref from observe; refused if it moved or is gone.",
		domain.ActionTap, hints{destructive: true, openWorld: true}, []string{"ref"},
		prop{"ref", fmt.Sprintf(`{"type":"string","maxLength":%d,"pattern":"^[!-~]+$","description":"The element's ref, as observe lists it."}`, domain.MaxElementRef)})
}

// batchStep is one action of batch_actions.
type batchStep struct {
	Action         string `json:"action"`
	IdempotencyKey string `json:"idempotencyKey"`
	gesture
}

// batchActionTypes maps a step's action (the tool names) to the action type.
var batchActionTypes = map[string]domain.ActionType{
	"tap": domain.ActionTap, "tap_element": domain.ActionTap, "double_tap": domain.ActionDoubleTap, "long_press": domain.ActionLongPress,
	"swipe": domain.ActionSwipe, "type_text": domain.ActionTypeText, "press_key": domain.ActionKey, "open_app": domain.ActionOpenApp,
	"install_catalog_app": domain.ActionInstallApp,
}

type batchArgs struct {
	DeviceID       string      `json:"deviceId"`
	LeaseID        string      `json:"leaseId"`
	ObservedFrame  string      `json:"observedFrame"`
	IdempotencyKey string      `json:"idempotencyKey"`
	Actions        []batchStep `json:"actions"`
}

// stepReport is one step of a batch as answered.
type stepReport struct {
	Index          int                  `json:"index"`
	Action         string               `json:"action"`
	IdempotencyKey string               `json:"idempotencyKey"`
	State          string               `json:"state"`
	Replayed       bool                 `json:"replayed,omitempty"`
	Result         *domain.ActionResult `json:"result,omitempty"`
	FrameAfter     string               `json:"frameAfter,omitempty"`
	Error          map[string]any       `json:"error,omitempty"`
}

// maxBatch bounds the steps of one batch.
const maxBatch = 20

const sBatchStep = `{"type":"object","additionalProperties":false,"required":["action"],"properties":{` +
	`"action":{"type":"string","enum":["tap","tap_element","double_tap","long_press","swipe","type_text","press_key","open_app","install_catalog_app"],` +
	`"description":"The action, named as its own tool; its arguments as that tool takes them."},` +
	`"idempotencyKey":{"type":"string","maxLength":255,"pattern":"^[ -~]+$","description":"This step's key; default <batch key>.<index>."},` +
	`"x":{"type":"integer","minimum":0,"maximum":100000},"y":{"type":"integer","minimum":0,"maximum":100000},` +
	`"x1":{"type":"integer","minimum":0,"maximum":100000},"y1":{"type":"integer","minimum":0,"maximum":100000},` +
	`"x2":{"type":"integer","minimum":0,"maximum":100000},"y2":{"type":"integer","minimum":0,"maximum":100000},` +
	`"durationMs":{"type":"integer","minimum":0,"maximum":10000},"text":{"type":"string","minLength":1,"maxLength":1000},` +
	`"key":{"type":"string","minLength":1,"maxLength":64},"package":{"type":"string","minLength":1,"maxLength":255},` +
	`"ref":{"type":"string","minLength":1,"maxLength":64}}}`

func (s *Server) batchActionsTool() *tool {
	t := newTool("batch_actions", "Run several actions",
		"Up to 20 steps {action: a tool's name, its arguments}, stopping at the first failure.",
		object([]string{"deviceId", "actions"}, prop{"deviceId", sDeviceID}, prop{"leaseId", sLeaseID},
			prop{"observedFrame", sObservedFrame},
			prop{"idempotencyKey", `{"type":"string","maxLength":250,"pattern":"^[ -~]+$","description":"Names the batch; generated and returned when omitted."}`},
			prop{"actions", fmt.Sprintf(`{"type":"array","minItems":1,"maxItems":%d,"items":%s}`, maxBatch, sBatchStep)}),
		hints{destructive: true, openWorld: true}, domain.ScopeDevicesAct)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args batchArgs) (*mcpgo.CallToolResult, error) {
		if args.IdempotencyKey == "" {
			args.IdempotencyKey = newIdempotencyKey()
		}
		steps := make([]stepReport, len(args.Actions))
		for i, st := range args.Actions {
			steps[i] = stepReport{Index: i, Action: st.Action, IdempotencyKey: st.IdempotencyKey, State: "not_run"}
			if steps[i].IdempotencyKey == "" {
				steps[i].IdempotencyKey = fmt.Sprintf("%s.%d", args.IdempotencyKey, i)
			}
		}
		for i, st := range args.Actions {
			one := actionArgs{DeviceID: args.DeviceID, LeaseID: args.LeaseID, IdempotencyKey: steps[i].IdempotencyKey,
				gesture: st.gesture}
			if i == 0 {
				one.ObservedFrame = args.ObservedFrame
			}
			out, err := perform(ctx, app, a, batchActionTypes[st.Action], one)
			if err != nil {
				env, _ := envelope(t.def.Name, err)
				delete(env, "name")
				steps[i].State, steps[i].Error = "failed", env
				return nil, override(err, "idempotencyKey", args.IdempotencyKey, "failedStep", i, "steps", steps)
			}
			steps[i].State, steps[i].Replayed = out.Receipt.State, out.Replayed
			steps[i].Result, steps[i].FrameAfter = out.Receipt.Result, out.Receipt.Frames.After
		}
		return jsonResult(map[string]any{"deviceId": args.DeviceID, "idempotencyKey": args.IdempotencyKey, "completed": len(steps), "steps": steps})
	})
	return t
}
