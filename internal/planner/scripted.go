package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"phonefleet/domain"
)

// Script-only step actions: they take no action on the device.
const (
	// ScriptNeedsUser parks the run for a person; Reason says why.
	ScriptNeedsUser = "needs_user"
	// ScriptWait waits before the next step; Arguments {"ms": n}.
	ScriptWait = "wait"
)

// Reasons a scripted run ends without its script saying so.
const (
	// ReasonScriptCompleted: every step was taken and none said finish.
	ReasonScriptCompleted = "script_completed"
	// ReasonStepFailed: the device refused or failed a step's action.
	ReasonStepFailed = "step_failed"
)

// Scripted follows a script step by step. A step naming ExpectScreen is
// taken only on that screen: on another one the run ends failed with
// stale_frame. A guarded step (WaitFor set) is handed to the executor with
// its guard (Decision.Guard), which waits for its screen. A step whose action failed on the device ends the run
// failed (step_failed); a script that runs out of steps ends it
// succeeded (script_completed), so a successCheck has the final word.
type Scripted struct {
	steps []domain.ScriptStep
	start int
}

// NewScripted follows script from the step after its stepSeq-th action,
// or after step parkedStep (1-based) when that is later: a run re-claimed
// after stepSeq recorded actions goes on where it was, and a needs-user (or
// wait) step after its last action that already parked the run is not
// taken again.
func NewScripted(script domain.RunScript, stepSeq, parkedStep int) *Scripted {
	start, actions := 0, 0
	for start < len(script.Steps) && actions < stepSeq {
		if isDeviceAction(script.Steps[start]) {
			actions++
		}
		start++
	}
	start = max(start, min(parkedStep, len(script.Steps)))
	return &Scripted{steps: script.Steps, start: start}
}

func isDeviceAction(s domain.ScriptStep) bool {
	return s.Finish == "" && s.Action != ScriptNeedsUser && s.Action != ScriptWait
}

// Next implements Planner.
func (p *Scripted) Next(_ context.Context, in Input) (Decision, error) {
	if in.Done > 0 && len(in.History) > 0 {
		if last := in.History[len(in.History)-1]; last.Kind == KindAct && last.Error != "" {
			return Decision{Kind: KindFinish, State: domain.RunStateFailed, Reason: ReasonStepFailed,
				Detail: fmt.Sprintf("step %d (%s) failed: %s", p.start+in.Done, last.Action, last.Error)}, nil
		}
	}
	i := p.start + in.Done
	if i >= len(p.steps) {
		return Decision{Kind: KindFinish, State: domain.RunStateSucceeded, Reason: ReasonScriptCompleted}, nil
	}
	s := p.steps[i]
	if s.Guarded() && isDeviceAction(s) {
		d, err := stepDecision(s)
		if err != nil {
			return Decision{}, fmt.Errorf("script step %d: %w", i+1, err)
		}
		d.Guard, d.Step = &s, i+1
		return d, nil
	}
	if s.ExpectScreen != "" && s.ExpectScreen != in.Observation.Layout {
		return Decision{Kind: KindFinish, State: domain.RunStateFailed, Reason: domain.RunReasonStaleFrame,
			Detail: fmt.Sprintf("step %d expected screen %s; the device shows %s", i+1, s.ExpectScreen, in.Observation.Layout)}, nil
	}
	d, err := stepDecision(s)
	if err != nil {
		return Decision{}, fmt.Errorf("script step %d: %w", i+1, err)
	}
	d.Step = i + 1
	return d, nil
}

// stepDecision turns one script step into a checked decision.
func stepDecision(s domain.ScriptStep) (Decision, error) {
	var d Decision
	switch {
	case s.Finish != "":
		d = Decision{Kind: KindFinish, State: s.Finish, Reason: s.Reason}
	case s.Action == ScriptNeedsUser:
		d = Decision{Kind: KindNeedsUser, Reason: s.Reason}
	case s.Action == ScriptWait:
		var w struct {
			Ms int `json:"ms"`
		}
		if len(s.Arguments) > 0 {
			if err := json.Unmarshal(s.Arguments, &w); err != nil {
				return d, fmt.Errorf("%w: wait takes {\"ms\": n}", ErrMalformed)
			}
		}
		d = Decision{Kind: KindWait, Wait: time.Duration(w.Ms) * time.Millisecond}
	default:
		d = Decision{Kind: KindAct, Action: s.Action, Arguments: s.Arguments}
	}
	d.ExpectScreen = s.ExpectScreen
	return d, d.Check()
}

// ParseScript reads a run's script (StartRun.Script, a run's exported
// script) and checks every step.
func ParseScript(raw json.RawMessage) (domain.RunScript, error) {
	var s domain.RunScript
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: the script is not a script object: %v", ErrMalformed, err)
	}
	if len(s.Steps) == 0 {
		return s, fmt.Errorf("%w: the script has no steps", ErrMalformed)
	}
	for i, st := range s.Steps {
		if _, err := stepDecision(st); err != nil {
			return s, fmt.Errorf("script step %d: %w", i+1, err)
		}
	}
	return s, nil
}

// ParseSteps reads a goal written as steps, one per line, into a script
// (for demos and tests). Blank lines and lines starting with # are
// skipped. The steps:
//
//	tap X Y | tap REF          double-tap X Y       long-press X Y [MS]
//	swipe X1 Y1 X2 Y2 [MS]     type TEXT            key NAME (back, home, enter…)
//	open PACKAGE               install PACKAGE      wait [MS]
//	needs-user REASON          finish succeeded|failed [REASON]
//
// A line that is none of these, or whose arguments an action refuses,
// answers an error naming the line.
func ParseSteps(text string) (domain.RunScript, error) {
	var script domain.RunScript
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		st, err := parseLine(line)
		if err != nil {
			return domain.RunScript{}, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
		if _, err := stepDecision(st); err != nil {
			return domain.RunScript{}, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
		script.Steps = append(script.Steps, st)
	}
	if len(script.Steps) == 0 {
		return script, fmt.Errorf("%w: no steps", ErrMalformed)
	}
	script.Version = 1
	return script, nil
}

func parseLine(line string) (domain.ScriptStep, error) {
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	fields := strings.Fields(rest)
	verb = strings.ReplaceAll(strings.ToLower(verb), "_", "-")
	act := func(action string, args map[string]any) (domain.ScriptStep, error) {
		b, _ := json.Marshal(args)
		return domain.ScriptStep{Action: action, Arguments: b}, nil
	}
	ints := func(names []string, optional int) (map[string]any, error) {
		if len(fields) < len(names)-optional || len(fields) > len(names) {
			return nil, fmt.Errorf("%w: %s takes %s", ErrMalformed, verb, strings.Join(names, " "))
		}
		m := map[string]any{}
		for i, f := range fields {
			v, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%w: %s must be a whole number, not %q", ErrMalformed, names[i], f)
			}
			m[names[i]] = v
		}
		return m, nil
	}
	switch verb {
	case "tap":
		if len(fields) == 1 {
			return act(string(domain.ActionTap), map[string]any{"ref": fields[0]})
		}
		m, err := ints([]string{"x", "y"}, 0)
		if err != nil {
			return domain.ScriptStep{}, err
		}
		return act(string(domain.ActionTap), m)
	case "double-tap":
		m, err := ints([]string{"x", "y"}, 0)
		if err != nil {
			return domain.ScriptStep{}, err
		}
		return act(string(domain.ActionDoubleTap), m)
	case "long-press":
		m, err := ints([]string{"x", "y", "durationMs"}, 1)
		if err != nil {
			return domain.ScriptStep{}, err
		}
		return act(string(domain.ActionLongPress), m)
	case "swipe":
		m, err := ints([]string{"x1", "y1", "x2", "y2", "durationMs"}, 1)
		if err != nil {
			return domain.ScriptStep{}, err
		}
		return act(string(domain.ActionSwipe), m)
	case "type":
		if rest == "" {
			return domain.ScriptStep{}, fmt.Errorf("%w: type takes the text to type", ErrMalformed)
		}
		return act(string(domain.ActionTypeText), map[string]any{"text": rest})
	case "key":
		if len(fields) != 1 {
			return domain.ScriptStep{}, fmt.Errorf("%w: key takes one key name", ErrMalformed)
		}
		return act(string(domain.ActionKey), map[string]any{"key": strings.ToUpper(fields[0])})
	case "open", "open-app", "install", "install-app":
		if len(fields) != 1 {
			return domain.ScriptStep{}, fmt.Errorf("%w: %s takes one package name", ErrMalformed, verb)
		}
		a := domain.ActionOpenApp
		if strings.HasPrefix(verb, "install") {
			a = domain.ActionInstallApp
		}
		return act(string(a), map[string]any{"package": fields[0]})
	case "wait":
		m, err := ints([]string{"ms"}, 1)
		if err != nil {
			return domain.ScriptStep{}, err
		}
		if len(m) == 0 {
			m["ms"] = 1000
		}
		b, _ := json.Marshal(m)
		return domain.ScriptStep{Action: ScriptWait, Arguments: b}, nil
	case "needs-user":
		if rest == "" {
			return domain.ScriptStep{}, fmt.Errorf("%w: needs-user takes a reason", ErrMalformed)
		}
		return domain.ScriptStep{Action: ScriptNeedsUser, Reason: rest}, nil
	case "finish":
		state, reason, _ := strings.Cut(rest, " ")
		return domain.ScriptStep{Finish: state, Reason: strings.TrimSpace(reason)}, nil
	}
	return domain.ScriptStep{}, fmt.Errorf("%w: unknown step %q", ErrMalformed, verb)
}
