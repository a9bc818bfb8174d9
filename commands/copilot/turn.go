package copilot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/chat"
)

const systemPrompt = `You are the copilot of a person who drives an Android phone through you. You act on the phone with tools: observe looks at the screen (elements with refs and bounds), the others act on it. Observe before acting and after the screen changes; prefer tapping an element by its ref. Each action is carried out at once as the person. Say briefly what you did. When the request is done or cannot be done, answer without a tool call.`

// fleetPrompt is a fleet thread's: no one phone, so the model lists them
// and names the one each call is for.
const fleetPrompt = `You are the copilot of a person who drives their fleet of Android phones through you. list_devices lists the phones (deviceId, name, status, lease); every other tool takes the deviceId of the phone it is for: observe looks at that phone's screen (elements with refs and bounds), the others act on it. Observe a phone before acting on it and after its screen changes; prefer tapping an element by its ref. Each action is carried out at once as the person. Say briefly what you did, and on which phone. When the request is done or cannot be done, answer without a tool call.`

// turn runs one turn of a thread: it asks the model, streams its text into
// the thread, carries out its tool calls, and records the turn's end. Every
// event it records is appended at the thread's version it last saw, and a
// device action is requested in the same unit as its copilot.tool_called
// event: once the turn was stopped (its end recorded by someone else),
// nothing more of it is recorded, so no action is sent.
type turn struct {
	c        *Copilot
	dev      Devices
	auth     domain.Auth
	threadID string
	deviceID string
	turnID   string
	message  string
	// version is the thread stream's version this turn last saw.
	version int64
	step    int
	calls   int
	// frames are the latest frame the model decided on, by device: an
	// observation's, or the frame after its last action there.
	frames map[string]string
	// leases are the leases actions go under, by device.
	leases map[string]*turnLease
	// everyAction is the thread's choice that every action waits for the
	// person's yes; awaiting is set once the turn asked for one.
	everyAction bool
	awaiting    bool
	// afterPayment is set once the turn saw a payment screen: under the
	// deployment's payment policy every later action waits for a yes.
	afterPayment bool
	// owed is the latest answer's tokens, not recorded yet.
	owed *domain.CopilotTokensUsed
}

// turnLease is a lease a turn's actions on one device go under; acquired
// is true when the turn took it (and so gives it back at its end).
type turnLease struct {
	id       string
	token    int64
	acquired bool
}

// withOwed puts the owed tokens before evs.
func (r *turn) withOwed(evs ...domain.Event) []domain.Event {
	if r.owed == nil {
		return evs
	}
	return append([]domain.Event{*r.owed}, evs...)
}

// settleOwed records the owed tokens after the turn's end: the provider
// spent them even so, and they are the person's.
func (r *turn) settleOwed(ctx context.Context) {
	if r.owed != nil {
		r.settleAfterStop(ctx, *r.owed)
		r.owed = nil
	}
}

func (r *turn) run(ctx context.Context) {
	defer r.releaseLeases(ctx)
	msgs, err := r.history(ctx)
	if err != nil {
		r.end(ctx, domain.CopilotTurnFailed, "internal_error", err.Error())
		return
	}
	tools := toolsFor(r.auth, r.deviceID == "")
	for r.step = 1; r.step <= r.c.cfg.MaxSteps; r.step++ {
		// The message was let in under the allowance; each later answer
		// is asked for only while some of it is left.
		if r.step > 1 {
			var owing int64
			if r.owed != nil {
				owing = r.owed.InputTokens + r.owed.OutputTokens
			}
			spent, err := r.c.allowanceSpent(ctx, r.auth.OrgID, owing)
			if err != nil {
				r.failed(ctx, err)
				return
			}
			if spent {
				if err := r.append(ctx, domain.CopilotTextStreamed{ThreadID: r.threadID, TurnID: r.turnID, Step: r.step,
					Text: domain.CopilotAllowanceSpentMessage, At: r.c.now()}); err != nil {
					r.failed(ctx, err)
					return
				}
				r.end(ctx, domain.CopilotTurnCompleted, "allowance_exhausted",
					"the copilot allowance of this billing month ran out during the turn; nothing more was asked of the model")
				return
			}
		}
		comp, err := r.c.cfg.Model.Stream(ctx, msgs, tools, func(s string) error {
			return r.append(ctx, domain.CopilotTextStreamed{ThreadID: r.threadID, TurnID: r.turnID, Step: r.step, Text: s, At: r.c.now()})
		})
		if err != nil {
			r.failed(ctx, err)
			return
		}
		if comp.Usage != (chat.Usage{}) {
			// Recorded with what the turn records next (the action's
			// request, or the turn's end), one commit fewer per answer.
			r.owed = &domain.CopilotTokensUsed{ThreadID: r.threadID, TurnID: r.turnID, UserID: r.auth.UserID,
				Model: r.c.cfg.ModelName, InputTokens: comp.Usage.InputTokens, OutputTokens: comp.Usage.OutputTokens, At: r.c.now()}
		}
		if len(comp.ToolCalls) == 0 {
			r.end(ctx, domain.CopilotTurnCompleted, "", "")
			return
		}
		// Every call of the answer is checked before any is carried out:
		// a malformed one fails the turn and nothing acts.
		var checked []call
		for _, tc := range comp.ToolCalls {
			cl, err := checkCall(tc, tools, r.deviceID)
			if err != nil {
				r.end(ctx, domain.CopilotTurnFailed, "malformed_tool_call", err.Error()+"; nothing was done")
				return
			}
			checked = append(checked, cl)
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: comp.Text, ToolCalls: comp.ToolCalls})
		for _, cl := range checked {
			result, err := r.carryOut(ctx, cl)
			if err != nil {
				r.failed(ctx, err)
				return
			}
			msgs = append(msgs, chat.Message{Role: "tool", ToolCallID: cl.id, Content: result})
			if r.awaiting {
				// What the model asked for after it waits for the person too:
				// the turn ends here, and the approved action runs on their yes.
				r.end(ctx, domain.CopilotTurnAwaitingApproval, "awaiting_approval",
					fmt.Sprintf("waiting for the person to approve %s; nothing after it was done", cl.tool))
				return
			}
		}
	}
	r.end(ctx, domain.CopilotTurnFailed, "too_many_steps",
		fmt.Sprintf("the model asked for more than %d steps in one turn; ask again to go on", r.c.cfg.MaxSteps))
}

// failed ends the turn after err: quietly when the turn is over (stopped),
// as the provider's failure, or as interrupted.
func (r *turn) failed(ctx context.Context, err error) {
	switch {
	case errors.Is(err, errTurnOver):
		r.settleOwed(ctx)
	case errors.Is(err, chat.ErrProvider):
		r.end(ctx, domain.CopilotTurnFailed, "provider_error", err.Error()+"; nothing more was done")
	case ctx.Err() != nil:
		r.end(ctx, domain.CopilotTurnFailed, "interrupted", "the service stopped during the turn")
	default:
		r.end(ctx, domain.CopilotTurnFailed, "internal_error", err.Error())
	}
}

// end records the turn's end, unless it is over already.
func (r *turn) end(ctx context.Context, outcome, reason, detail string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_ = r.append(ctx, domain.CopilotTurnEnded{ThreadID: r.threadID, TurnID: r.turnID, Outcome: outcome, Reason: reason,
		Detail: clip(detail, 1000), At: r.c.now()})
}

// append records evs at the version the turn last saw. When the stream
// moved on, the thread is loaded again: if the turn is over, errTurnOver;
// else the events are appended at the new version.
func (r *turn) append(ctx context.Context, evs ...domain.Event) error {
	news, err := eventstore.Encode(domain.Events, r.auth.OrgID, r.withOwed(evs...)...)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		a, err := r.c.cfg.Store.Append(ctx, domain.CopilotThreadStream(r.threadID), r.version, news...)
		if err == nil {
			r.version, r.owed = a.Version, nil
			return nil
		}
		if !errors.Is(err, eventstore.ErrConflict) || attempt > 3 {
			return err
		}
		if err := r.reload(ctx); err != nil {
			if errors.Is(err, errTurnOver) {
				r.settleOwed(ctx)
			}
			return err
		}
	}
}

// reload catches up with the thread's stream: errTurnOver when the turn
// is no longer the one in flight.
func (r *turn) reload(ctx context.Context) error {
	t, v, err := r.c.threads.Load(ctx, r.threadID)
	if err != nil {
		return err
	}
	r.version = v
	if t.Turn != r.turnID {
		return errTurnOver
	}
	return nil
}

// history is the conversation so far as the model reads it: the system
// prompt, each earlier turn's message and answer (its text and what its
// tool calls came to), and this turn's message.
func (r *turn) history(ctx context.Context) ([]chat.Message, error) {
	evs, err := r.c.cfg.Store.Load(ctx, domain.CopilotThreadStream(r.threadID), 1)
	if err != nil {
		return nil, err
	}
	prompt := systemPrompt
	if r.deviceID == "" {
		prompt = fleetPrompt
	}
	msgs := []chat.Message{{Role: "system", Content: prompt}}
	var answer strings.Builder
	flush := func() {
		if answer.Len() > 0 {
			msgs = append(msgs, chat.Message{Role: "assistant", Content: answer.String()})
			answer.Reset()
		}
	}
	for _, e := range evs {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return nil, err
		}
		switch ev := ev.(type) {
		case domain.CopilotMessagePosted:
			flush()
			if ev.TurnID != r.turnID {
				msgs = append(msgs, chat.Message{Role: "user", Content: ev.Text})
			}
		case domain.CopilotTextStreamed:
			answer.WriteString(ev.Text)
		case domain.CopilotToolCalled:
			fmt.Fprintf(&answer, "\n[%s %s]", ev.Tool, clip(string(ev.Arguments), 200))
		case domain.CopilotToolCompleted:
			if ev.Error != nil {
				fmt.Fprintf(&answer, " → failed: %s", clip(ev.Error.Message, 200))
			} else {
				fmt.Fprintf(&answer, " → %s", ev.State)
			}
		case domain.CopilotApprovalRequested:
			fmt.Fprintf(&answer, " (approval %s asked for)", ev.ApprovalID)
		case domain.CopilotApprovalGranted:
			fmt.Fprintf(&answer, "\n(the person approved %s; it ran)", ev.ApprovalID)
		case domain.CopilotApprovalDenied:
			fmt.Fprintf(&answer, "\n(the person denied %s; it did not run)", ev.ApprovalID)
		case domain.CopilotApprovalExpired:
			fmt.Fprintf(&answer, "\n(approval %s expired; it did not run)", ev.ApprovalID)
		case domain.CopilotApprovalRefused:
			fmt.Fprintf(&answer, "\n(approval %s came too late: %s; it did not run)", ev.ApprovalID, ev.Detail)
		case domain.CopilotTurnEnded:
			if ev.Outcome != domain.CopilotTurnCompleted {
				fmt.Fprintf(&answer, "\n(turn %s: %s)", ev.Outcome, clip(ev.Detail, 200))
			}
		}
	}
	flush()
	// Only the last turns are shown, so a request stays bounded.
	if keep := 41; len(msgs) > keep {
		msgs = append(msgs[:1:1], msgs[len(msgs)-keep+1:]...)
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: r.message})
	return msgs, nil
}

// carryOut carries out one checked call and returns what the model is
// told it came to. Its error is the turn's end (errTurnOver when it was
// stopped); a refusal or failure of the call itself is the result.
func (r *turn) carryOut(ctx context.Context, cl call) (string, error) {
	r.calls++
	callID := fmt.Sprintf("%s-%d", r.turnID, r.calls)
	called := domain.CopilotToolCalled{ThreadID: r.threadID, TurnID: r.turnID, CallID: callID, Tool: cl.tool, Arguments: cl.args,
		DeviceID: cl.device, At: r.c.now()}
	if cl.tool == ToolListDevices {
		return r.listDevices(ctx, called)
	}
	if cl.tool == ToolObserve {
		if err := r.append(ctx, called); err != nil {
			return "", err
		}
		obs, err := r.dev.Observe.Handle(ctx, fleet.ObserveDevice{Auth: r.auth, DeviceID: cl.device, Elements: cl.elements,
			Snapshot: r.c.cfg.Policy.Payment})
		if err != nil {
			return r.completeFailed(ctx, callID, "", err)
		}
		r.frames[cl.device] = obs.Frame.FrameID
		r.screen(obs)
		if err := r.append(ctx, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: callID, State: "succeeded",
			FrameID: obs.Frame.FrameID, At: r.c.now()}); err != nil {
			return "", err
		}
		els := obs.Elements
		more := 0
		if len(els) > maxObservedElements {
			more, els = len(els)-maxObservedElements, els[:maxObservedElements]
		}
		out, _ := json.Marshal(map[string]any{"frameId": obs.Frame.FrameID, "width": obs.Width, "height": obs.Height,
			"screenOn": obs.ScreenOn, "elements": els, "elementsLeftOut": more})
		return string(out), nil
	}

	switch cl.tool {
	case ToolWaitFor:
		return r.waitFor(ctx, cl, called)
	case ToolStartRun:
		return r.startRun(ctx, cl, called)
	}

	// A turn stopped meanwhile takes no lease either. (Once it holds one,
	// the action's record at the turn's version is the guard.)
	if r.leases[cl.device] == nil {
		if err := r.reload(ctx); err != nil {
			return "", err
		}
	}
	var scr domain.CopilotScreen
	if cl.action.Type == domain.ActionTypeText && r.c.cfg.Policy.Sensitive {
		// Where the text goes is read now: the focus may have moved
		// since the model last looked.
		obs, err := r.dev.Observe.Handle(ctx, fleet.ObserveDevice{Auth: r.auth, DeviceID: cl.device, Elements: domain.ElementsNone, Snapshot: true})
		if err != nil {
			if err := r.append(ctx, called); err != nil {
				return "", err
			}
			return r.completeFailed(ctx, callID, "", err)
		}
		r.frames[cl.device] = obs.Frame.FrameID
		scr.SensitiveFocus = r.screen(obs)
	}
	scr.AfterPayment = r.afterPayment
	if why := domain.CopilotNeedsApproval(cl.action.Type, r.everyAction, *r.c.cfg.Policy, scr); why != "" {
		return r.askApproval(ctx, cl, called, why)
	}
	lease, err := r.takeLease(ctx, cl.device)
	if err != nil {
		if err := r.append(ctx, called); err != nil {
			return "", err
		}
		return r.completeFailed(ctx, callID, "", err)
	}
	frame := r.frames[cl.device]
	key := "copilot-" + callID
	called.IdempotencyKey, called.ObservedFrame = key, frame
	news, err := eventstore.Encode(domain.Events, r.auth.OrgID, r.withOwed(called)...)
	if err != nil {
		return "", err
	}
	// An action once sent settles as usual, whatever happens to the turn
	// meanwhile: it is awaited apart from the turn's cancellation.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionWait)
	defer cancel()
	out, err := r.dev.Act.Handle(actx, fleet.PerformAction{Auth: r.auth, DeviceID: cl.device, Action: string(cl.action.Type),
		Arguments: cl.action.ArgumentsJSON(), IdempotencyKey: key, LeaseID: lease.id, ObservedFrame: frame,
		Also: &fleet.StreamAppend{StreamID: domain.CopilotThreadStream(r.threadID), Expected: r.version, Events: news}})
	// An action answered afresh was recorded with its request, the call
	// with it, at the turn's version: the thread is where the turn left it
	// plus the call. Otherwise (a refusal, or a replay of the key) whether
	// the call was recorded is the thread's to say: load it again (a fold of
	// the whole thread, so not on every call).
	recorded, over := err == nil && !out.Replayed, false
	if recorded {
		r.version += int64(len(news))
	} else {
		t, v, lerr := r.c.threads.Load(actx, r.threadID)
		if lerr != nil {
			return "", lerr
		}
		r.version = v
		recorded, over = t.Calls[callID], t.Turn != r.turnID
	}
	if recorded {
		r.owed = nil // recorded with the action's request
	}
	if !recorded {
		if over || err == nil {
			// Stopped before the action was recorded: it was never sent.
			return "", errTurnOver
		}
		// Refused before anything was recorded: record the call with its refusal.
		if aerr := r.append(ctx, called); aerr != nil {
			return "", aerr
		}
	}
	if err != nil {
		return r.completeFailed(ctx, callID, key, err)
	}
	rc := out.Receipt
	if rc.Frames.After != "" {
		r.frames[cl.device] = rc.Frames.After
	}
	done := domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: callID, State: "succeeded",
		ActionID: rc.ActionID, IdempotencyKey: rc.IdempotencyKey, ReceiptState: rc.State, FrameBefore: rc.Frames.Before,
		FrameAfter: rc.Frames.After, At: r.c.now()}
	if rc.Error != nil {
		done.State = "failed"
		done.Error = &domain.CopilotToolError{Code: string(rc.Error.Code), Message: rc.Error.Message}
	}
	if over {
		// The turn was stopped while the action ran: its outcome is still
		// the thread's to show, and nothing follows it.
		r.settleAfterStop(ctx, done)
		return "", errTurnOver
	}
	if err := r.append(ctx, done); err != nil {
		if errors.Is(err, errTurnOver) {
			r.settleAfterStop(ctx, done)
		}
		return "", err
	}
	res, _ := json.Marshal(map[string]any{"state": rc.State, "idempotencyKey": rc.IdempotencyKey, "result": rc.Result,
		"frameAfter": rc.Frames.After, "error": rc.Error})
	return string(res), nil
}

// waitFor waits through the fleet's WaitFor, as REST and MCP do; the
// frame it saw is the one the next action is decided on.
func (r *turn) waitFor(ctx context.Context, cl call, called domain.CopilotToolCalled) (string, error) {
	if err := r.append(ctx, called); err != nil {
		return "", err
	}
	res, err := r.dev.WaitFor.Handle(ctx, fleet.WaitFor{Auth: r.auth, DeviceID: cl.device, WaitCondition: cl.wait})
	if err != nil {
		return r.completeFailed(ctx, called.CallID, "", err)
	}
	r.frames[cl.device] = res.FrameID
	met := res.Met
	if err := r.append(ctx, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: called.CallID, State: "succeeded",
		FrameID: res.FrameID, Met: &met, At: r.c.now()}); err != nil {
		return "", err
	}
	out, _ := json.Marshal(res)
	return string(out), nil
}

// startRun hands the device to a run through the application's StartRun,
// as the person. A lease this turn took is given back first (the run
// takes its own); the person's own lease stays theirs, and the run's
// refusal then says so. A thread that approves every action, or a turn
// past a payment screen under the payment policy, starts no run from the
// chat: a run's actions would not wait for the person's yes.
func (r *turn) startRun(ctx context.Context, cl call, called domain.CopilotToolCalled) (string, error) {
	if err := r.append(ctx, called); err != nil {
		return "", err
	}
	if r.everyAction || r.c.cfg.Policy.Payment && r.afterPayment {
		return r.completeFailed(ctx, called.CallID, "", domain.Errorf(domain.CodePermissionDenied,
			"a run's actions do not wait for approval, and this conversation asks for it; the person can start the run from the console"))
	}
	if l := r.leases[cl.device]; l != nil && l.acquired {
		r.releaseLease(ctx, cl.device, l)
		delete(r.leases, cl.device)
	}
	started, err := r.dev.StartRun.Handle(ctx, runs.StartRun{Auth: r.auth, DeviceID: cl.device, Goal: cl.run.Goal, MaxSteps: cl.run.MaxSteps})
	if err != nil {
		return r.completeFailed(ctx, called.CallID, "", err)
	}
	if err := r.append(ctx, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: called.CallID, State: "succeeded",
		RunID: started.Run.RunID, RunState: started.Run.State, At: r.c.now()}); err != nil {
		return "", err
	}
	// The run's token (inside its vrx URL) is not given to the model.
	out, _ := json.Marshal(map[string]any{"runId": started.Run.RunID, "state": started.Run.State, "goal": started.Run.Goal})
	return string(out), nil
}

// screen reads an observation's tree, when it has one: it notes a
// payment screen (for the rest of the turn) and reports whether the
// focused field is a password field.
func (r *turn) screen(obs fleet.Observation) (sensitiveFocus bool) {
	if len(obs.Snapshot) == 0 {
		return false
	}
	var root domain.UIElement
	if json.Unmarshal(obs.Snapshot, &root) != nil {
		return false
	}
	if domain.CopilotPaymentScreen(root) {
		r.afterPayment = true
	}
	return domain.CopilotSensitiveFocus(root)
}

// askApproval records that the action waits for the person's yes, bound
// to its digest (action, arguments, the frame it is decided on, the
// lease's fencing token), and keeps the lease for it.
func (r *turn) askApproval(ctx context.Context, cl call, called domain.CopilotToolCalled, why string) (string, error) {
	lease, err := r.takeLease(ctx, cl.device)
	if err != nil {
		if err := r.append(ctx, called); err != nil {
			return "", err
		}
		return r.completeFailed(ctx, called.CallID, "", err)
	}
	if r.frames[cl.device] == "" {
		obs, err := r.dev.Observe.Handle(ctx, fleet.ObserveDevice{Auth: r.auth, DeviceID: cl.device, Elements: domain.ElementsNone})
		if err != nil {
			if err := r.append(ctx, called); err != nil {
				return "", err
			}
			return r.completeFailed(ctx, called.CallID, "", err)
		}
		r.frames[cl.device] = obs.Frame.FrameID
	}
	frame := r.frames[cl.device]
	now := r.c.now()
	args := cl.action.ArgumentsJSON()
	id := domain.NewID(domain.PrefixCopilotApproval)
	req := domain.CopilotApprovalRequested{ThreadID: r.threadID, TurnID: r.turnID, CallID: called.CallID, ApprovalID: id,
		DeviceID: cl.device, Action: string(cl.action.Type), Arguments: args, Frame: frame, LeaseID: lease.id,
		FencingToken: lease.token, Digest: domain.CopilotActionDigest(string(cl.action.Type), args, frame, lease.token),
		Reason: why, ExpiresAt: now.Add(domain.CopilotApprovalTTL), At: now}
	called.ObservedFrame = frame
	if err := r.append(ctx, called, req, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: called.CallID,
		State: "awaiting_approval", ApprovalID: id, At: now}); err != nil {
		return "", err
	}
	// The lease is kept for the approved action (its fencing token is
	// part of what was approved); it runs out by itself otherwise.
	lease.acquired, r.awaiting = false, true
	out, _ := json.Marshal(map[string]any{"approval": "requested", "approvalId": id, "digest": req.Digest,
		"note": "the person must approve this action; it runs on their yes"})
	return string(out), nil
}

// settleAfterStop records, after the turn's end, what an action sent
// before the stop came to, or the tokens an answer took: facts of the
// past, which nothing follows.
func (r *turn) settleAfterStop(ctx context.Context, ev domain.Event) {
	news, err := eventstore.Encode(domain.Events, r.auth.OrgID, ev)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_, _ = r.c.cfg.Store.Append(ctx, domain.CopilotThreadStream(r.threadID), eventstore.AnyVersion, news...)
}

// actionWait bounds waiting for a sent action's outcome.
const actionWait = 2 * time.Minute

// completeFailed records a call's failure and tells the model.
func (r *turn) completeFailed(ctx context.Context, callID, key string, err error) (string, error) {
	if errors.Is(err, errTurnOver) {
		return "", err
	}
	var de *domain.Error
	if !errors.As(err, &de) {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		de = domain.Errorf(domain.CodeInternal, "%v", err)
	}
	if aerr := r.append(ctx, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: callID, State: "failed",
		IdempotencyKey: key, Error: &domain.CopilotToolError{Code: string(de.Code), Message: de.Message}, At: r.c.now()}); aerr != nil {
		return "", aerr
	}
	res, _ := json.Marshal(map[string]any{"error": map[string]any{"code": de.Code, "message": de.Message}})
	return string(res), nil
}

// takeLease finds the person's lease on the device, or takes one for the
// turn: recorded (copilot.lease_taken) so that it is given back at the
// turn's end, or by the sweep that ends the turn when it is lost.
func (r *turn) takeLease(ctx context.Context, device string) (*turnLease, error) {
	if l := r.leases[device]; l != nil {
		return l, nil
	}
	page, err := r.dev.ListLeases.Handle(ctx, fleet.ListLeases{Auth: r.auth, LeaseQuery: fleet.LeaseQuery{DeviceID: device}})
	if err != nil {
		return nil, err
	}
	for _, l := range page.Leases {
		if l.DeviceID == device && l.Holder.UserID == r.auth.UserID && l.Holder.RunID == "" {
			r.leases[device] = &turnLease{id: l.LeaseID, token: l.FencingToken}
			return r.leases[device], nil
		}
	}
	l, err := r.dev.AcquireLease.Handle(ctx, fleet.AcquireLease{Auth: r.auth, DeviceID: device, TTLSeconds: int(r.c.cfg.LeaseTTL / time.Second)})
	if err != nil {
		return nil, err
	}
	tl := &turnLease{id: l.LeaseID, token: l.FencingToken, acquired: true}
	r.leases[device] = tl
	if err := r.append(ctx, domain.CopilotLeaseTaken{ThreadID: r.threadID, TurnID: r.turnID, DeviceID: device, LeaseID: l.LeaseID,
		At: r.c.now()}); err != nil {
		return nil, err
	}
	return tl, nil
}

// releaseLeases gives back every lease the turn took.
func (r *turn) releaseLeases(ctx context.Context) {
	for device, l := range r.leases {
		if l.acquired {
			r.releaseLease(ctx, device, l)
		}
	}
}

// releaseLease gives back a lease the turn took.
func (r *turn) releaseLease(ctx context.Context, device string, l *turnLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_, _ = r.dev.ReleaseLease.Handle(ctx, fleet.ReleaseLease{Auth: r.auth, DeviceID: device, LeaseID: l.id})
}

// listDevices lists the person's devices for a fleet thread's model,
// through the fleet's ListDevices (GET /v1/devices): what they are, their
// state, and who holds them.
func (r *turn) listDevices(ctx context.Context, called domain.CopilotToolCalled) (string, error) {
	if err := r.append(ctx, called); err != nil {
		return "", err
	}
	page, err := r.dev.ListDevices.Handle(ctx, fleet.ListDevices{Auth: r.auth, DeviceQuery: fleet.DeviceQuery{Limit: maxListedDevices}})
	if err != nil {
		return r.completeFailed(ctx, called.CallID, "", err)
	}
	type listed struct {
		DeviceID string `json:"deviceId"`
		Name     string `json:"name"`
		Model    string `json:"model"`
		Status   string `json:"status"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
		// LeasedBy is "you" (the person), "someone else", or absent.
		LeasedBy string `json:"leasedBy,omitempty"`
	}
	out := make([]listed, 0, len(page.Devices))
	for _, d := range page.Devices {
		l := listed{DeviceID: d.DeviceID, Name: d.Name, Model: d.Model, Status: d.Status, Width: d.Width, Height: d.Height}
		if d.Leased {
			l.LeasedBy = "someone else"
			if h := d.Holder(); h.Kind == domain.ActorUser && h.ID == r.auth.UserID {
				l.LeasedBy = "you"
			}
		}
		out = append(out, l)
	}
	if err := r.append(ctx, domain.CopilotToolCompleted{ThreadID: r.threadID, TurnID: r.turnID, CallID: called.CallID, State: "succeeded",
		At: r.c.now()}); err != nil {
		return "", err
	}
	res, _ := json.Marshal(map[string]any{"devices": out, "more": page.NextAfter != ""})
	return string(res), nil
}
