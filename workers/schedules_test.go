package workers_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/runs"
	"phonefleet/commands/schedules"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// schedEnv is a database with the schedules projection running, the
// schedule commands over it and a stand-in for the run start (the run
// capability is tested on its own; here only how often and with what it
// is called matters).
type schedEnv struct {
	store  *eventstore.Store
	app    commands.Application
	clock  *testutil.Clock
	auth   domain.Auth
	starts atomic.Int64
	mu     sync.Mutex
	runs   []runs.StartRun
	// answer is what the run start answers.
	answer func(n int64) (runs.StartedRun, error)
}

func newSchedEnv(t *testing.T) *schedEnv {
	t.Helper()
	pool := smallPool(t, testutil.DatabaseURL(t), 12)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner := runReadModels(t, store, projections.Schedules{}, projections.APIKeys{})
	e := &schedEnv{store: store, clock: newClock(), auth: domain.Auth{OrgID: domain.NewID(domain.PrefixOrganisation),
		Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeRunsStart, domain.ScopeDevicesAct}}}
	sc := schedules.New(schedules.Config{Store: store, Now: e.clock.Now, ReadModels: testutil.ReadModels{RM: runner}})
	e.app = commands.NewApplication(commands.Capabilities{Schedules: sc})
	e.answer = func(n int64) (runs.StartedRun, error) {
		return runs.StartedRun{Run: projections.RunView{RunID: "run_" + string(rune('a'+n)), AgentRunID: "arun_" + string(rune('a'+n)), DeviceID: "dev_1"}}, nil
	}
	return e
}

func (e *schedEnv) startRun(ctx context.Context, cmd runs.StartRun) (runs.StartedRun, error) {
	n := e.starts.Add(1)
	e.mu.Lock()
	e.runs = append(e.runs, cmd)
	e.mu.Unlock()
	return e.answer(n)
}

func (e *schedEnv) worker(id string) workers.Schedules {
	c := e.app.Schedules
	return workers.NewSchedules(workers.Schedules{Fire: c.FireSchedule, Complete: c.CompleteScheduleFiring, Resolve: c.ResolveScheduleFiring,
		StartRun: cqrs.Fake[runs.StartRun, runs.StartedRun](e.startRun), Pool: e.store.Pool(), Now: e.clock.Now, ID: id, Logger: quiet})
}

// create makes an hourly schedule and returns it.
func (e *schedEnv) create(t *testing.T) projections.ScheduleView {
	t.Helper()
	v, err := e.app.Schedules.CreateSchedule.Handle(testutil.Context(t), schedules.CreateSchedule{Auth: e.auth,
		ScheduleSettings: domain.ScheduleSettings{Name: "hourly check", Cron: "0 * * * *", Enabled: true, Goal: "open settings", MaxSteps: 7}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *schedEnv) firings(t *testing.T, id string) []projections.FiringView {
	t.Helper()
	p, err := e.app.Schedules.ListScheduleFirings.Handle(testutil.Context(t), schedules.ListScheduleFirings{Auth: e.auth, ScheduleID: id})
	if err != nil {
		t.Fatal(err)
	}
	return p.Firings
}

// TestConcurrentWorkersFireOneOccurrenceOnce runs eight workers' passes
// at once at the same instant: the occurrence is fired once, one run is
// started, with the creator's authority and the schedule's settings.
func TestConcurrentWorkersFireOneOccurrenceOnce(t *testing.T) {
	e := newSchedEnv(t)
	s := e.create(t)
	e.clock.Set(s.NextFireAt.Add(30 * time.Second))
	var wg sync.WaitGroup
	results := make([][]workers.Fired, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.worker("w" + string(rune('0'+i))).RunOnce(testutil.Context(t))
			if err != nil {
				t.Error(err)
			}
			results[i] = out
		}()
	}
	wg.Wait()
	if got := e.starts.Load(); got != 1 {
		t.Fatalf("got %d run starts; want 1", got)
	}
	fired := 0
	for _, r := range results {
		fired += len(r)
	}
	if fired != 1 {
		t.Errorf("got %d firings reported; want 1", fired)
	}
	run := e.runs[0]
	if run.Auth.OrgID != e.auth.OrgID || run.Auth.APIKeyID != "key_1" || run.ScheduleID != s.ScheduleID || run.Goal != "open settings" || run.MaxSteps != 7 || run.DeviceID != "" {
		t.Errorf("got %+v; want the schedule's run as its creator", run)
	}
	fs := e.firings(t, s.ScheduleID)
	if len(fs) != 1 || fs[0].Outcome != domain.FiringStarted || fs[0].AgentRunID != "arun_b" || !fs[0].ScheduledFor.Equal(*s.NextFireAt) {
		t.Errorf("got firings %+v; want one started firing for %s", fs, s.NextFireAt)
	}
	// A later pass at the same instant finds nothing due.
	if out, err := e.worker("w9").RunOnce(testutil.Context(t)); err != nil || len(out) != 0 {
		t.Errorf("got %v %v; want nothing due", out, err)
	}
}

// TestAFiringWithNoFreeDeviceIsRecorded: the run start answers
// device_unavailable already_leased; the firing is recorded no_device and
// the schedule goes on to its next occurrence.
func TestAFiringWithNoFreeDeviceIsRecorded(t *testing.T) {
	e := newSchedEnv(t)
	e.answer = func(int64) (runs.StartedRun, error) {
		return runs.StartedRun{}, domain.Errorf(domain.CodeDeviceUnavailable, "every device is leased").
			With("reason", domain.ReasonAlreadyLeased).WithRetryable(true)
	}
	s := e.create(t)
	e.clock.Set(*s.NextFireAt)
	out, err := e.worker("w1").RunOnce(testutil.Context(t))
	if err != nil || len(out) != 1 || out[0].Outcome != domain.FiringNoDevice {
		t.Fatalf("got %+v %v; want one no_device firing", out, err)
	}
	fs := e.firings(t, s.ScheduleID)
	if len(fs) != 1 || fs[0].Outcome != domain.FiringNoDevice || fs[0].Reason != domain.ReasonAlreadyLeased || fs[0].AgentRunID != "" {
		t.Errorf("got %+v; want the firing recorded no_device (already_leased)", fs)
	}
	v, err := e.app.Schedules.GetSchedule.Handle(testutil.Context(t), schedules.GetSchedule{Auth: e.auth, ScheduleID: s.ScheduleID})
	if err != nil || v.LastOutcome != domain.FiringNoDevice || !v.NextFireAt.Equal(s.NextFireAt.Add(time.Hour)) {
		t.Errorf("got %+v %v; want last outcome no_device and the next hour due", v, err)
	}
}

// TestAnInterruptedFiringIsSettledNeverRestarted: the run start fails
// without saying whether the run was recorded. The firing stays in
// flight (no second start, no new firing); once stale it is settled from
// the record: abandoned when no run of it exists, started with the run
// when one does.
func TestAnInterruptedFiringIsSettledNeverRestarted(t *testing.T) {
	for _, recorded := range []bool{false, true} {
		name := "no run on record"
		if recorded {
			name = "run on record"
		}
		t.Run(name, func(t *testing.T) {
			e := newSchedEnv(t)
			s := e.create(t)
			e.answer = func(int64) (runs.StartedRun, error) { return runs.StartedRun{}, errors.New("connection reset") }
			e.clock.Set(*s.NextFireAt)
			w := e.worker("w1")
			w.StaleAfter = 2 * time.Hour
			out, err := w.RunOnce(testutil.Context(t))
			if err != nil || len(out) != 1 || out[0].Outcome != "" {
				t.Fatalf("got %+v %v; want one firing left in flight", out, err)
			}
			if recorded {
				// The run did commit before the error: its run.started names
				// the schedule.
				evs, err := eventstore.Encode[domain.Event](domain.Events, e.auth.OrgID, domain.RunStarted{RunID: "run_x",
					AgentRunID: "arun_x", DeviceID: "dev_1", ScheduleID: s.ScheduleID})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.store.Append(testutil.Context(t), domain.RunStream("run_x"), eventstore.NoStream, evs...); err != nil {
					t.Fatal(err)
				}
			}
			e.clock.Advance(time.Hour + time.Minute) // the next occurrence is due too
			if out, err := w.RunOnce(testutil.Context(t)); err != nil || len(out) != 0 {
				t.Fatalf("got %+v %v before the firing is stale; want nothing", out, err)
			}
			e.clock.Advance(time.Hour)
			out, err = w.RunOnce(testutil.Context(t))
			want := domain.FiringAbandoned
			if recorded {
				want = domain.FiringStarted
			}
			if err != nil || len(out) != 1 || !out[0].Resolved || out[0].Outcome != want {
				t.Fatalf("got %+v %v; want the firing settled %s", out, err, want)
			}
			if got := e.starts.Load(); got != 1 {
				t.Errorf("got %d run starts; want 1 (a firing never starts a second run)", got)
			}
			fs := e.firings(t, s.ScheduleID)
			if len(fs) != 1 || fs[0].Outcome != want || (recorded && fs[0].AgentRunID != "arun_x") {
				t.Errorf("got %+v; want the firing %s", fs, want)
			}
			// Settled, the schedule fires again, once, for its latest
			// occurrence.
			e.answer = func(int64) (runs.StartedRun, error) {
				return runs.StartedRun{Run: projections.RunView{RunID: "run_y", AgentRunID: "arun_y"}}, nil
			}
			out, err = w.RunOnce(testutil.Context(t))
			if err != nil || len(out) != 1 || out[0].Outcome != domain.FiringStarted || !out[0].ScheduledFor.Equal(s.NextFireAt.Add(2*time.Hour)) {
				t.Errorf("got %+v %v; want the latest occurrence fired, once", out, err)
			}
			if fs := e.firings(t, s.ScheduleID); len(fs) != 2 || !fs[0].Skipped {
				t.Errorf("got %+v; want a second firing that says an occurrence was skipped", fs)
			}
		})
	}
}
