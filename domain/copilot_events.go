package domain

import (
	"encoding/json"
	"time"
)

// copilotEvents are the events of copilot threads: one stream per thread
// (CopilotThreadStream), whose version orders everything said and done in
// it, so a turn acts only while the stream is where it last saw it (a
// stop, recorded in the same stream, is never overtaken by an action).
var copilotEvents = []EventDef{
	Def[CopilotThreadStarted](1, nil),
	Def[CopilotMessagePosted](1, nil),
	Def[CopilotTextStreamed](1, nil),
	Def[CopilotToolCalled](1, nil),
	Def[CopilotToolCompleted](1, nil),
	Def[CopilotTokensUsed](1, nil),
	Def[CopilotStopRequested](1, nil),
	Def[CopilotTurnEnded](1, nil),
	Def[CopilotApprovalRequested](1, nil),
	Def[CopilotApprovalGranted](1, nil),
	Def[CopilotApprovalDenied](1, nil),
	Def[CopilotApprovalExpired](1, nil),
	Def[CopilotApprovalRefused](1, nil),
	Def[CopilotLeaseTaken](1, nil),
}

// CopilotThreadStarted records a new thread: a person's conversation
// about one device, or about their fleet (DeviceID empty: the model lists
// the devices and names the one each call acts on). It is the first event
// of the thread's stream.
type CopilotThreadStarted struct {
	ThreadID string `json:"threadId"`
	OrgID    string `json:"orgId"`
	// UserID is the person whose thread it is; only they read it.
	UserID string `json:"userId"`
	// DeviceID is the device the thread is about; empty for a fleet
	// thread.
	DeviceID string `json:"deviceId"`
	Title    string `json:"title"`
	// ApproveEveryAction is the person's choice for the thread: every
	// device action waits for their yes, not only those the deployment's
	// policy names.
	ApproveEveryAction bool      `json:"approveEveryAction,omitempty"`
	At                 time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotThreadStarted) EventName() string { return "copilot.thread_started" }

// CopilotMessagePosted records the person's message; it starts a turn.
type CopilotMessagePosted struct {
	ThreadID string    `json:"threadId"`
	TurnID   string    `json:"turnId"`
	Text     string    `json:"text"`
	By       Actor     `json:"by"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotMessagePosted) EventName() string { return "copilot.message_posted" }

// CopilotTextStreamed records a piece of the assistant's answer as the
// model produced it; the pieces of one step, in stream order, are its
// message.
type CopilotTextStreamed struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	// Step counts the model's answers within the turn, from 1.
	Step int       `json:"step"`
	Text string    `json:"text"`
	At   time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotTextStreamed) EventName() string { return "copilot.text_streamed" }

// CopilotToolCalled records a tool call the copilot is about to make for
// the model. For a device action it is recorded in the same unit as the
// action's request, so the action is never sent unless this was recorded
// at the thread's version the turn last saw.
type CopilotToolCalled struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// DeviceID is the device the call acts on or looks at (absent for a
	// call about no one device, and in events recorded before fleet
	// threads: the thread's device).
	DeviceID string `json:"deviceId,omitempty"`
	// IdempotencyKey is the device action's key (actions only).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// ObservedFrame is the frame the action was decided on (actions only).
	ObservedFrame string    `json:"observedFrame,omitempty"`
	At            time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotToolCalled) EventName() string { return "copilot.tool_called" }

// CopilotToolError is why a tool call failed: an error code of the
// contract and its message.
type CopilotToolError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CopilotToolCompleted records what a tool call came to: the receipt of
// a device action, the frame an observation stored, or the failure.
type CopilotToolCompleted struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	CallID   string `json:"callId"`
	// State is succeeded or failed.
	State string `json:"state"`
	// ApprovalID names the approval the action ran under.
	ApprovalID string `json:"approvalId,omitempty"`
	// ActionID and ReceiptState are the device action's receipt.
	ActionID       string `json:"actionId,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	ReceiptState   string `json:"receiptState,omitempty"`
	// FrameBefore and FrameAfter are the receipt's frames; FrameID the
	// frame an observation stored.
	FrameBefore string `json:"frameBefore,omitempty"`
	FrameAfter  string `json:"frameAfter,omitempty"`
	FrameID     string `json:"frameId,omitempty"`
	// Met is a wait's answer (wait_for); RunID and RunState the run a
	// start_run started.
	Met      *bool             `json:"met,omitempty"`
	RunID    string            `json:"runId,omitempty"`
	RunState string            `json:"runState,omitempty"`
	Error    *CopilotToolError `json:"error,omitempty"`
	At       time.Time         `json:"at"`
}

// EventName implements Event.
func (CopilotToolCompleted) EventName() string { return "copilot.tool_completed" }

// CopilotTokensUsed records the tokens one answer of the model took, as
// the provider reported them (input and output). The person is who is
// metered.
type CopilotTokensUsed struct {
	ThreadID     string    `json:"threadId"`
	TurnID       string    `json:"turnId"`
	UserID       string    `json:"userId"`
	Model        string    `json:"model"`
	InputTokens  int64     `json:"inputTokens"`
	OutputTokens int64     `json:"outputTokens"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotTokensUsed) EventName() string { return "copilot.tokens_used" }

// CopilotStopRequested records the person stopping the turn in flight.
// The turn's end is recorded with it, so nothing the turn would do next
// can be recorded (and so sent) after it.
type CopilotStopRequested struct {
	ThreadID string    `json:"threadId"`
	TurnID   string    `json:"turnId"`
	By       Actor     `json:"by"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotStopRequested) EventName() string { return "copilot.stop_requested" }

// Outcomes of a copilot turn.
const (
	// CopilotTurnAwaitingApproval: the turn asked the person to approve
	// an action and ended; the action runs when they approve it.
	CopilotTurnAwaitingApproval = "awaiting_approval"
	CopilotTurnCompleted        = "completed"
	CopilotTurnStopped          = "stopped"
	CopilotTurnFailed           = "failed"
)

// CopilotTurnEnded records the end of a turn: completed (the model
// answered without a tool call), stopped (by the person), or failed
// (Reason: provider_error, malformed_tool_call, too_many_steps,
// internal_error; Detail says what happened).
type CopilotTurnEnded struct {
	ThreadID string    `json:"threadId"`
	TurnID   string    `json:"turnId"`
	Outcome  string    `json:"outcome"`
	Reason   string    `json:"reason,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotTurnEnded) EventName() string { return "copilot.turn_ended" }

// CopilotApprovalRequested records that an action waits for the person's
// yes: the exact action and arguments, the frame it was decided on and the
// fencing token of the lease it would run under, bound by Digest
// (CopilotActionDigest). It runs only while all four still match.
type CopilotApprovalRequested struct {
	ThreadID     string          `json:"threadId"`
	TurnID       string          `json:"turnId"`
	CallID       string          `json:"callId"`
	ApprovalID   string          `json:"approvalId"`
	DeviceID     string          `json:"deviceId"`
	Action       string          `json:"action"`
	Arguments    json.RawMessage `json:"arguments"`
	Frame        string          `json:"frame"`
	LeaseID      string          `json:"leaseId"`
	FencingToken int64           `json:"fencingToken"`
	Digest       string          `json:"digest"`
	// Reason says why it needs approval (ApprovalReason*): the
	// deployment's policy (policy for an install, sensitive_field,
	// payment_screen) or the thread's choice (every_action).
	Reason    string    `json:"reason"`
	ExpiresAt time.Time `json:"expiresAt"`
	At        time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotApprovalRequested) EventName() string { return "copilot.approval_requested" }

// CopilotApprovalGranted records the person's yes; it is recorded with the
// action's request (the action's receipt follows as copilot.tool_completed
// naming the approval).
type CopilotApprovalGranted struct {
	ThreadID   string    `json:"threadId"`
	ApprovalID string    `json:"approvalId"`
	By         Actor     `json:"by"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotApprovalGranted) EventName() string { return "copilot.approval_granted" }

// CopilotApprovalDenied records the person's no: the action never runs.
type CopilotApprovalDenied struct {
	ThreadID   string    `json:"threadId"`
	ApprovalID string    `json:"approvalId"`
	By         Actor     `json:"by"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotApprovalDenied) EventName() string { return "copilot.approval_denied" }

// CopilotApprovalExpired records an approval that was not decided in time.
type CopilotApprovalExpired struct {
	ThreadID   string    `json:"threadId"`
	ApprovalID string    `json:"approvalId"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotApprovalExpired) EventName() string { return "copilot.approval_expired" }

// Reasons an approved action was refused as stale.
const (
	ApprovalStaleDigest = "digest_mismatch"
	ApprovalStaleLease  = "lease_changed"
	ApprovalStaleFrame  = "screen_changed"
)

// CopilotApprovalRefused records a yes that came too late for what was
// approved: the action, its arguments, the screen or the lease changed
// (Reason). Nothing ran; the copilot must ask again.
type CopilotApprovalRefused struct {
	ThreadID   string    `json:"threadId"`
	ApprovalID string    `json:"approvalId"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotApprovalRefused) EventName() string { return "copilot.approval_refused" }

// CopilotLeaseTaken records a lease a turn took for itself (the person
// held none on the device): the turn gives it back at its end, and when
// the turn is lost, the sweep that ends it does. A lease the person took
// by hand is never recorded here, so nothing but the turn's own is given
// back.
type CopilotLeaseTaken struct {
	ThreadID string    `json:"threadId"`
	TurnID   string    `json:"turnId"`
	DeviceID string    `json:"deviceId"`
	LeaseID  string    `json:"leaseId"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (CopilotLeaseTaken) EventName() string { return "copilot.lease_taken" }
