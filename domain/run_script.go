package domain

import (
	"bytes"
	"encoding/json"
	"errors"
)

// RunScript is a run's steps as a script: each step's action and the
// screen it was decided on.
type RunScript struct {
	Version int          `json:"version"`
	Goal    string       `json:"goal,omitempty"`
	Steps   []ScriptStep `json:"steps"`
}

// ScriptStep is one step of a script. ExpectScreen, when set, is the
// layout signature (LayoutSignature) of the screen the step was decided
// on: a replay that sees another screen stops with stale_frame — unless
// the step is guarded (WaitFor set), when the replay waits for WaitFor
// instead, acts bound to Element and compares the effect with Effect (see
// RunDiverged).
type ScriptStep struct {
	Action       string          `json:"action,omitempty"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
	ExpectScreen string          `json:"expectScreen,omitempty"`
	// FrameID is the frame the original step was decided on (shown beside
	// the replay's when the replay diverges there).
	FrameID string       `json:"frameId,omitempty"`
	WaitFor *ScreenGuard `json:"waitFor,omitempty"`
	// Element is the element a tap acted on; the replay taps it wherever
	// it is on its phone.
	Element *ElementAnchor `json:"element,omitempty"`
	// Effect is the original action's effect (changed, unchanged); unknown
	// or empty is not compared.
	Effect string `json:"effect,omitempty"`
	// Finish, instead of an action, ends the run (succeeded or failed).
	Finish string `json:"finish,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Script bounds.
const maxScriptSteps = 1000

// ParseRunScript reads and checks a script: version 1, at most 1000
// steps, each an action the fleet accepts (ParseAction) or a finish.
// Errors: invalid_argument naming the step.
func ParseRunScript(raw json.RawMessage) (RunScript, error) {
	var s RunScript
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return RunScript{}, Errorf(CodeInvalidArgument, "script is not a valid script object: %v", err)
	}
	if s.Version == 0 {
		s.Version = 1
	}
	if s.Version != 1 {
		return RunScript{}, Errorf(CodeInvalidArgument, "script.version must be 1")
	}
	if len(s.Steps) == 0 || len(s.Steps) > maxScriptSteps {
		return RunScript{}, Errorf(CodeInvalidArgument, "script.steps must hold 1 to %d steps", maxScriptSteps)
	}
	for i, st := range s.Steps {
		if st.Finish != "" {
			if st.Action != "" || (st.Finish != RunStateSucceeded && st.Finish != RunStateFailed) {
				return RunScript{}, Errorf(CodeInvalidArgument, "script.steps[%d]: finish must be succeeded or failed, without an action", i)
			}
			continue
		}
		if err := st.checkGuard(); err != nil {
			return RunScript{}, Errorf(CodeInvalidArgument, "script.steps[%d]: %s", i, AsError(err).Message)
		}
		if _, err := ParseAction(st.Action, st.Arguments); err != nil {
			var de *Error
			if errors.As(err, &de) {
				return RunScript{}, Errorf(CodeInvalidArgument, "script.steps[%d]: %s", i, de.Message)
			}
			return RunScript{}, err
		}
	}
	return s, nil
}

// Guarded reports whether a replay waits for the step's screen.
func (s ScriptStep) Guarded() bool { return s.WaitFor != nil }

// checkGuard checks the parts a guarded step adds.
func (s ScriptStep) checkGuard() error {
	if err := s.WaitFor.check(); err != nil {
		return err
	}
	if err := s.Element.check(); err != nil {
		return err
	}
	if s.Element != nil && s.Action != string(ActionTap) {
		return Errorf(CodeInvalidArgument, "element binds a tap only")
	}
	switch s.Effect {
	case "", EffectChanged, EffectUnchanged, EffectUnknown:
	default:
		return Errorf(CodeInvalidArgument, "effect must be changed, unchanged or unknown")
	}
	if len(s.FrameID) > 64 {
		return Errorf(CodeInvalidArgument, "frameId is longer than 64 characters")
	}
	return nil
}
