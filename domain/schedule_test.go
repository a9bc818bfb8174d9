package domain

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
)

func scheduleTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseCronRefusesWithTheFieldAndTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name, expr, tz, field string
	}{
		{"six fields", "0 */5 * * * *", "", "cron"},
		{"minute out of range", "61 * * * *", "", "cron"},
		{"empty", "  ", "", "cron"},
		{"zone in the expression", "CRON_TZ=Europe/Paris 0 9 * * *", "", "cron"},
		{"interval", "@every 5m", "", "cron"},
		{"no such date", "0 0 30 2 *", "", "cron"},
		{"unknown zone", "0 9 * * *", "Mars/Olympus", "timezone"},
		{"local zone", "0 9 * * *", "Local", "timezone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCron(tc.expr, tc.tz)
			var de *Error
			if !errors.As(err, &de) || de.Code != CodeInvalidArgument {
				t.Fatalf("got %v; want invalid_argument", err)
			}
			if de.Extra["field"] != tc.field {
				t.Errorf("got field %v; want %s", de.Extra["field"], tc.field)
			}
			if de.Message == "" {
				t.Error("got an empty message; want the problem named")
			}
		})
	}
}

func TestCronNextReadsTheExpressionInItsTimezone(t *testing.T) {
	for _, tc := range []struct {
		expr, tz, after, want string
	}{
		{"0 9 * * *", "Europe/Paris", "2025-01-01T00:00:00Z", "2025-01-01T08:00:00Z"},
		{"0 9 * * *", "Europe/Paris", "2025-07-01T00:00:00Z", "2025-07-01T07:00:00Z"},
		{"0 9 * * *", "", "2025-01-01T00:00:00Z", "2025-01-01T09:00:00Z"},
		{"*/15 * * * *", "UTC", "2025-01-01T00:00:00Z", "2025-01-01T00:15:00Z"},
		{"@daily", "America/New_York", "2025-01-01T12:00:00Z", "2025-01-02T05:00:00Z"},
		{"0 9 * * 1-5", "UTC", "2025-01-03T10:00:00Z", "2025-01-06T09:00:00Z"}, // Friday → Monday
	} {
		t.Run(tc.expr+" "+tc.tz, func(t *testing.T) {
			c, err := ParseCron(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Next(scheduleTime(t, tc.after)); !got.Equal(scheduleTime(t, tc.want)) {
				t.Errorf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestCronLatestCatchesUpOnceForTheLatestOccurrence(t *testing.T) {
	hourly, _ := ParseCron("0 * * * *", "")
	minutely, _ := ParseCron("* * * * *", "")
	yearly, _ := ParseCron("0 0 1 1 *", "")
	for _, tc := range []struct {
		name        string
		c           Cron
		after, now  string
		want        string // "" = none due
		wantSkipped bool
	}{
		{"nothing due yet", hourly, "2025-01-01T00:00:00Z", "2025-01-01T00:59:59Z", "", false},
		{"exactly one due", hourly, "2025-01-01T00:00:00Z", "2025-01-01T01:00:00Z", "2025-01-01T01:00:00Z", false},
		{"three days down", hourly, "2025-01-01T00:00:00Z", "2025-01-04T05:30:00Z", "2025-01-04T05:00:00Z", true},
		{"two years down, every minute", minutely, "2023-01-01T00:00:00Z", "2025-03-04T05:06:30Z", "2025-03-04T05:06:00Z", true},
		{"yearly, three years down", yearly, "2021-06-01T00:00:00Z", "2024-06-01T00:00:00Z", "2024-01-01T00:00:00Z", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := tc.c.Latest(scheduleTime(t, tc.after), scheduleTime(t, tc.now))
			if tc.want == "" {
				if !got.IsZero() {
					t.Errorf("got %s; want nothing due", got)
				}
				return
			}
			if !got.Equal(scheduleTime(t, tc.want)) || skipped != tc.wantSkipped {
				t.Errorf("got %s skipped %v; want %s skipped %v", got, skipped, tc.want, tc.wantSkipped)
			}
		})
	}
}

var scheduleCreator = Auth{OrgID: "org_a", Kind: PrincipalAPIKey, APIKeyID: "key_1", Role: RoleAdmin,
	Scopes: []Scope{ScopeRunsStart, ScopeDevicesAct}, Devices: []string{"dev_1"}, Instance: "https://issuer"}

// newSchedule folds the events of a schedule created at 00:00 with an
// hourly expression.
func newTestSchedule(t *testing.T, set ScheduleSettings) (*Schedule, *int64) {
	t.Helper()
	s := &Schedule{}
	version := new(int64)
	evs, err := s.Create(scheduleCreator, "sch_1", set, scheduleTime(t, "2025-01-01T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	applySchedule(s, version, evs)
	return s, version
}

func applySchedule(s *Schedule, version *int64, evs []Event) {
	for _, e := range evs {
		*version++
		s.Apply(e, *version)
	}
}

func hourlySettings() ScheduleSettings {
	return ScheduleSettings{Name: "nightly check", Cron: "0 * * * *", Enabled: true, Goal: "open settings"}
}

func TestScheduleFiresEachOccurrenceOnce(t *testing.T) {
	s, v := newTestSchedule(t, hourlySettings())
	at := scheduleTime(t, "2025-01-01T01:00:30Z")
	evs, _ := s.Fire(at, "w1")
	if len(evs) != 1 {
		t.Fatalf("got %v; want one firing", evs)
	}
	fired := evs[0].(ScheduleFired)
	if !fired.ScheduledFor.Equal(scheduleTime(t, "2025-01-01T01:00:00Z")) || fired.FiringID != ScheduleFiringID("sch_1", fired.ScheduledFor) {
		t.Errorf("got %+v; want the 01:00 occurrence with its derived firing id", fired)
	}
	if !fired.Next.Equal(scheduleTime(t, "2025-01-01T02:00:00Z")) {
		t.Errorf("got next %s; want 02:00", fired.Next)
	}
	// Another instance deciding on the state without the firing would
	// decide the same event; the stream version lets only one commit. On
	// the state with it, nothing is due.
	other := *s
	if again, _ := other.Fire(at, "w2"); len(again) != 1 || again[0].(ScheduleFired).FiringID != fired.FiringID {
		t.Errorf("got %v; want the same firing id from another instance", again)
	}
	applySchedule(s, v, evs)
	if again, _ := s.Fire(scheduleTime(t, "2025-01-01T03:30:00Z"), "w1"); again != nil {
		t.Errorf("got %v while the firing is in flight; want nothing", again)
	}
	done, err := s.Complete(ScheduleFiringCompleted{FiringID: fired.FiringID, Outcome: FiringNoDevice, Reason: ReasonAlreadyLeased})
	if err != nil || len(done) != 1 {
		t.Fatalf("got %v %v; want the outcome recorded", done, err)
	}
	c := done[0].(ScheduleFiringCompleted)
	if c.Name != "nightly check" || !c.ScheduledFor.Equal(fired.ScheduledFor) || c.ScheduleID != "sch_1" {
		t.Errorf("got %+v; want name, schedule and occurrence filled in", c)
	}
	applySchedule(s, v, done)
	if again, _ := s.Complete(ScheduleFiringCompleted{FiringID: fired.FiringID, Outcome: FiringStarted}); again != nil {
		t.Errorf("got %v; want a recorded outcome recorded once", again)
	}
	next, _ := s.Fire(scheduleTime(t, "2025-01-01T03:30:00Z"), "w1")
	if len(next) != 1 || !next[0].(ScheduleFired).ScheduledFor.Equal(scheduleTime(t, "2025-01-01T03:00:00Z")) || !next[0].(ScheduleFired).Skipped {
		t.Errorf("got %v; want one catch-up firing for 03:00 that says 02:00 was skipped", next)
	}
}

func TestAStartedRunSupersedesAnAbandonedFiring(t *testing.T) {
	s, v := newTestSchedule(t, hourlySettings())
	evs, _ := s.Fire(scheduleTime(t, "2025-01-01T01:00:00Z"), "w1")
	applySchedule(s, v, evs)
	id := evs[0].(ScheduleFired).FiringID
	abandoned, _ := s.Complete(ScheduleFiringCompleted{FiringID: id, Outcome: FiringAbandoned})
	applySchedule(s, v, abandoned)
	started, _ := s.Complete(ScheduleFiringCompleted{FiringID: id, Outcome: FiringStarted, AgentRunID: "arun_1"})
	if len(started) != 1 {
		t.Fatalf("got %v; want the started run recorded over abandoned", started)
	}
	applySchedule(s, v, started)
	if again, _ := s.Complete(ScheduleFiringCompleted{FiringID: id, Outcome: FiringAbandoned}); again != nil {
		t.Errorf("got %v; want started to stand", again)
	}
	if _, err := s.Complete(ScheduleFiringCompleted{FiringID: "fir_other", Outcome: FiringStarted}); err == nil {
		t.Error("got no error completing a firing that is not the schedule's; want one")
	}
}

func TestSwitchingOnOrChangingTheExpressionDoesNotCatchUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*ScheduleSettings)
		restart bool
	}{
		{"switched on", func(s *ScheduleSettings) { s.Enabled = true }, true},
		{"new expression", func(s *ScheduleSettings) { s.Enabled, s.Cron = true, "30 * * * *" }, true},
		{"new name only", func(s *ScheduleSettings) { s.Enabled, s.Name = true, "renamed" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := hourlySettings()
			set.Enabled = tc.name != "switched on"
			s, v := newTestSchedule(t, set)
			if tc.name == "switched on" {
				if evs, _ := s.Fire(scheduleTime(t, "2025-01-01T05:00:00Z"), "w"); evs != nil {
					t.Fatalf("got %v from a switched-off schedule; want nothing", evs)
				}
			}
			next := s.ScheduleSettings
			tc.change(&next)
			evs, err := s.Update(scheduleCreator, next, scheduleTime(t, "2025-01-01T05:10:00Z"))
			if err != nil || len(evs) != 1 {
				t.Fatalf("got %v %v; want one update", evs, err)
			}
			applySchedule(s, v, evs)
			fired, _ := s.Fire(scheduleTime(t, "2025-01-01T05:20:00Z"), "w")
			if tc.restart && fired != nil {
				t.Errorf("got %v; want nothing caught up from before the change", fired)
			}
			if !tc.restart && (len(fired) != 1 || !fired[0].(ScheduleFired).ScheduledFor.Equal(scheduleTime(t, "2025-01-01T05:00:00Z"))) {
				t.Errorf("got %v; want the 05:00 occurrence still due", fired)
			}
		})
	}
}

func TestScheduleSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*ScheduleSettings)
		field  string
	}{
		{"no name", func(s *ScheduleSettings) { s.Name = " " }, "name"},
		{"bad cron", func(s *ScheduleSettings) { s.Cron = "0 0 0 * * *" }, "cron"},
		{"no goal", func(s *ScheduleSettings) { s.Goal = "" }, "goal"},
		{"external executor", func(s *ScheduleSettings) { s.Executor = ExecutorExternal }, "executor"},
		{"too many steps", func(s *ScheduleSettings) { s.MaxSteps = MaxRunMaxSteps + 1 }, "maxSteps"},
		{"deadline too short", func(s *ScheduleSettings) { s.DeadlineSeconds = 1 }, "deadlineSeconds"},
		{"empty success check", func(s *ScheduleSettings) { s.SuccessCheck = &SuccessCheck{} }, "successCheck"},
		{"script not an object", func(s *ScheduleSettings) { s.Script = []byte(`[1]`) }, "script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := hourlySettings()
			tc.change(&set)
			_, err := (&Schedule{}).Create(scheduleCreator, "sch_1", set, time.Now())
			var de *Error
			if !errors.As(err, &de) || de.Code != CodeInvalidArgument || de.Extra["field"] != tc.field {
				t.Errorf("got %v; want invalid_argument naming %s", err, tc.field)
			}
		})
	}
	if _, err := (&Schedule{}).Create(Auth{OrgID: "org_a", Scopes: []Scope{ScopeRunsStart}}, "sch_1", hourlySettings(), time.Now()); ErrorCode(err) != CodePermissionDenied {
		t.Errorf("got %v creating without devices:act; want permission_denied", err)
	}
}

func TestAScheduleActsAsItsCreator(t *testing.T) {
	s, _ := newTestSchedule(t, hourlySettings())
	if got := s.Auth(); !reflect.DeepEqual(got, scheduleCreator) {
		t.Errorf("got %+v; want the creator's authorization %+v", got, scheduleCreator)
	}
}

func TestAnotherOrganisationsScheduleIsNotFound(t *testing.T) {
	set := hourlySettings()
	set.DeviceID = "dev_1"
	s, _ := newTestSchedule(t, set)
	for _, a := range []Auth{
		{OrgID: "org_b", Scopes: AllScopes},
		{OrgID: "org_a", Scopes: AllScopes, Devices: []string{"dev_2"}},
	} {
		if _, err := s.Delete(a, time.Now()); ErrorCode(err) != CodeNotFound {
			t.Errorf("got %v for %+v; want not_found", err, a)
		}
	}
	missing := &Schedule{}
	_, errMissing := missing.Delete(Auth{OrgID: "org_b", Scopes: AllScopes}, time.Now())
	_, errOther := s.Delete(Auth{OrgID: "org_b", Scopes: AllScopes}, time.Now())
	if ErrorCode(errMissing) != ErrorCode(errOther) {
		t.Errorf("got %v and %v; want one answer", errMissing, errOther)
	}
}

func TestScheduleTriggeredCarriesExactlyTheSpecFields(t *testing.T) {
	src, ok := WebhookSourceFor(ScheduleFiringCompleted{}.EventName())
	if !ok || src.Event != WebhookScheduleTriggered {
		t.Fatalf("got %+v %v; want schedule.firing_completed to cause schedule.triggered", src, ok)
	}
	at := scheduleTime(t, "2025-01-01T01:00:00Z")
	data, target, ok := src.Build(ScheduleFiringCompleted{ScheduleID: "sch_1", FiringID: "fir_1", Name: "nightly", ScheduledFor: at,
		Outcome: FiringStarted, AgentRunID: "arun_1", RunID: "run_1", DeviceID: "dev_1"})
	if !ok || target != "" {
		t.Fatalf("got ok %v target %q; want a delivery to every subscriber", ok, target)
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"agentRunId", "name", "scheduleId", "scheduledFor"}; !slices.Equal(keys, want) {
		t.Errorf("got fields %v; want %v", keys, want)
	}
	if data["scheduledFor"] != "2025-01-01T01:00:00.000000Z" || data["agentRunId"] != "arun_1" || data["name"] != "nightly" {
		t.Errorf("got %v", data)
	}
	for _, outcome := range []string{FiringNoDevice, FiringFailed, FiringAbandoned} {
		if _, _, ok := src.Build(ScheduleFiringCompleted{Outcome: outcome}); ok {
			t.Errorf("outcome %s: got a delivery; want none (the firing got no device)", outcome)
		}
	}
}
