package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// The run routes only translate: these tests run them over an application
// object whose run handlers are fakes that record the request they got and
// answer what the test chose, and check every answer against the served
// OpenAPI document. What the handlers themselves decide (scopes, tenancy,
// state rules) is proven against the real database by the commands tests
// and internal/app's tenancy walk.

var (
	runID      = "run_" + strings.Repeat("a", 32)
	agentRunID = "arun_" + strings.Repeat("b", 32)
	runDevice  = "dev_" + strings.Repeat("c", 32)
	runAt      = time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.UTC)
)

// runPrincipals are the callers of the run route tests, chosen per request
// with the X-Test-Principal header.
var runPrincipals = map[string]domain.Auth{
	"key": {OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1",
		Scopes: []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}},
	"app": {OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_cat", ClientID: "client_x",
		Scopes: []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}},
}

type runAuthenticator struct{}

func (runAuthenticator) Authenticate(r *http.Request) (domain.Auth, error) {
	a, ok := runPrincipals[r.Header.Get("X-Test-Principal")]
	if !ok {
		return domain.Auth{}, domain.Errorf(domain.CodeUnauthorized, "no such test principal").With("reason", "invalid_token")
	}
	return a, nil
}

// runView is a running external run as the read model shows it.
func runView() projections.RunView {
	return projections.RunView{RunID: runID, AgentRunID: agentRunID, DeviceID: runDevice, Goal: "open settings",
		Executor: domain.ExecutorExternal, State: domain.RunStateRunning, MaxSteps: 50, StepSeq: 2,
		DeadlineAt: runAt.Add(30 * time.Minute), Starter: domain.ReceiptActor{APIKeyID: "key_1"},
		CreatedAt: runAt, UpdatedAt: runAt}
}

// runFake is the application's run side: got holds the last request a
// handler received, err (when set) is what every handler answers.
type runFake struct {
	got    any
	err    error
	view   projections.RunView
	page   projections.RunPage
	frames projections.RunFramePage
	script domain.RunScript
	div    runs.RunDivergence
}

// runEnv is a server whose run routes run on a runFake.
type runEnv struct {
	t    *testing.T
	s    *Server
	v    *apitest.Validator
	fake *runFake
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	f := &runFake{view: runView(), script: domain.RunScript{Version: 1}, div: runs.RunDivergence{Run: runView()}}
	app := commands.NewApplication(commands.Capabilities{})
	view := func(ctx context.Context, c any) (projections.RunView, error) {
		f.got = c
		if f.err != nil {
			return projections.RunView{}, f.err
		}
		return f.view, nil
	}
	app.Runs.StartRun = cqrs.Fake[runs.StartRun, runs.StartedRun](func(ctx context.Context, c runs.StartRun) (runs.StartedRun, error) {
		f.got = c
		if f.err != nil {
			return runs.StartedRun{}, f.err
		}
		return runs.StartedRun{Run: f.view, VrxBaseURL: "http://phonefleet.test/vrx/vrx_secret"}, nil
	})
	app.Runs.PauseRun = cqrs.Fake[runs.PauseRun, projections.RunView](func(ctx context.Context, c runs.PauseRun) (projections.RunView, error) {
		return view(ctx, c)
	})
	app.Runs.ResumeRun = cqrs.Fake[runs.ResumeRun, projections.RunView](func(ctx context.Context, c runs.ResumeRun) (projections.RunView, error) {
		return view(ctx, c)
	})
	app.Runs.CancelRun = cqrs.Fake[runs.CancelRun, projections.RunView](func(ctx context.Context, c runs.CancelRun) (projections.RunView, error) {
		return view(ctx, c)
	})
	app.Runs.GetRun = cqrs.Fake[runs.GetRun, projections.RunView](func(ctx context.Context, c runs.GetRun) (projections.RunView, error) {
		return view(ctx, c)
	})
	app.Runs.ListRuns = cqrs.Fake[runs.ListRuns, projections.RunPage](func(ctx context.Context, c runs.ListRuns) (projections.RunPage, error) {
		f.got = c
		return f.page, f.err
	})
	app.Runs.ListRunFrames = cqrs.Fake[runs.ListRunFrames, projections.RunFramePage](func(ctx context.Context, c runs.ListRunFrames) (projections.RunFramePage, error) {
		f.got = c
		return f.frames, f.err
	})
	app.Runs.GetRunScript = cqrs.Fake[runs.GetRunScript, domain.RunScript](func(ctx context.Context, c runs.GetRunScript) (domain.RunScript, error) {
		f.got = c
		return f.script, f.err
	})
	app.Runs.GetRunDivergence = cqrs.Fake[runs.GetRunDivergence, runs.RunDivergence](func(ctx context.Context, c runs.GetRunDivergence) (runs.RunDivergence, error) {
		f.got = c
		return f.div, f.err
	})
	s, _ := newTestServer(t, Deps{Auth: runAuthenticator{}, App: &app})
	return &runEnv{t: t, s: s, v: apitest.FromHandler(t, s.Handler()), fake: f}
}

// do sends one request as principal, checks the answer against the served
// document and returns the status and the decoded body.
func (e *runEnv) do(principal, method, path, body string) (int, map[string]any) {
	e.t.Helper()
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, path, nil)
	} else {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
	}
	req.Header.Set("X-Test-Principal", principal)
	resp, raw := apitest.Do(e.t, e.s.Handler(), req)
	e.v.Check(e.t, req, resp, raw)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatalf("%s %s: body is not JSON: %v\n%s", method, path, err, raw)
	}
	return resp.StatusCode, out
}

func TestStartRunTranslates(t *testing.T) {
	e := newRunEnv(t)
	t.Run("every field reaches the command", func(t *testing.T) {
		status, body := e.do("key", "POST", "/v1/runs", `{"deviceId":"`+runDevice+`","goal":"open settings","maxSteps":7,`+
			`"deadlineSeconds":120,"executor":"external","successCheck":{"text":"Settings","app":"com.android.settings"},`+
			`"script":{"version":1,"steps":[{"action":"key","arguments":{"key":"HOME"}}]}}`)
		if status != http.StatusCreated {
			t.Fatalf("got %d %v; want 201", status, body)
		}
		got := e.fake.got.(runs.StartRun)
		if got.Auth.APIKeyID != "key_1" || got.DeviceID != runDevice || got.Goal != "open settings" || got.MaxSteps != 7 ||
			got.DeadlineSeconds != 120 || got.Executor != "external" || got.ScheduleID != "" {
			t.Errorf("got command %+v; want the body's fields and the caller's auth", got)
		}
		if got.SuccessCheck == nil || *got.SuccessCheck != (domain.SuccessCheck{Text: "Settings", App: "com.android.settings"}) {
			t.Errorf("got successCheck %+v; want text and app", got.SuccessCheck)
		}
		if string(got.Script) != `{"version":1,"steps":[{"action":"key","arguments":{"key":"HOME"}}]}` {
			t.Errorf("got script %s; want the body's object unchanged", got.Script)
		}
		if body["vrxBaseUrl"] != "http://phonefleet.test/vrx/vrx_secret" || body["runId"] != runID || body["agentRunId"] != agentRunID ||
			body["state"] != "running" || body["stepSeq"] != float64(2) || body["createdAt"] != "2026-03-04T05:06:07.891234Z" {
			t.Errorf("got %v; want the run with vrxBaseUrl", body)
		}
	})
	t.Run("defaults stay the command's", func(t *testing.T) {
		status, body := e.do("key", "POST", "/v1/runs", `{"goal":"g","script":null}`)
		got := e.fake.got.(runs.StartRun)
		if status != http.StatusCreated || got.DeviceID != "" || got.MaxSteps != 0 || got.DeadlineSeconds != 0 || got.Executor != "" ||
			got.SuccessCheck != nil || got.Script != nil {
			t.Fatalf("got %d %v and command %+v; want 201 and every omitted field zero", status, body, got)
		}
	})
	for _, tc := range []struct{ name, body string }{
		{"empty body", ``},
		{"not JSON", `{"goal":`},
		{"maxSteps not a number", `{"goal":"g","maxSteps":"many"}`},
		{"script not an object", `{"goal":"g","script":[1,2]}`},
		{"successCheck not an object", `{"goal":"g","successCheck":"Settings"}`},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			e.fake.got = nil
			status, body := e.do("key", "POST", "/v1/runs", tc.body)
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" || e.fake.got != nil {
				t.Fatalf("got %d %v (command called: %v); want 400 invalid_argument before any command", status, body, e.fake.got != nil)
			}
		})
	}
	t.Run("a leased device is a 409", func(t *testing.T) {
		e.fake.err = domain.Errorf(domain.CodeDeviceUnavailable, "device is leased").With("reason", "already_leased")
		defer func() { e.fake.err = nil }()
		status, body := e.do("key", "POST", "/v1/runs", `{"goal":"g","deviceId":"`+runDevice+`"}`)
		if status != http.StatusConflict || errCode(body) != "device_unavailable" || errReason(body) != "already_leased" {
			t.Fatalf("got %d %v; want 409 device_unavailable already_leased", status, body)
		}
	})
}

func TestRunShapes(t *testing.T) {
	e := newRunEnv(t)
	parkAt, endAt := runAt.Add(time.Hour), runAt.Add(2*time.Hour)
	reason, sched := "deadline_exceeded", "sch_1"
	tests := []struct {
		name string
		view func(v *projections.RunView)
		want map[string]any
	}{
		{"running: every optional value null", func(*projections.RunView) {}, map[string]any{
			"endedAt": nil, "reason": nil, "detail": nil, "scheduleId": nil, "successCheck": nil, "parkedReason": nil,
			"parkDeadlineAt": nil, "hasScript": false, "executor": "external"}},
		{"parked: why and until when", func(v *projections.RunView) {
			v.State, v.ParkReason, v.ParkDeadlineAt = domain.RunStateAwaitingUser, "captcha", &parkAt
		}, map[string]any{"state": "awaiting_user", "parkedReason": "captcha", "parkDeadlineAt": "2026-03-04T06:06:07.891234Z"}},
		{"ended by its deadline, from a schedule", func(v *projections.RunView) {
			v.State, v.Reason, v.EndedAt, v.ScheduleID = domain.RunStateFailed, &reason, &endAt, sched
			v.ParkReason = "stale" // not shown once the run is not parked
		}, map[string]any{"state": "failed", "reason": "deadline_exceeded", "endedAt": "2026-03-04T07:06:07.891234Z",
			"scheduleId": "sch_1", "parkedReason": nil}},
		{"started by a person with a check and a script", func(v *projections.RunView) {
			v.Starter, v.SuccessCheck, v.HasScript = domain.ReceiptActor{UserID: "u_ann"}, &domain.SuccessCheck{ElementID: "title"}, true
		}, map[string]any{"hasScript": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.view = runView()
			tt.view(&e.fake.view)
			status, body := e.do("key", "GET", "/v1/runs/"+runID, "")
			if status != http.StatusOK {
				t.Fatalf("got %d %v; want 200", status, body)
			}
			if len(body) != 20 {
				t.Errorf("got %d members; want all 20 always present: %v", len(body), body)
			}
			for k, want := range tt.want {
				if got, ok := body[k]; !ok || got != want {
					t.Errorf("got %s = %v (present %v); want %v", k, got, ok, want)
				}
			}
		})
	}
	t.Run("starter is userId or apiKeyId", func(t *testing.T) {
		e.fake.view = runView()
		e.fake.view.Starter = domain.ReceiptActor{UserID: "u_ann"}
		_, body := e.do("key", "GET", "/v1/runs/"+agentRunID, "")
		if s := body["starter"].(map[string]any); len(s) != 1 || s["userId"] != "u_ann" {
			t.Errorf("got starter %v; want {userId: u_ann}", s)
		}
		if got := e.fake.got.(runs.GetRun); got.RunID != agentRunID {
			t.Errorf("got RunID %q; want the agentRunId of the path, passed as is", got.RunID)
		}
	})
}

func TestRunTransitionsTranslate(t *testing.T) {
	e := newRunEnv(t)
	for _, verb := range []string{"pause", "resume", "cancel"} {
		t.Run(verb, func(t *testing.T) {
			e.fake.view = runView()
			e.fake.view.State = map[string]string{"pause": "paused", "resume": "running", "cancel": "cancelled"}[verb]
			status, body := e.do("key", "POST", "/v1/runs/"+runID+"/"+verb, `{"ignored":true}`)
			if status != http.StatusOK || body["state"] != e.fake.view.State {
				t.Fatalf("got %d %v; want 200 and the run", status, body)
			}
			var ref runs.RunRef
			switch c := e.fake.got.(type) {
			case runs.PauseRun:
				ref = runs.RunRef(c)
			case runs.ResumeRun:
				ref = runs.RunRef(c)
			case runs.CancelRun:
				ref = runs.RunRef(c)
			}
			wantType := map[string]string{"pause": "runs.PauseRun", "resume": "runs.ResumeRun", "cancel": "runs.CancelRun"}[verb]
			if fmt.Sprintf("%T", e.fake.got) != wantType || ref.RunID != runID || ref.Auth.APIKeyID != "key_1" {
				t.Errorf("got %T %+v; want %s of %s", e.fake.got, e.fake.got, wantType, runID)
			}
		})
	}
}

// TestRunErrors renders each refusal a run handler can answer on every
// route it can answer it on, with the status the document gives it.
func TestRunErrors(t *testing.T) {
	e := newRunEnv(t)
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/runs/" + runID, ""},
		{"POST", "/v1/runs/" + runID + "/pause", ""},
		{"POST", "/v1/runs/" + runID + "/resume", ""},
		{"POST", "/v1/runs/" + runID + "/cancel", ""},
		{"GET", "/v1/runs/" + runID + "/frames", ""},
		{"GET", "/v1/runs/" + runID + "/script", ""},
		{"GET", "/v1/runs/" + runID + "/divergence", ""},
	}
	errs := []struct {
		name   string
		err    error
		status int
		code   string
		routes func(method, path string) bool
	}{
		{"run_not_found", domain.ErrRunNotFound(runID), http.StatusNotFound, "run_not_found", func(string, string) bool { return true }},
		{"missing scope", domain.Auth{}.Require(domain.ScopeRunsStart), http.StatusForbidden, "permission_denied",
			func(string, string) bool { return true }},
		{"wrong state", domain.Errorf(domain.CodeInvalidArgument, "run is failed").With("state", "failed"), http.StatusBadRequest,
			"invalid_argument", func(m, _ string) bool { return m == "POST" }},
		{"resume onto a held device", domain.ErrDeviceNotFound(runDevice), http.StatusConflict, "device_unavailable",
			func(_, p string) bool { return strings.HasSuffix(p, "/resume") }},
		{"not served", domain.Errorf(domain.CodeServiceUnavailable, "runs are not served"), http.StatusServiceUnavailable,
			"service_unavailable", func(string, string) bool { return true }},
	}
	for _, tc := range errs {
		for _, r := range routes {
			if !tc.routes(r.method, r.path) {
				continue
			}
			t.Run(tc.name+"/"+r.method+" "+r.path[len("/v1/runs/"+runID):], func(t *testing.T) {
				e.fake.err = tc.err
				defer func() { e.fake.err = nil }()
				status, body := e.do("key", r.method, r.path, r.body)
				if status != tc.status || errCode(body) != tc.code {
					t.Fatalf("got %d %v; want %d %s", status, body, tc.status, tc.code)
				}
			})
		}
	}
	t.Run("permission_denied names the scope on the list", func(t *testing.T) {
		e.fake.err = domain.Auth{}.Require(domain.ScopeDevicesAct)
		defer func() { e.fake.err = nil }()
		status, body := e.do("key", "GET", "/v1/runs", "")
		if status != http.StatusForbidden || body["error"].(map[string]any)["scope"] != "devices:act" {
			t.Fatalf("got %d %v; want 403 naming devices:act", status, body)
		}
	})
}

func TestListRunsTranslates(t *testing.T) {
	e := newRunEnv(t)
	t.Run("filters and cursor reach the query", func(t *testing.T) {
		e.fake.page = projections.RunPage{Runs: []projections.RunView{runView()}, NextBefore: runID}
		status, body := e.do("key", "GET", "/v1/runs?state=paused&deviceId="+runDevice+"&starterApiKeyId=key_9&before="+runID+"&limit=5", "")
		if status != http.StatusOK || body["nextBefore"] != runID || len(body["runs"].([]any)) != 1 {
			t.Fatalf("got %d %v; want 200, one run and nextBefore", status, body)
		}
		got := e.fake.got.(runs.ListRuns)
		want := projections.RunQuery{State: "paused", DeviceID: runDevice, StarterKeyID: "key_9", Before: runID, Limit: 5}
		if got.RunQuery != want || got.Auth.APIKeyID != "key_1" {
			t.Errorf("got %+v; want %+v", got.RunQuery, want)
		}
	})
	t.Run("a person's runs", func(t *testing.T) {
		e.do("key", "GET", "/v1/runs?starterUserId=u_ann", "")
		if got := e.fake.got.(runs.ListRuns); got.StarterUserID != "u_ann" || got.StarterKeyID != "" {
			t.Errorf("got %+v; want starterUserId u_ann only", got.RunQuery)
		}
	})
	t.Run("last page: runs [] and no cursor", func(t *testing.T) {
		e.fake.page = projections.RunPage{}
		status, body := e.do("key", "GET", "/v1/runs", "")
		if _, has := body["nextBefore"]; status != http.StatusOK || has || body["runs"] == nil || len(body["runs"].([]any)) != 0 {
			t.Fatalf("got %d %v; want 200 {runs: []}", status, body)
		}
	})
	for _, tc := range []struct{ name, query string }{
		{"unknown state", "state=done"},
		{"both starters", "starterUserId=u&starterApiKeyId=k"},
		{"limit not a number", "limit=ten"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			e.fake.got = nil
			status, body := e.do("key", "GET", "/v1/runs?"+tc.query, "")
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" || e.fake.got != nil {
				t.Fatalf("got %d %v; want 400 invalid_argument before any query", status, body)
			}
		})
	}
}

func TestRunFramesAndScriptTranslate(t *testing.T) {
	e := newRunEnv(t)
	frm := func(c string) string { return "frm_" + strings.Repeat(c, 32) }
	t.Run("frames page", func(t *testing.T) {
		e.fake.frames = projections.RunFramePage{NextAfter: 42, Frames: []projections.RunFrame{
			{FrameID: frm("1"), Kind: "observed", At: runAt, Position: 40},
			{FrameID: frm("2"), Kind: "before", ActionID: "act_1", At: runAt, Position: 42},
			{FrameID: frm("3"), Kind: "after", ActionID: "act_1", At: runAt, Position: 42},
		}}
		status, body := e.do("key", "GET", "/v1/runs/"+agentRunID+"/frames?after=17&limit=3", "")
		if status != http.StatusOK || body["nextAfter"] != "42" {
			t.Fatalf("got %d %v; want 200 with nextAfter 42", status, body)
		}
		frames := body["frames"].([]any)
		first, second := frames[0].(map[string]any), frames[1].(map[string]any)
		if len(frames) != 3 || first["actionId"] != nil || first["kind"] != "observed" || second["actionId"] != "act_1" ||
			first["at"] != "2026-03-04T05:06:07.891234Z" {
			t.Errorf("got %v; want three frames, the observation without an action", frames)
		}
		got := e.fake.got.(runs.ListRunFrames)
		if got.RunID != agentRunID || got.After != 17 || got.Limit != 3 {
			t.Errorf("got %+v; want run %s after 17 limit 3", got, agentRunID)
		}
	})
	t.Run("last frames page", func(t *testing.T) {
		e.fake.frames = projections.RunFramePage{}
		status, body := e.do("key", "GET", "/v1/runs/"+runID+"/frames", "")
		if _, has := body["nextAfter"]; status != http.StatusOK || has || len(body["frames"].([]any)) != 0 {
			t.Fatalf("got %d %v; want 200 {frames: []}", status, body)
		}
		if got := e.fake.got.(runs.ListRunFrames); got.After != 0 || got.Limit != 50 {
			t.Errorf("got %+v; want the first page at the default size", got.RunFrameQuery)
		}
	})
	for _, q := range []string{"after=-1", "after=x", "limit=all"} {
		t.Run("refused: "+q, func(t *testing.T) {
			e.fake.got = nil
			status, body := e.do("key", "GET", "/v1/runs/"+runID+"/frames?"+q, "")
			if status != http.StatusBadRequest || errCode(body) != "invalid_argument" || e.fake.got != nil {
				t.Fatalf("got %d %v; want 400 invalid_argument", status, body)
			}
		})
	}
	t.Run("script", func(t *testing.T) {
		e.fake.script = domain.RunScript{Version: 1, Goal: "open settings", Steps: []domain.ScriptStep{
			{Action: "tap", Arguments: json.RawMessage(`{"x":1,"y":2}`), ExpectScreen: "abc"},
			{Finish: "succeeded", Reason: "done"},
		}}
		status, body := e.do("key", "GET", "/v1/runs/"+runID+"/script", "")
		steps, _ := body["steps"].([]any)
		if status != http.StatusOK || body["version"] != float64(1) || len(steps) != 2 || steps[0].(map[string]any)["expectScreen"] != "abc" {
			t.Fatalf("got %d %v; want the script", status, body)
		}
		// The answer is what POST /v1/runs takes as script.
		raw, _ := json.Marshal(body)
		e.do("key", "POST", "/v1/runs", `{"goal":"replay","script":`+string(raw)+`}`)
		var replayed domain.RunScript
		if err := json.Unmarshal(e.fake.got.(runs.StartRun).Script, &replayed); err != nil || len(replayed.Steps) != 2 ||
			replayed.Steps[0].ExpectScreen != "abc" {
			t.Errorf("got replayed script %+v (%v); want the exported one", replayed, err)
		}
	})
	t.Run("divergence", func(t *testing.T) {
		at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
		e.fake.div = runs.RunDivergence{Run: runView(), Replay: true, Steps: 3, Divergence: &domain.RunDiverged{Step: 3, Action: "tap",
			Reason: domain.DivergedEffectDiffers, Detail: "the original action's effect was changed; the replay's is unchanged",
			ExpectedFrame: "frm_a", ActualFrame: "frm_b", ExpectedEffect: "changed", ActualEffect: "unchanged", At: at}}
		status, body := e.do("key", "GET", "/v1/runs/"+runID+"/divergence", "")
		want := map[string]any{"runId": runID, "state": "running", "replay": true, "steps": float64(3), "divergence": map[string]any{
			"step": float64(3), "action": "tap", "reason": "effect_differs", "detail": "the original action's effect was changed; the replay's is unchanged",
			"expected": map[string]any{"frameId": "frm_a", "effect": "changed"}, "actual": map[string]any{"frameId": "frm_b", "effect": "unchanged"},
			"at": "2026-11-27T10:00:00Z"}}
		if status != http.StatusOK || !reflect.DeepEqual(body, want) {
			t.Fatalf("got %d %v; want %v", status, body, want)
		}
		e.fake.div = runs.RunDivergence{Run: runView(), Steps: 0}
		_, body = e.do("key", "GET", "/v1/runs/"+runID+"/divergence", "")
		if body["replay"] != false || body["divergence"] != nil {
			t.Errorf("a run replaying nothing: got %v; want replay false, divergence null", body)
		}
	})
	t.Run("a run without steps", func(t *testing.T) {
		e.fake.script = domain.RunScript{Version: 1}
		status, body := e.do("key", "GET", "/v1/runs/"+runID+"/script", "")
		if steps, ok := body["steps"].([]any); status != http.StatusOK || !ok || len(steps) != 0 {
			t.Fatalf("got %d %v; want steps []", status, body)
		}
	})
}

// TestRunRoutesAdmitApps: spec 5.2 item 4 lets an OAuth app start, list,
// read, pause, resume and cancel runs and read their frames (and their
// script, a read of the run); the app gate lets every run route through to
// the handlers, which decide by scope.
func TestRunRoutesAdmitApps(t *testing.T) {
	e := newRunEnv(t)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/runs", `{"goal":"g"}`},
		{"GET", "/v1/runs", ""},
		{"GET", "/v1/runs/" + runID, ""},
		{"POST", "/v1/runs/" + runID + "/pause", ""},
		{"POST", "/v1/runs/" + runID + "/resume", ""},
		{"POST", "/v1/runs/" + runID + "/cancel", ""},
		{"GET", "/v1/runs/" + runID + "/frames", ""},
		{"GET", "/v1/runs/" + runID + "/script", ""},
		{"GET", "/v1/runs/" + runID + "/divergence", ""},
	} {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			e.fake.got = nil
			status, body := e.do("app", r.method, r.path, r.body)
			if status >= 300 || e.fake.got == nil {
				t.Fatalf("got %d %v; want the route to reach its handler", status, body)
			}
		})
	}
}

// TestRunRoutesWalkthrough drives real runs on sim phones through every
// run route, acting as the run through the run commands the device
// surface calls, and checks every answer against the served document.
func TestRunRoutesWalkthrough(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 2, WaitForReceipts: true})
	app := commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Runs: env.Runs})
	s, _ := newTestServer(t, Deps{App: &app, LocalOrgID: env.OrgID})
	fs := &fleetServer{t: t, env: env, s: s, v: apitest.FromHandler(t, s.Handler())}
	dev, other := env.DeviceIDs[0], env.DeviceIDs[1]
	ctx := testutil.Context(t)

	_, b := fs.do(t, "POST", "/v1/runs", `{"deviceId":"`+dev+`","goal":"open settings","executor":"external","maxSteps":10}`, 201)
	run := decodeInto[map[string]any](t, b)
	runID, agentRunID := run["runId"].(string), run["agentRunId"].(string)
	vrx := run["vrxBaseUrl"].(string)
	token := vrx[strings.LastIndex(vrx, "/")+1:]
	if run["state"] != "running" || !strings.HasPrefix(vrx, "http://vrx.test/vrx/") {
		t.Fatalf("got %v; want a running run with its vrxBaseUrl", run)
	}
	_, b = fs.do(t, "POST", "/v1/runs", `{"deviceId":"`+dev+`","goal":"second","executor":"external"}`, 409)
	if got := decodeErrorBody(t, b)["reason"]; got != "already_leased" {
		t.Errorf("second run on the device: got reason %v; want already_leased", got)
	}

	// The device's reads show the run as the lease holder, as documented.
	for _, path := range []string{"/v1/devices/" + dev, "/v1/devices/" + dev + "/driving", "/v1/leases?deviceId=" + dev, "/v1/devices"} {
		_, b = fs.do(t, "GET", path, "", 200)
		if !strings.Contains(string(b), `"runId":"`+runID+`"`) {
			t.Errorf("GET %s: got %s; want the run as the holder", path, b)
		}
	}

	// Act as the run: observe, then one action decided on that frame.
	access := runs.RunAccess{Token: token}
	obs, err := app.Runs.RunObserve.Handle(ctx, runs.RunObserve{Access: access, Image: "none"})
	if err != nil {
		t.Fatalf("observe as the run: %v", err)
	}
	if _, err := app.Runs.RunAct.Handle(ctx, runs.RunAct{Access: access, Action: "key",
		Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "walk-1", ObservedFrame: obs.Frame.FrameID}); err != nil {
		t.Fatalf("act as the run: %v", err)
	}

	_, b = fs.do(t, "GET", "/v1/runs/"+agentRunID, "", 200)
	if got := decodeInto[map[string]any](t, b); got["runId"] != runID || got["stepSeq"] != float64(1) {
		t.Errorf("get by agentRunId: got %v; want the run after one step", got)
	}
	_, b = fs.do(t, "POST", "/v1/runs/"+runID+"/pause", "", 200)
	if got := decodeInto[map[string]any](t, b)["state"]; got != "paused" {
		t.Errorf("pause: got state %v; want paused", got)
	}
	_, b = fs.do(t, "GET", "/v1/runs?state=paused&deviceId="+dev, "", 200)
	if got := decodeInto[map[string][]map[string]any](t, b)["runs"]; len(got) != 1 || got[0]["runId"] != runID {
		t.Errorf("list paused: got %v; want the run", got)
	}
	_, b = fs.do(t, "POST", "/v1/runs/"+runID+"/resume", "", 200)
	if got := decodeInto[map[string]any](t, b)["state"]; got != "running" {
		t.Errorf("resume: got state %v; want running", got)
	}

	// Frames: the observation, then the action's before and after, paged.
	var frames []map[string]any
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("frames: more pages than frames")
		}
		_, b = fs.do(t, "GET", "/v1/runs/"+runID+"/frames?limit=1"+after, "", 200)
		page := decodeInto[struct {
			Frames    []map[string]any `json:"frames"`
			NextAfter string           `json:"nextAfter"`
		}](t, b)
		frames = append(frames, page.Frames...)
		if page.NextAfter == "" {
			break
		}
		after = "&after=" + page.NextAfter
	}
	if len(frames) < 2 || frames[0]["kind"] != "observed" || frames[0]["frameId"] != obs.Frame.FrameID {
		t.Errorf("frames: got %v; want the observation first, then the action's", frames)
	}
	fs.do(t, "GET", "/v1/runs/"+runID+"/frames?after=x", "", 400)

	// The script replays the step on the other phone.
	_, b = fs.do(t, "GET", "/v1/runs/"+runID+"/script", "", 200)
	script := decodeInto[domain.RunScript](t, b)
	if len(script.Steps) != 1 || script.Steps[0].Action != "key" || script.Steps[0].ExpectScreen == "" {
		t.Fatalf("script: got %s; want the one key step with the screen it was decided on", b)
	}
	_, b = fs.do(t, "POST", "/v1/runs", `{"deviceId":"`+other+`","goal":"replay","script":`+string(b)+`}`, 201)
	replay := decodeInto[map[string]any](t, b)
	if replay["hasScript"] != true || replay["executor"] != "builtin" {
		t.Errorf("replay: got %v; want a builtin run following the script", replay)
	}
	// The exported step is guarded: its frame, the screen to wait for, its effect.
	if st := script.Steps[0]; st.FrameID != obs.Frame.FrameID || st.WaitFor == nil || st.WaitFor.App == "" || st.Effect == "" {
		t.Errorf("script step: got %+v; want its frame %s, a screen guard and an effect", st, obs.Frame.FrameID)
	}
	// The divergence report: the replay (queued, no executor here) has not
	// diverged; the original replays nothing.
	for id, want := range map[string]bool{replay["runId"].(string): true, runID: false, agentRunID: false} {
		_, b = fs.do(t, "GET", "/v1/runs/"+id+"/divergence", "", 200)
		rep := decodeInto[map[string]any](t, b)
		if rep["replay"] != want || rep["divergence"] != nil || rep["steps"] == nil {
			t.Errorf("divergence of %s: got %s; want replay %v and no divergence", id, b, want)
		}
	}

	_, b = fs.do(t, "GET", "/v1/runs?limit=1", "", 200)
	first := decodeInto[map[string]any](t, b)
	next, _ := first["nextBefore"].(string)
	_, b = fs.do(t, "GET", "/v1/runs?limit=1&before="+next, "", 200)
	second := decodeInto[map[string][]map[string]any](t, b)["runs"]
	if next == "" || len(second) != 1 || second[0]["runId"] == first["runs"].([]any)[0].(map[string]any)["runId"] {
		t.Errorf("paging: got %v then %v; want two pages of one run each", first, second)
	}

	for _, id := range []string{runID, replay["runId"].(string)} {
		_, b = fs.do(t, "POST", "/v1/runs/"+id+"/cancel", "", 200)
		if got := decodeInto[map[string]any](t, b); got["state"] != "cancelled" || got["endedAt"] == nil {
			t.Errorf("cancel: got %v; want cancelled with endedAt", got)
		}
	}
	_, b = fs.do(t, "POST", "/v1/runs/"+runID+"/pause", "", 400)
	if got := decodeErrorBody(t, b); got["code"] != "invalid_argument" || got["state"] != "cancelled" {
		t.Errorf("pause after cancel: got %v; want invalid_argument with state cancelled", got)
	}
	_, b = fs.do(t, "GET", "/v1/devices/"+dev, "", 200)
	if got := decodeInto[map[string]any](t, b)["leased"]; got != false {
		t.Errorf("device after cancel: got leased %v; want the run's lease released", got)
	}
	for _, path := range []string{"/v1/runs/" + domain.NewID(domain.PrefixRun), "/v1/runs/not-a-run/frames", "/v1/runs/" + domain.NewID(domain.PrefixAgentRun) + "/script",
		"/v1/runs/" + domain.NewID(domain.PrefixRun) + "/divergence"} {
		_, b = fs.do(t, "GET", path, "", 404)
		if got := errorCode(t, b); got != "run_not_found" {
			t.Errorf("GET %s: got %s; want run_not_found", path, got)
		}
	}
}
