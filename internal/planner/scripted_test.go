package planner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
)

func TestParseSteps(t *testing.T) {
	tests := []struct {
		name string
		line string
		want domain.ScriptStep
	}{
		{"tap", "tap 540 1200", domain.ScriptStep{Action: "tap", Arguments: json.RawMessage(`{"x":540,"y":1200}`)}},
		{"tap ref", "tap e12", domain.ScriptStep{Action: "tap", Arguments: json.RawMessage(`{"ref":"e12"}`)}},
		{"double tap", "double-tap 1 2", domain.ScriptStep{Action: "double_tap", Arguments: json.RawMessage(`{"x":1,"y":2}`)}},
		{"long press with duration", "long_press 1 2 900", domain.ScriptStep{Action: "long_press", Arguments: json.RawMessage(`{"durationMs":900,"x":1,"y":2}`)}},
		{"swipe", "swipe 500 1500 500 500", domain.ScriptStep{Action: "swipe", Arguments: json.RawMessage(`{"x1":500,"x2":500,"y1":1500,"y2":500}`)}},
		{"type keeps spaces", "type hello  world", domain.ScriptStep{Action: "type_text", Arguments: json.RawMessage(`{"text":"hello  world"}`)}},
		{"key", "key back", domain.ScriptStep{Action: "key", Arguments: json.RawMessage(`{"key":"BACK"}`)}},
		{"open", "open com.example.notes", domain.ScriptStep{Action: "open_app", Arguments: json.RawMessage(`{"package":"com.example.notes"}`)}},
		{"install", "install com.example.counter", domain.ScriptStep{Action: "install_app", Arguments: json.RawMessage(`{"package":"com.example.counter"}`)}},
		{"wait", "wait", domain.ScriptStep{Action: "wait", Arguments: json.RawMessage(`{"ms":1000}`)}},
		{"wait ms", "wait 250", domain.ScriptStep{Action: "wait", Arguments: json.RawMessage(`{"ms":250}`)}},
		{"needs user", "needs-user log in please", domain.ScriptStep{Action: "needs_user", Reason: "log in please"}},
		{"finish", "finish succeeded", domain.ScriptStep{Finish: "succeeded"}},
		{"finish with reason", "finish failed no_network", domain.ScriptStep{Finish: "failed", Reason: "no_network"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSteps("# a comment\n\n  " + tt.line + "  \n")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Steps) != 1 {
				t.Fatalf("got %d steps; want 1", len(got.Steps))
			}
			g, w := got.Steps[0], tt.want
			if g.Action != w.Action || g.Finish != w.Finish || g.Reason != w.Reason || string(g.Arguments) != string(w.Arguments) {
				t.Errorf("got %+v (%s); want %+v (%s)", g, g.Arguments, w, w.Arguments)
			}
		})
	}
}

func TestParseStepsRefusesMalformedLines(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"unknown verb", "tap 1 2\nfly 3 4", `line 2 "fly 3 4"`},
		{"not a number", "tap 540 abc", "y must be a whole number"},
		{"too few coordinates", "swipe 1 2 3", "swipe takes"},
		{"too many coordinates", "tap 1 2 3", "tap takes"},
		{"negative coordinate", "tap -1 5", "between 0"},
		{"type without text", "type", "type takes"},
		{"key with two names", "key back home", "one key name"},
		{"bad finish state", "finish maybe", "not succeeded or failed"},
		{"needs user without reason", "needs-user", "takes a reason"},
		{"wait too long", "wait 600000", "wait must be"},
		{"empty", "\n# only a comment\n", "no steps"},
		{"prose", "Open the settings and turn on wifi", "open takes one package name"},
		{"prose without a verb", "Please turn on wifi", "unknown step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSteps(tt.text)
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want a malformed-step error containing %q", err, tt.want)
			}
		})
	}
}

func TestScriptedPlanner(t *testing.T) {
	script, err := ParseSteps("open com.example.notes\nwait 10\nneeds-user sign in\ntap 10 20\nfinish succeeded done")
	if err != nil {
		t.Fatal(err)
	}
	script.Steps[3].ExpectScreen = "screen-b"
	obs := func(hash string) Observation { return Observation{Layout: hash} }
	ok := Step{Kind: KindAct, Result: "ok"}
	tests := []struct {
		name    string
		stepSeq int // recorded actions when the planner was made
		parked  int // the script step that last parked the run
		in      Input
		want    Decision
	}{
		{"first step", 0, 0, Input{Observation: obs("a")},
			Decision{Kind: KindAct, Action: "open_app", Arguments: json.RawMessage(`{"package":"com.example.notes"}`)}},
		{"wait", 0, 0, Input{Done: 1, History: []Step{ok}, Observation: obs("a")}, Decision{Kind: KindWait, Wait: 10 * time.Millisecond}},
		{"needs user", 0, 0, Input{Done: 2, Observation: obs("a")}, Decision{Kind: KindNeedsUser, Reason: "sign in"}},
		{"expected screen", 0, 0, Input{Done: 3, Observation: obs("screen-b")},
			Decision{Kind: KindAct, Action: "tap", Arguments: json.RawMessage(`{"x":10,"y":20}`), ExpectScreen: "screen-b"}},
		{"another screen is stale", 0, 0, Input{Done: 3, Observation: obs("screen-c")},
			Decision{Kind: KindFinish, State: "failed", Reason: domain.RunReasonStaleFrame}},
		{"finish", 0, 0, Input{Done: 4, History: []Step{ok}, Observation: obs("x")}, Decision{Kind: KindFinish, State: "succeeded", Reason: "done"}},
		{"past the end", 0, 0, Input{Done: 5, Observation: obs("x")}, Decision{Kind: KindFinish, State: "succeeded", Reason: ReasonScriptCompleted}},
		{"a failed action ends the run", 0, 0, Input{Done: 1, History: []Step{{Kind: KindAct, Action: "open_app", Error: "invalid_argument: no such app"}}, Observation: obs("a")},
			Decision{Kind: KindFinish, State: "failed", Reason: ReasonStepFailed}},
		{"re-made after one recorded action goes on after it", 1, 0, Input{Observation: obs("a")}, Decision{Kind: KindWait, Wait: 10 * time.Millisecond}},
		{"re-made after two recorded actions", 2, 0, Input{Observation: obs("a")}, Decision{Kind: KindFinish, State: "succeeded", Reason: "done"}},
		{"re-made after its parked step goes on after it", 1, 3, Input{Observation: obs("screen-b")},
			Decision{Kind: KindAct, Action: "tap", Arguments: json.RawMessage(`{"x":10,"y":20}`), ExpectScreen: "screen-b", Step: 4}},
		{"an earlier parked step changes nothing", 2, 3, Input{Observation: obs("a")}, Decision{Kind: KindFinish, State: "succeeded", Reason: "done"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NewScripted(script, tt.stepSeq, tt.parked).Next(context.Background(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			w := tt.want
			if got.Kind != w.Kind || got.Action != w.Action || string(got.Arguments) != string(w.Arguments) || got.State != w.State ||
				got.Reason != w.Reason || got.Wait != w.Wait || got.ExpectScreen != w.ExpectScreen || w.Step != 0 && got.Step != w.Step {
				t.Errorf("got %+v; want %+v", got, w)
			}
			if err := got.Check(); err != nil {
				t.Errorf("got a decision failing its check: %v", err)
			}
		})
	}
}

func TestParseScript(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
	}{
		{"exported script", `{"version":1,"goal":"g","steps":[{"action":"tap","arguments":{"x":1,"y":2},"expectScreen":"h"},{"finish":"succeeded"}]}`, ""},
		{"not an object", `[1,2]`, "not a script"},
		{"unknown field", `{"steps":[{"action":"tap","arguments":{"x":1,"y":2}}],"extra":1}`, "not a script"},
		{"no steps", `{"steps":[]}`, "no steps"},
		{"bad action", `{"steps":[{"action":"teleport"}]}`, "step 1"},
		{"bad arguments", `{"steps":[{"action":"tap","arguments":{"x":"a","y":2}}]}`, "step 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScript(json.RawMessage(tt.raw))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v; want the script read", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
