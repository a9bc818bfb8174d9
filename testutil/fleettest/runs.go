package fleettest

import (
	"strings"
	"testing"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// RunToken returns the run token inside a started run's vrxBaseUrl, as
// the run's worker would take it.
func RunToken(t testing.TB, s runs.StartedRun) runs.RunAccess {
	t.Helper()
	_, tok, ok := strings.Cut(s.VrxBaseURL, "/vrx/")
	if !ok {
		t.Fatalf("vrxBaseUrl %q holds no token", s.VrxBaseURL)
	}
	return runs.RunAccess{Token: tok}
}

// StartExternalRun starts a run of the external executor on device dev
// as the organisation's operator (goal "open notes"); mod, when not nil,
// changes the request first.
func StartExternalRun(t testing.TB, env *Env, dev string, mod func(*runs.StartRun)) runs.StartedRun {
	t.Helper()
	cmd := runs.StartRun{Auth: env.Auth, DeviceID: dev, Goal: "open notes", Executor: domain.ExecutorExternal}
	if mod != nil {
		mod(&cmd)
	}
	s, err := env.App.Runs.StartRun.Handle(testutil.Background, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
