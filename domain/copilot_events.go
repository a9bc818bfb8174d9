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
}

// CopilotThreadStarted records a new thread: a person's conversation
// about one device. It is the first event of the thread's stream.
type CopilotThreadStarted struct {
	ThreadID string `json:"threadId"`
	OrgID    string `json:"orgId"`
	// UserID is the person whose thread it is; only they read it.
	UserID   string    `json:"userId"`
	DeviceID string    `json:"deviceId"`
	Title    string    `json:"title"`
	At       time.Time `json:"at"`
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
	// ActionID and ReceiptState are the device action's receipt.
	ActionID       string `json:"actionId,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	ReceiptState   string `json:"receiptState,omitempty"`
	// FrameBefore and FrameAfter are the receipt's frames; FrameID the
	// frame an observation stored.
	FrameBefore string            `json:"frameBefore,omitempty"`
	FrameAfter  string            `json:"frameAfter,omitempty"`
	FrameID     string            `json:"frameId,omitempty"`
	Error       *CopilotToolError `json:"error,omitempty"`
	At          time.Time         `json:"at"`
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
	CopilotTurnCompleted = "completed"
	CopilotTurnStopped   = "stopped"
	CopilotTurnFailed    = "failed"
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
