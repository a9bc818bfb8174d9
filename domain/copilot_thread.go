package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ID prefixes of the copilot: threads and turns.
const (
	PrefixCopilotThread   = "cth"
	PrefixCopilotTurn     = "ctn"
	PrefixCopilotApproval = "apv"
)

// CopilotApprovalTTL is how long an approval may be decided.
const CopilotApprovalTTL = 5 * time.Minute

// Approval states.
const (
	ApprovalPending = "pending"
	ApprovalGranted = "granted"
	ApprovalDenied  = "denied"
	ApprovalExpired = "expired"
	ApprovalRefused = "refused"
)

// CopilotApproval is an approval as the thread sees it.
type CopilotApproval struct {
	CopilotApprovalRequested
	State string
}

// CopilotActionDigest binds an approval to exactly what will happen: the
// action, its arguments (as the action reads them), the frame it was
// decided on and the fencing token of the lease it runs under.
func CopilotActionDigest(action string, arguments json.RawMessage, frame string, fencingToken int64) string {
	b, _ := json.Marshal([]any{action, arguments, frame, fencingToken})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// MaxCopilotMessage bounds a person's message, in characters.
const MaxCopilotMessage = 4000

// CopilotThreadStream names a thread's stream.
func CopilotThreadStream(threadID string) string { return "copilot-thread-" + threadID }

// CopilotThread is a thread as the command side sees it: whose it is,
// which device it is about, and the turn in flight.
type CopilotThread struct {
	ID     string
	OrgID  string
	UserID string
	// DeviceID is the thread's device; empty for a fleet thread.
	DeviceID string
	// Turn is the turn in flight ("" when none).
	Turn string
	// Calls are the tool calls recorded in the turn in flight.
	Calls map[string]bool
	// TurnLeases are the leases the turn in flight took for itself, by
	// device id (copilot.lease_taken).
	TurnLeases map[string]string
	// TurnSeen is when the turn in flight last recorded anything.
	TurnSeen time.Time
	// ApproveEveryAction is the thread's choice.
	ApproveEveryAction bool
	// Approvals are the thread's approvals by id.
	Approvals map[string]*CopilotApproval
}

// NewCopilotThread returns the state of a thread with no events.
func NewCopilotThread(id string) *CopilotThread { return &CopilotThread{ID: id} }

// Clone copies the thread, so a repository can keep it cached.
func (t *CopilotThread) Clone() *CopilotThread {
	c := *t
	c.Calls = maps.Clone(t.Calls)
	c.TurnLeases = maps.Clone(t.TurnLeases)
	if t.Approvals != nil {
		c.Approvals = make(map[string]*CopilotApproval, len(t.Approvals))
		for id, a := range t.Approvals {
			ac := *a
			c.Approvals[id] = &ac
		}
	}
	return &c
}

// Exists reports whether the thread was started.
func (t *CopilotThread) Exists() bool { return t.OrgID != "" }

// Apply folds one event into the thread.
func (t *CopilotThread) Apply(e Event) {
	switch e := e.(type) {
	case CopilotThreadStarted:
		t.OrgID, t.UserID, t.DeviceID, t.ApproveEveryAction = e.OrgID, e.UserID, e.DeviceID, e.ApproveEveryAction
	case CopilotApprovalRequested:
		if t.Approvals == nil {
			t.Approvals = map[string]*CopilotApproval{}
		}
		t.Approvals[e.ApprovalID] = &CopilotApproval{CopilotApprovalRequested: e, State: ApprovalPending}
	case CopilotApprovalGranted:
		t.setApproval(e.ApprovalID, ApprovalGranted)
	case CopilotApprovalDenied:
		t.setApproval(e.ApprovalID, ApprovalDenied)
	case CopilotApprovalExpired:
		t.setApproval(e.ApprovalID, ApprovalExpired)
	case CopilotApprovalRefused:
		t.setApproval(e.ApprovalID, ApprovalRefused)
	case CopilotMessagePosted:
		t.Turn, t.Calls, t.TurnSeen, t.TurnLeases = e.TurnID, map[string]bool{}, e.At, nil
	case CopilotLeaseTaken:
		if e.TurnID == t.Turn {
			if t.TurnLeases == nil {
				t.TurnLeases = map[string]string{}
			}
			t.TurnLeases[e.DeviceID] = e.LeaseID
			t.TurnSeen = e.At
		}
	case CopilotToolCalled:
		if e.TurnID == t.Turn {
			t.Calls[e.CallID] = true
			t.TurnSeen = e.At
		}
	case CopilotTextStreamed:
		t.seen(e.TurnID, e.At)
	case CopilotToolCompleted:
		t.seen(e.TurnID, e.At)
	case CopilotTokensUsed:
		t.seen(e.TurnID, e.At)
	case CopilotTurnEnded:
		if e.TurnID == t.Turn {
			t.Turn, t.Calls, t.TurnSeen, t.TurnLeases = "", nil, time.Time{}, nil
		}
	}
}

func (t *CopilotThread) seen(turnID string, at time.Time) {
	if turnID == t.Turn && at.After(t.TurnSeen) {
		t.TurnSeen = at
	}
}

// CopilotTurnLostAfter is how long a turn in flight may record nothing
// before a sweep takes it for lost (its process died): longer than any
// one step of a live turn (a model answer, an action, a wait).
const CopilotTurnLostAfter = 10 * time.Minute

// Sweep decides what time alone decides on the thread at now: each
// pending approval past its expiry is recorded expired, and a turn in
// flight that recorded nothing for lostAfter is ended failed (reason
// turn_lost), so the thread takes messages again. A lostAfter of zero
// judges no turn (the caller runs it, so it is live).
func (t *CopilotThread) Sweep(now time.Time, lostAfter time.Duration) []Event {
	var out []Event
	ids := make([]string, 0, len(t.Approvals))
	for id, a := range t.Approvals {
		if a.State == ApprovalPending && !now.Before(a.ExpiresAt) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, CopilotApprovalExpired{ThreadID: t.ID, ApprovalID: id, At: now})
	}
	if t.Turn != "" && lostAfter > 0 && now.Sub(t.TurnSeen) >= lostAfter {
		out = append(out, CopilotTurnEnded{ThreadID: t.ID, TurnID: t.Turn, Outcome: CopilotTurnFailed, Reason: "turn_lost",
			Detail: fmt.Sprintf("the turn recorded nothing for %s: the process running it is gone; nothing more will be done, and the leases it took are given back", lostAfter), At: now})
	}
	return out
}

func (t *CopilotThread) setApproval(id, state string) {
	if a := t.Approvals[id]; a != nil {
		a.State = state
	}
}

// Pending returns the approval id if it waits for a decision at now:
// not_found for an id the thread does not hold, wrong_state (with state)
// for one decided, expired (with the event recording so) for one whose
// time ran out.
func (t *CopilotThread) Pending(id string, now time.Time) (*CopilotApproval, []Event, error) {
	a := t.Approvals[id]
	if a == nil {
		return nil, nil, ErrCopilotApprovalNotFound(id)
	}
	if a.State == ApprovalPending && !now.Before(a.ExpiresAt) {
		return a, []Event{CopilotApprovalExpired{ThreadID: t.ID, ApprovalID: id, At: now}}, nil
	}
	if a.State != ApprovalPending {
		return nil, nil, Errorf(CodeWrongState, "approval %s is %s; only a pending approval is decided", id, a.State).
			With("state", a.State).With("approvalId", id)
	}
	return a, nil, nil
}

// ErrCopilotApprovalNotFound is the one answer for an approval that is not
// the caller's to decide, whoever's it is.
func ErrCopilotApprovalNotFound(id string) *Error {
	return NotFound("no copilot approval "+id).With("approvalId", id)
}

// Fleet reports whether the thread is about the person's fleet rather
// than one device.
func (t *CopilotThread) Fleet() bool { return t.DeviceID == "" }

// VisibleTo reports whether a may read the thread: the person who
// started it, in its organisation. A fleet thread (no device) is hidden
// from a credential narrowed to some devices, as CanSeeDevice("") says.
func (t *CopilotThread) VisibleTo(a Auth) bool {
	return t.Exists() && t.OrgID == a.OrgID && t.UserID == a.UserID && a.CanSeeDevice(t.DeviceID)
}

// ErrCopilotThreadNotFound is the one answer for a thread that is not the
// caller's to see, whoever's it is.
func ErrCopilotThreadNotFound(id string) *Error {
	return NotFound("no copilot thread "+id).With("threadId", id)
}

// CheckCopilotMessage checks a person's message.
func CheckCopilotMessage(text string) (string, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return "", Errorf(CodeInvalidArgument, "message is required").With("field", "message")
	}
	if utf8.RuneCountInString(text) > MaxCopilotMessage {
		return "", Errorf(CodeInvalidArgument, "message must be at most %d characters", MaxCopilotMessage).With("field", "message")
	}
	return text, nil
}

// Post records the person's message, starting a turn (and the thread,
// when it has no events yet). A thread with a turn in flight refuses a new
// message with wrong_state: stop it or wait for its end.
func (t *CopilotThread) Post(a Auth, deviceID, turnID, text string, everyAction bool, now time.Time) ([]Event, error) {
	var evs []Event
	if !t.Exists() {
		title := text
		if r := []rune(title); len(r) > 80 {
			title = string(r[:80]) + "…"
		}
		evs = append(evs, CopilotThreadStarted{ThreadID: t.ID, OrgID: a.OrgID, UserID: a.UserID, DeviceID: deviceID, Title: title,
			ApproveEveryAction: everyAction, At: now})
	} else if t.Turn != "" {
		return nil, Errorf(CodeWrongState, "copilot thread %s is still answering; stop its turn or wait for its end", t.ID).
			With("state", "working").With("threadId", t.ID).With("turnId", t.Turn)
	}
	evs = append(evs, CopilotMessagePosted{ThreadID: t.ID, TurnID: turnID, Text: text, By: ActorOf(a), At: now})
	return evs, nil
}

// Stop ends the turn in flight, stopped by a; it decides nothing when no
// turn is in flight (stopping is idempotent).
func (t *CopilotThread) Stop(a Auth, now time.Time) []Event {
	if t.Turn == "" {
		return nil
	}
	return []Event{
		CopilotStopRequested{ThreadID: t.ID, TurnID: t.Turn, By: ActorOf(a), At: now},
		CopilotTurnEnded{ThreadID: t.ID, TurnID: t.Turn, Outcome: CopilotTurnStopped, Reason: "stopped", Detail: "stopped by the person", At: now},
	}
}
