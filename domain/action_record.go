package domain

import (
	"encoding/json"
	"time"
)

// Receipt states (spec 3.1).
const (
	ReceiptPending   = "pending"
	ReceiptCommitted = "committed"
	ReceiptFailed    = "failed"
)

// ReceiptStates lists the receipt states.
var ReceiptStates = []string{ReceiptPending, ReceiptCommitted, ReceiptFailed}

// ActionStream returns the stream of one action: requested, then at most
// one outcome, then any reviews.
func ActionStream(actionID string) string { return "action-" + actionID }

// ActionRecord is the aggregate of one action's stream; its Receipt is what
// the receipts read model shows for it.
type ActionRecord struct {
	Requested      ActionRequested
	OrgID          string
	State          string
	OutcomeUnknown bool
	UnknownReason  string
	UnknownAt      time.Time
	Committed      *ActionCommitted
	Failed         *ActionFailed
	Review         *ReceiptReviewed
	Version        int64
}

// Apply changes state by one recorded event at stream version version.
func (r *ActionRecord) Apply(orgID string, e Event, version int64) {
	r.Version = version
	switch e := e.(type) {
	case ActionRequested:
		r.Requested, r.OrgID, r.State = e, orgID, ReceiptPending
	case ActionCommitted:
		r.Committed, r.State = &e, ReceiptCommitted
	case ActionFailed:
		r.Failed, r.State = &e, ReceiptFailed
	case ActionOutcomeUnknown:
		r.OutcomeUnknown, r.UnknownReason, r.UnknownAt = true, e.Reason, e.At
	case ReceiptReviewed:
		r.Review = &e
	}
}

// Finished reports whether the action has an outcome, or is known never to
// get one (outcome unknown).
func (r *ActionRecord) Finished() bool {
	return r.State != ReceiptPending || r.OutcomeUnknown
}

func (r *ActionRecord) checkOpen() error {
	if r.State == "" {
		return Errorf(CodeInternal, "action was never requested")
	}
	if r.Finished() {
		return Errorf(CodeInternal, "action %s already has an outcome", r.Requested.ActionID)
	}
	return nil
}

// Commit records that the device carried the action out.
func (r *ActionRecord) Commit(e ActionCommitted) ([]Event, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// Fail records that the action was refused or failed.
func (r *ActionRecord) Fail(e ActionFailed) ([]Event, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// MarkOutcomeUnknown records that no outcome will ever be known.
func (r *ActionRecord) MarkOutcomeUnknown(reason string, at time.Time) ([]Event, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return []Event{ActionOutcomeUnknown{ActionID: r.Requested.ActionID, DeviceID: r.Requested.DeviceID, Reason: reason, At: at}}, nil
}

// MarkReviewed records that reviewer looked at the receipt.
func (r *ActionRecord) MarkReviewed(reviewer Actor, note string, at time.Time) ([]Event, error) {
	if r.State == "" {
		return nil, Errorf(CodeReceiptNotFound, "no receipt")
	}
	if len(note) > 2000 {
		return nil, Errorf(CodeInvalidArgument, "note must be at most 2000 bytes")
	}
	return []Event{ReceiptReviewed{ActionID: r.Requested.ActionID, IdempotencyKey: r.Requested.IdempotencyKey,
		Reviewer: reviewer, Note: note, At: at}}, nil
}

// OutcomeError returns the recorded outcome of a finished action that did
// not commit, as the error a replay of its idempotency key answers: the
// failure's own code, or action_outcome_unknown. Either is retryable false:
// the key answers it again on every later request, so re-issuing the same
// call unchanged is not meaningful (a new key tries again). It returns nil
// for a committed action.
func (r *ActionRecord) OutcomeError() error {
	key, dev := r.Requested.IdempotencyKey, r.Requested.DeviceID
	switch {
	case r.OutcomeUnknown:
		return Errorf(CodeActionOutcomeUnknown, "the outcome of this action is unknown; observe the device again and use a new idempotencyKey").
			WithRetryable(false).With("idempotencyKey", key).With("deviceId", dev)
	case r.Failed != nil:
		e := (&Error{Code: r.Failed.Code, Message: r.Failed.Message}).WithRetryable(false).With("idempotencyKey", key).With("deviceId", dev)
		if r.Failed.Reason != "" {
			e = e.With("reason", r.Failed.Reason)
		}
		return e
	}
	return nil
}

// Receipt is one action as the receipts surface shows it (spec 2.5): it
// names exactly one of actor.userId and actor.apiKeyId and never carries
// the lease id or fencing token.
type Receipt struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	ActionID       string          `json:"actionId"`
	DeviceID       string          `json:"deviceId"`
	AgentRunID     string          `json:"agentRunId,omitempty"`
	State          string          `json:"state"`
	OutcomeUnknown bool            `json:"outcomeUnknown"`
	Actor          ReceiptActor    `json:"actor"`
	Action         ActionType      `json:"action"`
	Arguments      json.RawMessage `json:"arguments"`
	Result         *ActionResult   `json:"result,omitempty"`
	Effect         *ActionEffect   `json:"effect,omitempty"`
	Error          *ReceiptError   `json:"error,omitempty"`
	ObservedFrame  string          `json:"observedFrame,omitempty"`
	Frames         ReceiptFrames   `json:"frames"`
	// Timestamp is when the action was requested; receipts are ordered by
	// it (and the key), newest first.
	Timestamp  time.Time      `json:"timestamp"`
	StartedAt  *time.Time     `json:"startedAt,omitempty"`
	FinishedAt *time.Time     `json:"finishedAt,omitempty"`
	DurationMs *float64       `json:"durationMs,omitempty"`
	Reviewed   *ReceiptReview `json:"reviewed,omitempty"`
}

// ReceiptError is the failure a failed receipt records, or the reason its
// outcome is unknown.
type ReceiptError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// ReceiptFrames names the frames taken just before and just after the
// action.
type ReceiptFrames struct {
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// ReceiptReview records the last review of a receipt.
type ReceiptReview struct {
	At   time.Time    `json:"at"`
	By   ReceiptActor `json:"by"`
	Note string       `json:"note,omitempty"`
}

// Receipt returns the action's receipt.
func (r *ActionRecord) Receipt() Receipt {
	q := r.Requested
	rc := Receipt{IdempotencyKey: q.IdempotencyKey, ActionID: q.ActionID, DeviceID: q.DeviceID, AgentRunID: q.AgentRunID,
		State: r.State, OutcomeUnknown: r.OutcomeUnknown, Actor: q.Actor.ForReceipt(), Action: q.Action,
		Arguments: q.Arguments, ObservedFrame: q.ObservedFrame, Timestamp: q.RequestedAt}
	timing := func(start, end time.Time) {
		rc.StartedAt, rc.FinishedAt = &start, &end
		d := float64(end.Sub(start).Microseconds()) / 1000
		rc.DurationMs = &d
	}
	frames := func(before, after *FrameRef) {
		if before != nil {
			rc.Frames.Before = before.FrameID
		}
		if after != nil {
			rc.Frames.After = after.FrameID
		}
	}
	switch {
	case r.Committed != nil:
		res := r.Committed.Result
		rc.Result, rc.Effect = &res, r.Committed.Effect
		timing(r.Committed.StartedAt, r.Committed.FinishedAt)
		frames(r.Committed.FrameBefore, r.Committed.FrameAfter)
	case r.Failed != nil:
		rc.Error = &ReceiptError{Code: r.Failed.Code, Message: r.Failed.Message, Reason: r.Failed.Reason}
		timing(r.Failed.StartedAt, r.Failed.FinishedAt)
		frames(r.Failed.FrameBefore, r.Failed.FrameAfter)
	case r.OutcomeUnknown:
		rc.Error = &ReceiptError{Code: CodeActionOutcomeUnknown, Message: "the outcome of this action is unknown", Reason: r.UnknownReason}
	}
	if r.Review != nil {
		rc.Reviewed = &ReceiptReview{At: r.Review.At, By: r.Review.Reviewer.ForReceipt(), Note: r.Review.Note}
	}
	return rc
}
