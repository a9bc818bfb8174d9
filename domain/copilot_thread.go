package domain

import (
	"strings"
	"time"
	"unicode/utf8"
)

// ID prefixes of the copilot: threads and turns.
const (
	PrefixCopilotThread = "cth"
	PrefixCopilotTurn   = "ctn"
)

// MaxCopilotMessage bounds a person's message, in characters.
const MaxCopilotMessage = 4000

// CopilotThreadStream names a thread's stream.
func CopilotThreadStream(threadID string) string { return "copilot-thread-" + threadID }

// CopilotThread is a thread as the command side sees it: whose it is,
// which device it is about, and the turn in flight.
type CopilotThread struct {
	ID       string
	OrgID    string
	UserID   string
	DeviceID string
	// Turn is the turn in flight ("" when none).
	Turn string
	// Calls are the tool calls recorded in the turn in flight.
	Calls map[string]bool
}

// NewCopilotThread returns the state of a thread with no events.
func NewCopilotThread(id string) *CopilotThread { return &CopilotThread{ID: id} }

// Exists reports whether the thread was started.
func (t *CopilotThread) Exists() bool { return t.OrgID != "" }

// Apply folds one event into the thread.
func (t *CopilotThread) Apply(e Event) {
	switch e := e.(type) {
	case CopilotThreadStarted:
		t.OrgID, t.UserID, t.DeviceID = e.OrgID, e.UserID, e.DeviceID
	case CopilotMessagePosted:
		t.Turn, t.Calls = e.TurnID, map[string]bool{}
	case CopilotToolCalled:
		if e.TurnID == t.Turn {
			t.Calls[e.CallID] = true
		}
	case CopilotTurnEnded:
		if e.TurnID == t.Turn {
			t.Turn, t.Calls = "", nil
		}
	}
}

// VisibleTo reports whether a may read the thread: the person who
// started it, in its organisation.
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
func (t *CopilotThread) Post(a Auth, deviceID, turnID, text string, now time.Time) ([]Event, error) {
	var evs []Event
	if !t.Exists() {
		title := text
		if r := []rune(title); len(r) > 80 {
			title = string(r[:80]) + "…"
		}
		evs = append(evs, CopilotThreadStarted{ThreadID: t.ID, OrgID: a.OrgID, UserID: a.UserID, DeviceID: deviceID, Title: title, At: now})
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
