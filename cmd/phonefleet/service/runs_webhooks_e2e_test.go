package service

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/runs"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/webhooksig"
)

// TestRunEventsReachAnHTTPSReceiver: a run parked for a person sends
// run.needs_user_control, and its end (cancelled by a person) sends
// run.ended, each to a real HTTPS receiver, signed, with exactly the data
// fields of spec 6.
func TestRunEventsReachAnHTTPSReceiver(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	a, _ := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": rcv.CAFile, "SERVICE_SIM_DEVICES": "1",
	})
	ctx := testutil.Context(t)
	app := a.Application()
	auth := domain.LocalOperator(a.orgID)
	hook, err := app.Webhooks.CreateWebhook.Handle(ctx, webhooks.CreateWebhook{Auth: auth, URL: rcv.URL + "/in",
		Events: []string{domain.WebhookRunEnded, domain.WebhookRunNeedsUserControl}})
	if err != nil {
		t.Fatal(err)
	}
	// The sim phone registered at start-up reaches the read model a start
	// chooses a free device from a moment later.
	var started runs.StartedRun
	waitUntil(t, 30*time.Second, "a free device", func() (bool, error) {
		var err error
		started, err = app.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: auth, Goal: "sign in", Executor: domain.ExecutorExternal})
		if e := domain.AsError(err); err != nil && e.Code == domain.CodeDeviceUnavailable && e.Retryable != nil && *e.Retryable {
			return false, nil
		}
		return err == nil, err
	})
	_, tok, _ := strings.Cut(started.VrxBaseURL, "/vrx/")
	parked, err := app.Runs.RunNeedsUser.Handle(ctx, runs.RunNeedsUser{Access: runs.RunAccess{Token: tok}, Reason: "captcha"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: auth, RunID: started.Run.RunID}); err != nil {
		t.Fatal(err)
	}

	deliveries := map[string]map[string]any{}
	deadline := time.Now().Add(30 * time.Second)
	for len(deliveries) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("deliveries received: %v", slices.Collect(maps.Keys(deliveries)))
		}
		time.Sleep(20 * time.Millisecond)
		reqs, bodies := rcv.received()
		for i, r := range reqs {
			if err := webhooksig.Verify(bodies[i], r.Header.Get(webhooksig.SignatureHeader), hook.Secret, time.Now(), 0); err != nil {
				t.Fatalf("signature: %v", err)
			}
			var body struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			if err := json.Unmarshal(bodies[i], &body); err != nil {
				t.Fatal(err)
			}
			if r.Header.Get(webhooksig.EventHeader) != body.Event {
				t.Fatalf("Service-Event %q for a %s body", r.Header.Get(webhooksig.EventHeader), body.Event)
			}
			deliveries[body.Event] = body.Data
		}
	}
	needs := deliveries[domain.WebhookRunNeedsUserControl]
	wantKeys(t, needs, "agentRunId", "deviceId", "goal", "deadlineAt")
	if needs["agentRunId"] != started.Run.AgentRunID || needs["deviceId"] != started.Run.DeviceID || needs["goal"] != "sign in" {
		t.Errorf("run.needs_user_control data %v", needs)
	}
	if at, err := time.Parse(time.RFC3339Nano, needs["deadlineAt"].(string)); err != nil || !at.Equal(*parked.ParkDeadlineAt) {
		t.Errorf("deadlineAt %v, want %v (%v)", needs["deadlineAt"], parked.ParkDeadlineAt, err)
	}
	ended := deliveries[domain.WebhookRunEnded]
	wantKeys(t, ended, "agentRunId", "runId", "deviceId", "state", "goal", "stepSeq", "reason", "detail")
	if ended["runId"] != started.Run.RunID || ended["state"] != domain.RunStateCancelled || ended["reason"] != nil ||
		ended["detail"] != nil || ended["stepSeq"] != float64(0) {
		t.Errorf("run.ended data %v", ended)
	}
}

// wantKeys fails unless data has exactly keys.
func wantKeys(t *testing.T, data map[string]any, keys ...string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(data))
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Errorf("data fields %v, want exactly %v", got, keys)
	}
}
