package service

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/keys"
	"phonefleet/commands/runs"
	"phonefleet/commands/schedules"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/webhooksig"
	"phonefleet/workers"
)

// TestAScheduleFiresARunAndSendsScheduleTriggered runs the whole service
// with one sim phone and a real HTTPS receiver. Two schedules are made
// through the API; firing workers with an injected clock fire them:
//   - the one on the phone, while a person holds the phone's lease, finds
//     no free device: its firing is recorded no_device and nothing is sent;
//   - the one on any free device, fired by two workers at once, starts one
//     run on the sim phone (as the schedule's creator, naming the
//     schedule) and sends schedule.triggered once, signed, with exactly
//     scheduleId, name, agentRunId and scheduledFor.
func TestAScheduleFiresARunAndSendsScheduleTriggered(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": rcv.CAFile, "SERVICE_SIM_DEVICES": "1",
	})
	ctx := testutil.Context(t)
	app := a.Application()
	auth := domain.LocalOperator(a.orgID)

	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, raw, want)
		}
		return out
	}
	hook := call("POST", "/v1/webhooks", `{"url":"`+rcv.URL+`/in","events":["schedule.triggered"]}`, http.StatusCreated)
	secret := hook["secret"].(string)

	var deviceID string
	for wait := time.Now().Add(20 * time.Second); deviceID == ""; time.Sleep(20 * time.Millisecond) {
		page, err := app.Fleet.ListDevices.Handle(ctx, fleet.ListDevices{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Devices) > 0 {
			deviceID = page.Devices[0].DeviceID
		} else if time.Now().After(wait) {
			t.Fatal("the sim phone never appeared")
		}
	}

	// On 29 February at 03:00 UTC: the service's own worker, on the wall
	// clock, will not fire these while the test runs.
	anyDevice := call("POST", "/v1/schedules", `{"name":"leap-day check","cron":"0 3 29 2 *","goal":"open settings","maxSteps":5}`, http.StatusCreated)
	onPhone := call("POST", "/v1/schedules", `{"name":"on the phone","cron":"0 3 29 2 *","goal":"open settings","deviceId":"`+deviceID+`"}`, http.StatusCreated)
	due, err := time.Parse(time.RFC3339Nano, anyDevice["nextFireAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(due.Add(20 * time.Second))
	worker := func(id string) workers.Schedules {
		w := a.scheduleWorker(clock.Now)
		w.ID = id
		return w
	}

	// A person holds the phone: the schedule on it finds no free device.
	lease, err := app.Fleet.AcquireLease.Handle(ctx, fleet.AcquireLease{Auth: auth, DeviceID: deviceID, TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Schedules.UpdateSchedule.Handle(ctx, schedules.UpdateSchedule{Auth: auth, ScheduleID: anyDevice["scheduleId"].(string),
		Enabled: new(bool)}); err != nil {
		t.Fatal(err)
	}
	out, err := worker("first").RunOnce(ctx)
	if err != nil || len(out) != 1 || out[0].ScheduleID != onPhone["scheduleId"] || out[0].Outcome != domain.FiringNoDevice {
		t.Fatalf("got %+v %v; want the schedule on the phone recorded no_device", out, err)
	}
	firings := call("GET", "/v1/schedules/"+onPhone["scheduleId"].(string)+"/firings", "", http.StatusOK)["firings"].([]any)
	if len(firings) != 1 || firings[0].(map[string]any)["outcome"] != "no_device" || firings[0].(map[string]any)["reason"] != domain.ReasonAlreadyLeased {
		t.Fatalf("got firings %v; want one no_device firing (already_leased)", firings)
	}
	if _, err := app.Fleet.ReleaseLease.Handle(ctx, fleet.ReleaseLease{Auth: auth, DeviceID: deviceID, LeaseID: lease.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Schedules.DeleteSchedule.Handle(ctx, schedules.DeleteSchedule{Auth: auth, ScheduleID: onPhone["scheduleId"].(string)}); err != nil {
		t.Fatal(err)
	}

	// Switched on again, the any-device schedule counts from now: its next
	// occurrence is the next leap day's. Two workers fire it at once.
	on := call("PATCH", "/v1/schedules/"+anyDevice["scheduleId"].(string), `{"enabled":true}`, http.StatusOK)
	due, err = time.Parse(time.RFC3339Nano, on["nextFireAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(due.Add(5 * time.Second))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fired []workers.Fired
	for _, id := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := worker(id).RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			fired = append(fired, out...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(fired) != 1 || fired[0].Outcome != domain.FiringStarted {
		t.Fatalf("got %+v; want one firing that started a run", fired)
	}
	run, err := app.Runs.GetRun.Handle(ctx, runs.GetRun{Auth: auth, RunID: fired[0].AgentRunID})
	if err != nil {
		t.Fatal(err)
	}
	if run.DeviceID != deviceID || run.ScheduleID != anyDevice["scheduleId"] || run.Goal != "open settings" || run.MaxSteps != 5 ||
		run.Starter.UserID != auth.UserID {
		t.Errorf("got run %+v; want it on the sim phone, naming the schedule, started as its creator", run)
	}
	firings = call("GET", "/v1/schedules/"+anyDevice["scheduleId"].(string)+"/firings", "", http.StatusOK)["firings"].([]any)
	if len(firings) != 1 || firings[0].(map[string]any)["agentRunId"] != run.AgentRunID {
		t.Errorf("got firings %v; want the one firing naming its run", firings)
	}

	var data map[string]any
	for deadline := time.Now().Add(30 * time.Second); data == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("schedule.triggered never arrived")
		}
		reqs, bodies := rcv.received()
		for i, r := range reqs {
			if err := webhooksig.Verify(bodies[i], r.Header.Get(webhooksig.SignatureHeader), secret, time.Now(), 0); err != nil {
				t.Fatalf("signature: %v", err)
			}
			var body struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			if err := json.Unmarshal(bodies[i], &body); err != nil {
				t.Fatal(err)
			}
			if body.Event != domain.WebhookScheduleTriggered || r.Header.Get(webhooksig.EventHeader) != body.Event {
				t.Fatalf("got event %q (header %q); want only schedule.triggered", body.Event, r.Header.Get(webhooksig.EventHeader))
			}
			data = body.Data
		}
	}
	if got, want := slices.Sorted(maps.Keys(data)), []string{"agentRunId", "name", "scheduleId", "scheduledFor"}; !slices.Equal(got, want) {
		t.Errorf("data fields %v; want exactly %v", got, want)
	}
	if at, err := time.Parse(time.RFC3339Nano, data["scheduledFor"].(string)); err != nil || !at.Equal(due) {
		t.Errorf("scheduledFor %v; want %s (%v)", data["scheduledFor"], due, err)
	}
	if data["scheduleId"] != anyDevice["scheduleId"] || data["name"] != "leap-day check" || data["agentRunId"] != run.AgentRunID {
		t.Errorf("data %v; want the schedule, its name and the run", data)
	}
	// The no_device firing sent nothing, and the started one was sent once.
	if reqs, _ := rcv.received(); len(reqs) != 1 {
		t.Errorf("got %d deliveries; want 1", len(reqs))
	}
}

// TestARevokedKeysScheduleStartsNothing: a schedule keeps its creator's
// authority only while the creator keeps it: once the API key that made
// it is revoked, its firing starts no run and is recorded failed.
func TestARevokedKeysScheduleStartsNothing(t *testing.T) {
	a, _ := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": t.TempDir(),
		"SERVICE_SIM_DEVICES": "1",
	})
	ctx := testutil.Context(t)
	app := a.Application()
	op := domain.LocalOperator(a.orgID)
	scopes := []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct, domain.ScopeDevicesRead}
	key, err := app.Keys.MintAPIKey.Handle(ctx, keys.MintAPIKey{Auth: op, Name: "scheduler", Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	keyAuth := domain.Auth{OrgID: a.orgID, Kind: domain.PrincipalAPIKey, APIKeyID: key.KeyID, Role: domain.RoleAdmin, Scopes: scopes}
	s, err := app.Schedules.CreateSchedule.Handle(ctx, schedules.CreateSchedule{Auth: keyAuth, ScheduleSettings: domain.ScheduleSettings{
		Name: "nightly", Cron: "0 3 29 2 *", Enabled: true, Goal: "open settings"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Keys.RevokeAPIKey.Handle(ctx, keys.RevokeAPIKey{Auth: op, KeyID: key.KeyID}); err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(s.NextFireAt.Add(time.Second))
	out, err := a.scheduleWorker(clock.Now).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].Outcome != domain.FiringFailed || out[0].AgentRunID != "" {
		t.Fatalf("got %+v; want the firing recorded failed, starting no run", out)
	}
	page, err := app.Runs.ListRuns.Handle(ctx, runs.ListRuns{Auth: op})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 0 {
		t.Fatalf("a revoked key's schedule started %d runs", len(page.Runs))
	}
}
