package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// Run routes: organisation A gets a sim phone of its own (registered as the
// operator command does) and starts an external run on it, so the run
// stays running (no executor touches it) while organisation B calls every
// run route with its id. B's pause, resume and cancel must be refused as
// for a run that never existed, which also means they change nothing.
func init() {
	var forClient *tenancyClient
	var cached map[string]string
	run := func(c *tenancyClient) (map[string]string, map[string]string) {
		if forClient != c {
			forClient, cached = c, runFixture(c)
		}
		return map[string]string{"runId": cached["runId"]}, nil
	}
	for _, p := range []string{"/v1/runs/{runId}", "/v1/runs/{runId}/pause", "/v1/runs/{runId}/resume", "/v1/runs/{runId}/cancel",
		"/v1/runs/{runId}/frames", "/v1/runs/{runId}/script", "/v1/runs/{runId}/divergence"} {
		tenancyFixtures[p] = run
	}
}

// runFixture starts, as organisation A, an external run on a phone of its
// own and returns its runId and agentRunId.
func runFixture(c *tenancyClient) map[string]string {
	ids, err := c.app.app.Fleet.RegisterDevices.Handle(testutil.Context(c.t),
		fleet.RegisterDevices{OrgID: c.org, Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		c.t.Fatalf("register a sim phone for organisation A's run: %v (%v)", err, ids)
	}
	status, _, body := c.do("POST", "/v1/runs", fmt.Sprintf(`{"deviceId":%q,"goal":"tenancy","executor":"external"}`, ids[0]))
	if status != http.StatusCreated {
		c.t.Fatalf("start organisation A's run: got %d %s", status, body)
	}
	var run struct {
		RunID      string `json:"runId"`
		AgentRunID string `json:"agentRunId"`
	}
	if err := json.Unmarshal(body, &run); err != nil || run.RunID == "" || run.AgentRunID == "" {
		c.t.Fatalf("start organisation A's run: no runId in %s", body)
	}
	return map[string]string{"runId": run.RunID, "agentRunId": run.AgentRunID, "deviceId": ids[0]}
}

// TestRunTenancyByEitherID: the run routes accept a runId or an agentRunId
// (spec 4.5), so both spellings of organisation A's run must answer
// organisation B exactly as ids that never existed (404 run_not_found),
// on every route that names a run; afterwards A's run is still running
// and still A's.
func TestRunTenancyByEitherID(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startHosted(t, idp)
	aud := "http://tenancy.test/mcp"
	orgA := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_a", "org_a", "admin"), app: a, org: "org_a"}
	orgB := &tenancyClient{t: t, base: base, token: idp.Console(t, aud, "user_b", "org_b", "admin")}
	fx := runFixture(orgA)

	routes := []struct{ method, suffix string }{
		{"GET", ""}, {"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/cancel"}, {"GET", "/frames"}, {"GET", "/script"},
	}
	for _, id := range []struct{ name, ofA, never string }{
		{"runId", fx["runId"], domain.NewID(domain.PrefixRun)},
		{"agentRunId", fx["agentRunId"], domain.NewID(domain.PrefixAgentRun)},
	} {
		for _, r := range routes {
			t.Run(id.name+"/"+r.method+" /v1/runs/{runId}"+r.suffix, func(t *testing.T) {
				orgB.t = t
				ids := []string{id.ofA, id.never}
				st1, h1, b1 := orgB.do(r.method, "/v1/runs/"+id.ofA+r.suffix, "")
				st2, h2, b2 := orgB.do(r.method, "/v1/runs/"+id.never+r.suffix, "")
				if st1 != http.StatusNotFound {
					t.Fatalf("organisation B got %d for organisation A's run:\n%s", st1, b1)
				}
				var e struct {
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(b1, &e); err != nil || e.Error.Code != "run_not_found" {
					t.Fatalf("got %s; want run_not_found", b1)
				}
				if got, want := comparable(st1, h1, b1, ids), comparable(st2, h2, b2, ids); got != want {
					t.Fatalf("another organisation's run answers\n%s\nbut a run that never existed answers\n%s", got, want)
				}
			})
		}
	}
	orgB.t = t

	// B's list never shows A's run; A still sees it, running.
	if _, _, body := orgB.do("GET", "/v1/runs", ""); bytes.Contains(body, []byte(fx["runId"])) || bytes.Contains(body, []byte(fx["agentRunId"])) {
		t.Fatalf("organisation B's run list names organisation A's run:\n%s", body)
	}
	status, _, body := orgA.do("GET", "/v1/runs/"+fx["agentRunId"], "")
	var run struct {
		RunID string `json:"runId"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &run); status != http.StatusOK || err != nil || run.RunID != fx["runId"] || run.State != "running" {
		t.Fatalf("organisation A's own run after B's calls: got %d %s; want it running (B's pause and cancel did nothing)", status, body)
	}
	// Clean up: the run holds its device until its deadline otherwise.
	if status, _, body := orgA.do("POST", "/v1/runs/"+fx["runId"]+"/cancel", ""); status != http.StatusOK {
		t.Fatalf("organisation A cancels its run: got %d %s", status, body)
	}
}
