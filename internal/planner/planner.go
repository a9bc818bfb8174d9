// Package planner decides a run's next step for the built-in executor: an
// agent loop calls a Planner once per step with the run's goal, what was
// done so far and a budgeted observation of the screen, and gets back an
// action to take, a request for a person, or the run's end.
//
// Two planners are here: Scripted follows a script (a run's exported
// steps, or a goal written as steps, ParseSteps), and OpenAI asks an
// OpenAI-compatible chat-completions endpoint with tool calling, the tools
// being the device-surface calls.
package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"phonefleet/domain"
)

// Planner decides the next step of one run. The executor keeps one
// Planner per run it drives; Next may keep state between calls but must
// not assume the previous decision was carried out (a stale frame is
// observed again and asked again).
type Planner interface {
	// Next decides the step to take on the screen in.Observation. An
	// error wrapping ErrMalformed means the planner answered something
	// unusable (the run ends failed, planner_failed); one wrapping
	// ErrUnavailable means it could not be asked (the executor may try
	// again a few times first).
	Next(ctx context.Context, in Input) (Decision, error)
}

// Errors a Planner returns, wrapped with what went wrong.
var (
	// ErrMalformed: the planner's answer is not a valid decision (an
	// unknown tool, arguments that are not JSON or fail validation).
	ErrMalformed = errors.New("malformed planner decision")
	// ErrUnavailable: the planner could not be reached or refused to
	// answer (network, 429, 5xx).
	ErrUnavailable = errors.New("planner unavailable")
)

// Budgets of what a planner is shown.
const (
	// MaxImageWidth is the widest picture handed to a planner; the
	// executor observes at this width (the screen is 1080 px or more).
	MaxImageWidth = 768
	// MaxElements bounds the element list shown per step.
	MaxElements = 120
	// MaxElementText bounds an element's text and description.
	MaxElementText = 80
	// DefaultHistory is how many recent steps a planner is shown.
	DefaultHistory = 8
	// MaxWait bounds a wait decision.
	MaxWait = time.Minute
)

// Input is what a planner decides on.
type Input struct {
	RunID    string
	Goal     string
	MaxSteps int
	// StepSeq is how many actions the run has recorded.
	StepSeq int
	// Done is how many steps (actions, waits, parks) this planner's run
	// has completed since the planner was made; a scripted planner's
	// position.
	Done int
	// History is the most recent completed steps, oldest first (at most
	// the executor's bound; earlier ones are left out).
	History []Step
	// Omitted is how many earlier steps History leaves out.
	Omitted     int
	Observation Observation
}

// Observation is the budgeted view of the screen: a downscaled JPEG (at
// most MaxImageWidth wide) and the compact element list; never a
// full-size PNG.
type Observation struct {
	FrameID    string
	ScreenHash string
	// Layout is the screen's layout signature (domain.LayoutSignature):
	// what a replayed script compares, the same on any phone showing the
	// same screen.
	Layout string
	// Width and Height are the screen's size in pixels: the coordinate
	// space of actions and element bounds.
	Width, Height int
	ScreenOn      bool
	// ContentType is image/jpeg, or empty when there is no picture.
	ContentType string
	Image       []byte
	// ImageWidth and ImageHeight are the picture's size.
	ImageWidth, ImageHeight int
	Elements                []domain.Element
}

// Step kinds (Step.Kind) and decision kinds (Decision.Kind).
const (
	KindAct       = "act"
	KindNeedsUser = "needs_user"
	KindFinish    = "finish"
	KindWait      = "wait"
)

// Step is one completed step and what came back.
type Step struct {
	// Kind is act, needs_user or wait.
	Kind      string
	Action    string
	Arguments json.RawMessage
	Reason    string
	// Result is the device's answer to an action that worked (its
	// receipt's result), or a note.
	Result string
	// Error is the code and message of an action that failed; empty when
	// it worked.
	Error string
}

// Summary is the step on one line, for a model's prompt and logs.
func (s Step) Summary() string {
	var b strings.Builder
	switch s.Kind {
	case KindAct:
		fmt.Fprintf(&b, "%s %s", s.Action, compactJSON(s.Arguments))
	case KindNeedsUser:
		fmt.Fprintf(&b, "needs_user %q (a person took the device, then handed it back)", s.Reason)
	case KindWait:
		b.WriteString("wait")
	default:
		b.WriteString(s.Kind)
	}
	switch {
	case s.Error != "":
		b.WriteString(" → failed: " + s.Error)
	case s.Result != "":
		b.WriteString(" → " + s.Result)
	}
	return b.String()
}

func compactJSON(b json.RawMessage) string {
	if len(b) == 0 {
		return "{}"
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		return string(b)
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// Decision is a planner's answer.
type Decision struct {
	// Kind is act, needs_user, finish or wait.
	Kind string
	// Action and Arguments, for act, are an action of domain.ParseAction.
	Action    string
	Arguments json.RawMessage
	// Reason is why a person is needed (needs_user) or why the run ends
	// (finish).
	Reason string
	// State, for finish, is succeeded or failed; Detail says more.
	State  string
	Detail string
	// Wait, for wait, is how long to wait before looking again.
	Wait time.Duration
	// ExpectScreen is the screen hash the decision was made for (a
	// script's step), empty when any.
	ExpectScreen string
	// Guard, for a script's guarded step (domain.ScriptStep.Guarded), is
	// that step: the executor waits for its screen, acts bound to its
	// element and compares its effect, instead of the planner comparing
	// the screen once.
	Guard *domain.ScriptStep
	// Step is the 1-based index in the script of the step decided (a
	// script's steps); 0 for a model's decision. A needs-user step is
	// parked under it, so that it parks a run once.
	Step int
}

// Check refuses a decision the executor cannot carry out, wrapping
// ErrMalformed: an action domain.ParseAction refuses, a finish state other
// than succeeded or failed, a needs_user without a reason, or texts longer
// than a run accepts.
func (d Decision) Check() error {
	switch d.Kind {
	case KindAct:
		if _, err := domain.ParseAction(d.Action, d.Arguments); err != nil {
			return fmt.Errorf("%w: %s: %s", ErrMalformed, d.Action, domain.AsError(err).Message)
		}
	case KindNeedsUser:
		if strings.TrimSpace(d.Reason) == "" {
			return fmt.Errorf("%w: needs_user without a reason", ErrMalformed)
		}
	case KindFinish:
		if d.State != domain.RunStateSucceeded && d.State != domain.RunStateFailed {
			return fmt.Errorf("%w: finish state %q is not succeeded or failed", ErrMalformed, d.State)
		}
		if utf8.RuneCountInString(d.Detail) > domain.MaxRunDetailRunes {
			return fmt.Errorf("%w: finish detail is longer than %d characters", ErrMalformed, domain.MaxRunDetailRunes)
		}
	case KindWait:
		if d.Wait < 0 || d.Wait > MaxWait {
			return fmt.Errorf("%w: wait must be between 0 and %s", ErrMalformed, MaxWait)
		}
	default:
		return fmt.Errorf("%w: unknown decision %q", ErrMalformed, d.Kind)
	}
	if utf8.RuneCountInString(d.Reason) > domain.MaxRunReasonRunes {
		return fmt.Errorf("%w: reason is longer than %d characters", ErrMalformed, domain.MaxRunReasonRunes)
	}
	return nil
}
