package mcp_test

import (
	"slices"
	"strings"
	"testing"

	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/testutil"
)

var runTools = []string{"cancel_run", "get_run", "get_run_divergence", "get_run_frames", "list_runs", "pause_run", "resume_run", "start_run"}

// runJSON is a run as the run tools answer it.
type runJSON struct {
	RunID        string            `json:"runId"`
	AgentRunID   string            `json:"agentRunId"`
	State        string            `json:"state"`
	DeviceID     string            `json:"deviceId"`
	Goal         string            `json:"goal"`
	Executor     string            `json:"executor"`
	MaxSteps     int               `json:"maxSteps"`
	Starter      map[string]string `json:"starter"`
	EndedAt      *string           `json:"endedAt"`
	VrxBaseURL   string            `json:"vrxBaseUrl"`
	SuccessCheck map[string]string `json:"successCheck"`
}

// TestRunToolsNeedRunsStartAndDevicesAct: the run tools are listed only
// for a credential holding both runs:start and devices:act (spec 5.4,
// 5.5), and a call without one of them is refused naming it, with nothing
// started.
func TestRunToolsNeedRunsStartAndDevicesAct(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	runs, act, read, lease := domain.ScopeRunsStart, domain.ScopeDevicesAct, domain.ScopeDevicesRead, domain.ScopeDevicesLease
	sets := []struct {
		name    string
		scopes  []domain.Scope
		want    []string
		missing string // the scope a start_run call is refused for
	}{
		{"runs:start alone", []domain.Scope{runs}, nil, "devices:act"},
		{"devices:act alone", []domain.Scope{act}, sorted(actTools), "runs:start"},
		{"every device scope but runs:start", []domain.Scope{read, lease, act}, sorted(readTools, webhookTools, leaseTools, actTools), "runs:start"},
		{"runs:start and devices:act", []domain.Scope{runs, act}, sorted(actTools, runTools), ""},
	}
	for _, set := range sets {
		token := svc.key(t, set.scopes...)
		for _, c := range clients {
			t.Run(set.name+"/"+c.name, func(t *testing.T) {
				a := c.connect(t, svc.url, token)
				var got []string
				for _, tl := range a.tools(t) {
					got = append(got, tl.Name)
				}
				if !slices.Equal(got, set.want) {
					t.Errorf("got tools %v; want %v", got, set.want)
				}
				if set.missing == "" {
					return
				}
				env := mustFail(t, a, "start_run", map[string]any{"deviceId": dev, "goal": "refused", "executor": "external"})
				if env["code"] != "permission_denied" || env["scope"] != set.missing {
					t.Errorf("got %v; want permission_denied naming %s", env, set.missing)
				}
			})
		}
	}
	// Nothing was started by the refused calls: the device is free.
	r := mustCall(t, clients[0].connect(t, svc.url, svc.key(t, runs, act)), "list_runs", nil)
	var page struct {
		Runs []runJSON `json:"runs"`
	}
	r.json(t, &page)
	if len(page.Runs) != 0 {
		t.Errorf("got runs %v; want none after refused calls", page.Runs)
	}
}

// TestRunToolsLifecycle drives one external run through every run tool
// with each client: start (with vrxBaseUrl), read by runId and agentRunId,
// list with filters, pause, resume, frames, cancel (twice), and the
// refusals an agent acts on.
func TestRunToolsLifecycle(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	token := svc.key(t, domain.ScopeRunsStart, domain.ScopeDevicesAct)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			a := c.connect(t, svc.url, token)
			var run runJSON
			mustCall(t, a, "start_run", map[string]any{"deviceId": dev, "goal": "open settings", "executor": "external", "maxSteps": 5,
				"deadlineSeconds": 600, "successCheck": map[string]any{"app": "com.android.settings"}}).json(t, &run)
			if run.State != "running" || run.DeviceID != dev || run.Goal != "open settings" || run.Executor != "external" || run.MaxSteps != 5 ||
				!strings.HasPrefix(run.VrxBaseURL, "http://vrx.test/vrx/vrx_") || run.Starter["apiKeyId"] == "" ||
				run.SuccessCheck["app"] != "com.android.settings" || !domain.HasPrefix(run.RunID, domain.PrefixRun) ||
				!domain.HasPrefix(run.AgentRunID, domain.PrefixAgentRun) {
				t.Fatalf("start_run: got %+v; want a running external run on %s with vrxBaseUrl", run, dev)
			}

			t.Run("the device is the run's", func(t *testing.T) {
				env := mustFail(t, a, "start_run", map[string]any{"deviceId": dev, "goal": "second", "executor": "external"})
				if env["code"] != "device_unavailable" || env["reason"] != "already_leased" {
					t.Errorf("got %v; want device_unavailable already_leased", env)
				}
			})
			t.Run("get by runId and by agentRunId", func(t *testing.T) {
				for _, id := range []string{run.RunID, run.AgentRunID} {
					var got runJSON
					mustCall(t, a, "get_run", map[string]any{"runId": id}).json(t, &got)
					if got.RunID != run.RunID || got.VrxBaseURL != "" {
						t.Errorf("get_run %s: got %+v; want the run, without vrxBaseUrl (shown to the starter once)", id, got)
					}
				}
			})
			t.Run("list with filters", func(t *testing.T) {
				var page struct {
					Runs []runJSON `json:"runs"`
				}
				mustCall(t, a, "list_runs", map[string]any{"state": "running", "deviceId": dev}).json(t, &page)
				if len(page.Runs) != 1 || page.Runs[0].RunID != run.RunID {
					t.Errorf("got %+v; want the running run", page.Runs)
				}
				mustCall(t, a, "list_runs", map[string]any{"state": "paused"}).json(t, &page)
				if len(page.Runs) != 0 {
					t.Errorf("got %+v for state paused; want none", page.Runs)
				}
				env := mustFail(t, a, "list_runs", map[string]any{"starterUserId": "u", "starterApiKeyId": "k"})
				if env["code"] != "invalid_argument" {
					t.Errorf("got %v; want invalid_argument for both starters", env)
				}
			})
			for _, step := range []struct{ tool, state string }{
				{"pause_run", "paused"}, {"pause_run", "paused"}, {"resume_run", "running"}, {"resume_run", "running"},
			} {
				var got runJSON
				mustCall(t, a, step.tool, map[string]any{"runId": run.AgentRunID}).json(t, &got)
				if got.State != step.state || got.RunID != run.RunID {
					t.Fatalf("%s: got %+v; want state %s", step.tool, got, step.state)
				}
			}
			t.Run("frames", func(t *testing.T) {
				var page struct {
					Frames    []map[string]any `json:"frames"`
					NextAfter *string          `json:"nextAfter"`
				}
				mustCall(t, a, "get_run_frames", map[string]any{"runId": run.RunID, "limit": 10}).json(t, &page)
				if page.Frames == nil || page.NextAfter != nil {
					t.Errorf("got %+v; want a (possibly empty) list of frames and no cursor on the last page", page)
				}
			})
			t.Run("divergence", func(t *testing.T) {
				var rep struct {
					RunID      string         `json:"runId"`
					Replay     bool           `json:"replay"`
					Divergence map[string]any `json:"divergence"`
				}
				mustCall(t, a, "get_run_divergence", map[string]any{"runId": run.AgentRunID}).json(t, &rep)
				if rep.RunID != run.RunID || rep.Replay || rep.Divergence != nil {
					t.Errorf("got %+v; want the run, replaying nothing, with no divergence", rep)
				}
			})
			var ended runJSON
			mustCall(t, a, "cancel_run", map[string]any{"runId": run.RunID}).json(t, &ended)
			if ended.State != "cancelled" || ended.EndedAt == nil {
				t.Fatalf("cancel_run: got %+v; want cancelled with endedAt", ended)
			}
			var again runJSON
			mustCall(t, a, "cancel_run", map[string]any{"runId": run.RunID}).json(t, &again)
			if again.State != "cancelled" || *again.EndedAt != *ended.EndedAt {
				t.Errorf("cancel_run again: got %+v; want the run as it ended", again)
			}
			env := mustFail(t, a, "pause_run", map[string]any{"runId": run.RunID})
			if env["code"] != "invalid_argument" || env["state"] != "cancelled" {
				t.Errorf("pause_run of an ended run: got %v; want invalid_argument with state cancelled", env)
			}
			env = mustFail(t, a, "get_run", map[string]any{"runId": domain.NewID(domain.PrefixRun)})
			if env["code"] != "run_not_found" || env["retryable"] != false {
				t.Errorf("get_run of an unknown run: got %v; want run_not_found", env)
			}
		})
	}
}

// TestRunToolsAnswerAnotherOrganisationsRunAsMissing: organisation B
// naming organisation A's run (by runId or agentRunId) gets exactly what
// it gets for a run that never existed, on every run tool that names one,
// and A's run is unchanged.
func TestRunToolsAnswerAnotherOrganisationsRunAsMissing(t *testing.T) {
	svc := startService(t, 1)
	both := []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}
	orgA := clients[0].connect(t, svc.url, svc.key(t, both...))
	k, err := svc.mint.Handle(testutil.Context(t), keys.MintAPIKey{Auth: domain.LocalOperator(domain.NewID(domain.PrefixOrganisation)),
		Name: "organisation B", Scopes: both})
	if err != nil {
		t.Fatal(err)
	}
	orgB := clients[3].connect(t, svc.url, k.Token)
	var run runJSON
	mustCall(t, orgA, "start_run", map[string]any{"deviceId": svc.fleet.DeviceIDs[0], "goal": "A's run", "executor": "external"}).json(t, &run)

	for _, ids := range []struct{ name, ofA, never string }{
		{"runId", run.RunID, domain.NewID(domain.PrefixRun)},
		{"agentRunId", run.AgentRunID, domain.NewID(domain.PrefixAgentRun)},
	} {
		for _, tool := range []string{"get_run", "pause_run", "resume_run", "cancel_run", "get_run_frames", "get_run_divergence"} {
			t.Run(ids.name+"/"+tool, func(t *testing.T) {
				a, err := orgB.call(t, tool, map[string]any{"runId": ids.ofA})
				if err != nil {
					t.Fatal(err)
				}
				b, err := orgB.call(t, tool, map[string]any{"runId": ids.never})
				if err != nil {
					t.Fatal(err)
				}
				got := strings.ReplaceAll(strings.Join(a.texts, "\n"), ids.ofA, "<id>")
				want := strings.ReplaceAll(strings.Join(b.texts, "\n"), ids.never, "<id>")
				if !a.isError || got != want || !strings.Contains(got, `"code":"run_not_found"`) {
					t.Errorf("organisation A's run answers\n%s\nbut a run that never existed answers\n%s\nwant one run_not_found", got, want)
				}
			})
		}
	}
	var page struct {
		Runs []runJSON `json:"runs"`
	}
	mustCall(t, orgB, "list_runs", nil).json(t, &page)
	if len(page.Runs) != 0 {
		t.Errorf("organisation B lists %+v; want none of A's runs", page.Runs)
	}
	var still runJSON
	mustCall(t, orgA, "get_run", map[string]any{"runId": run.RunID}).json(t, &still)
	if still.State != "running" {
		t.Errorf("A's run after B's calls: got %s; want running (B's pause and cancel did nothing)", still.State)
	}
}
