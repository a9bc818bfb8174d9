package service

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// offers reports whether a model request offers the tool.
func (r modelRequest) offers(tool string) bool {
	for _, t := range r.Tools {
		if t.Function.Name == tool {
			return true
		}
	}
	return false
}

// TestCopilotWaitsAndStartsARun: the copilot's wait_for goes through the
// fleet's WaitFor (a stable screen is met and names the frame it saw; an
// element that never shows is answered not met, which is no failure), and
// its start_run starts a run through the application's StartRun as the
// person (the run's starter is the person, on the thread's phone; the
// run's token is not given to the model).
func TestCopilotWaitsAndStartsARun(t *testing.T) {
	s := startCopilotService(t)
	s.model.play(func(req modelRequest, w *modelStream) {
		if !req.offers("start_run") {
			// The run's own planner asks the same provider: it is done.
			w.text("done")
			w.done(1, 1)
			return
		}
		switch req.toolResults() {
		case 0:
			if !req.offers("wait_for") {
				t.Errorf("the copilot offers no wait_for")
			}
			w.call("wait_for", `{"until":"stable","stableMs":100,"timeoutMs":5000}`)
		case 1:
			if res := req.lastToolResult(t); res["met"] != true || !strings.HasPrefix(fmt.Sprint(res["frameId"]), "frm_") {
				t.Errorf("a stable wait answered %v; want met, with its frame", res)
			}
			w.call("wait_for", `{"text":"Nothing shows this text","timeoutMs":1}`)
		case 2:
			if res := req.lastToolResult(t); res["met"] != false {
				t.Errorf("a wait for absent text answered %v; want not met", res)
			}
			w.call("start_run", `{"goal":"press the volume keys","maxSteps":3}`)
		default:
			res := req.lastToolResult(t)
			if !strings.HasPrefix(fmt.Sprint(res["runId"]), "run_") || res["vrxBaseUrl"] != nil {
				t.Errorf("start_run answered %v; want the run's id, without its token", res)
			}
			w.text("A run is on it.")
		}
		w.done(10, 2)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"let a run press the volume keys"}`, http.StatusAccepted)
	thread := s.settled(posted["threadId"].(string))
	if head := thread["thread"].(map[string]any); head["lastOutcome"] != "completed" {
		t.Fatalf("thread %v; want completed\n%v", head, thread["items"])
	}
	calls := items(thread, "tool_call")
	var tools []string
	for _, c := range calls {
		tools = append(tools, c["tool"].(string)+":"+c["state"].(string))
	}
	if want := []string{"wait_for:succeeded", "wait_for:succeeded", "start_run:succeeded"}; !slices.Equal(tools, want) {
		t.Fatalf("tool calls %v; want %v", tools, want)
	}
	if r := calls[0]["result"].(map[string]any); r["met"] != true || !strings.HasPrefix(fmt.Sprint(r["frameId"]), "frm_") {
		t.Errorf("first wait's result %v; want met on a frame", r)
	}
	if r := calls[1]["result"].(map[string]any); r["met"] != false {
		t.Errorf("second wait's result %v; want not met", r)
	}
	runID := fmt.Sprint(calls[2]["result"].(map[string]any)["runId"])
	run := s.call(s.person, "GET", "/v1/runs/"+runID, "", http.StatusOK)
	if run["deviceId"] != s.device || run["goal"] != "press the volume keys" || run["starter"].(map[string]any)["userId"] != "user_a" {
		t.Errorf("run %v; want on the thread's phone, the goal, started by user_a", run)
	}
}
