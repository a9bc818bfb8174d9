package wire

import (
	"encoding/json"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of the copilot (/v1/copilot).

// CopilotThread is a thread as the API shows it.
type CopilotThread struct {
	ThreadID string `json:"threadId"`
	// DeviceID is null for a thread about the person's fleet.
	DeviceID *string `json:"deviceId"`
	Title    string  `json:"title"`
	// State is working while a turn is in flight, else idle.
	State       string             `json:"state"`
	TurnID      *string            `json:"turnId"`
	LastOutcome *string            `json:"lastOutcome"`
	Usage       CopilotThreadUsage `json:"usage"`
	CreatedAt   string             `json:"createdAt"`
	UpdatedAt   string             `json:"updatedAt"`
}

// CopilotThreadUsage is the tokens a thread's turns took.
type CopilotThreadUsage struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

// NewCopilotThread returns v as the API shows it.
func NewCopilotThread(v projections.CopilotThreadView) CopilotThread {
	state := "idle"
	if v.TurnID != "" {
		state = "working"
	}
	return CopilotThread{ThreadID: v.ThreadID, DeviceID: scheduleOptional(v.DeviceID), Title: v.Title, State: state,
		TurnID: scheduleOptional(v.TurnID), LastOutcome: scheduleOptional(v.LastOutcome),
		Usage:     CopilotThreadUsage{InputTokens: v.InputTokens, OutputTokens: v.OutputTokens},
		CreatedAt: domain.FormatWebhookTime(v.CreatedAt), UpdatedAt: domain.FormatWebhookTime(v.UpdatedAt)}
}

// CopilotThreadList is GET /v1/copilot/threads.
type CopilotThreadList struct {
	Threads []CopilotThread `json:"threads"`
}

// NewCopilotThreadList returns the list as the API shows it.
func NewCopilotThreadList(vs []projections.CopilotThreadView) CopilotThreadList {
	out := CopilotThreadList{Threads: make([]CopilotThread, len(vs))}
	for i, v := range vs {
		out.Threads[i] = NewCopilotThread(v)
	}
	return out
}

// CopilotThreadDetail is GET /v1/copilot/threads/{threadId}: the thread
// and its items in order; each item is its kind's fields beside seq,
// kind and turnId.
type CopilotThreadDetail struct {
	Thread CopilotThread    `json:"thread"`
	Items  []map[string]any `json:"items"`
}

// NewCopilotThreadDetail returns the thread and its items as the API
// shows them.
func NewCopilotThreadDetail(v projections.CopilotThreadView, items []projections.CopilotItem) (CopilotThreadDetail, error) {
	out := CopilotThreadDetail{Thread: NewCopilotThread(v), Items: make([]map[string]any, len(items))}
	for i, it := range items {
		m := map[string]any{}
		if err := json.Unmarshal(it.Data, &m); err != nil {
			return out, err
		}
		m["seq"], m["kind"], m["turnId"] = it.Seq, it.Kind, it.TurnID
		out.Items[i] = m
	}
	return out, nil
}

// CopilotPosted is POST /v1/copilot's answer.
type CopilotPosted struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// CopilotApproval is an approval as the API shows it: the exact action,
// its arguments, the frame it was decided on, the fencing token and the
// digest that binds them.
type CopilotApproval struct {
	ApprovalID    string          `json:"approvalId"`
	ThreadID      string          `json:"threadId"`
	DeviceID      string          `json:"deviceId"`
	Action        string          `json:"action"`
	Arguments     json.RawMessage `json:"arguments"`
	Frame         string          `json:"frame"`
	FencingToken  int64           `json:"fencingToken"`
	Digest        string          `json:"digest"`
	Reason        string          `json:"reason"`
	State         string          `json:"state"`
	RefusedReason *string         `json:"refusedReason"`
	ExpiresAt     string          `json:"expiresAt"`
	RequestedAt   string          `json:"requestedAt"`
	DecidedAt     *string         `json:"decidedAt"`
}

// NewCopilotApprovalList returns GET /v1/copilot/approvals's answer.
func NewCopilotApprovalList(vs []projections.CopilotApprovalView) map[string][]CopilotApproval {
	out := make([]CopilotApproval, len(vs))
	for i, v := range vs {
		out[i] = CopilotApproval{ApprovalID: v.ApprovalID, ThreadID: v.ThreadID, DeviceID: v.DeviceID, Action: v.Action,
			Arguments: v.Arguments, Frame: v.Frame, FencingToken: v.FencingToken, Digest: v.Digest, Reason: v.Reason, State: v.State,
			RefusedReason: scheduleOptional(v.RefusedReason), ExpiresAt: domain.FormatWebhookTime(v.ExpiresAt),
			RequestedAt: domain.FormatWebhookTime(v.RequestedAt), DecidedAt: optionalTime(v.DecidedAt)}
	}
	return map[string][]CopilotApproval{"approvals": out}
}

// CopilotDecision is POST /v1/copilot/approvals's answer: the approval's
// state and, for an approved action, its receipt.
type CopilotDecision struct {
	ApprovalID string          `json:"approvalId"`
	ThreadID   string          `json:"threadId"`
	State      string          `json:"state"`
	Receipt    *domain.Receipt `json:"receipt,omitempty"`
}

// CopilotCommandResult is POST /v1/copilot/commands's answer: the command
// as read, the receipts of the actions it took and the frame it ended on.
type CopilotCommandResult struct {
	Command  CopilotParsedCommand `json:"command"`
	Receipts []domain.Receipt     `json:"receipts"`
	FrameID  *string              `json:"frameId"`
}

// CopilotParsedCommand is a command as it was read.
type CopilotParsedCommand struct {
	Verb string  `json:"verb"`
	Arg  *string `json:"argument"`
}

// NewCopilotCommandResult returns the answer.
func NewCopilotCommandResult(verb, arg string, receipts []domain.Receipt, frameID string) CopilotCommandResult {
	if receipts == nil {
		receipts = []domain.Receipt{}
	}
	return CopilotCommandResult{Command: CopilotParsedCommand{Verb: verb, Arg: scheduleOptional(arg)}, Receipts: receipts,
		FrameID: scheduleOptional(frameID)}
}

// CopilotAllowance is the copilot's monthly allowance (spec 2.4).
type CopilotAllowance struct {
	Included     int64   `json:"included"`
	Used         int64   `json:"used"`
	Period       string  `json:"period"`
	UsedFraction float64 `json:"usedFraction"`
	Exhausted    bool    `json:"exhausted"`
	NearLimit    bool    `json:"nearLimit"`
	Metered      bool    `json:"metered"`
}

// NewCopilotAllowance renders an allowance.
func NewCopilotAllowance(a domain.CopilotAllowance) CopilotAllowance {
	return CopilotAllowance{Included: a.Included, Used: a.Used, Period: a.Period.Name(), UsedFraction: a.UsedFraction,
		Exhausted: a.Exhausted, NearLimit: a.NearLimit, Metered: a.Metered}
}
