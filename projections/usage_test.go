package projections_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// usageRunner runs the usage projection alone over s until the test ends.
func usageRunner(t *testing.T, s *eventstore.Store) *projections.Runner {
	t.Helper()
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Usage{}, projections.Copilot{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// usageQuery is the usage query over store, counting up to now and
// waiting for the usage read model of r.
func usageQuery(store *eventstore.Store, r *projections.Runner, now func() time.Time) provisioning.GetUsageHandler {
	return provisioning.GetUsageHandler{Provisioning: provisioning.New(provisioning.Config{Store: store, Now: now,
		ReadModels: testutil.ReadModels{RM: r}})}
}

// usageRowsText dumps the usage read model as text, row by row.
func usageRowsText(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(testutil.Context(t), `SELECT u::text FROM usage_intervals u ORDER BY lease_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		b.WriteString(s + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// reportText renders a report for comparison: period, as-of, devices and
// totals.
func reportText(r provisioning.UsageReport) string {
	return fmt.Sprintf("%s asOf=%s devices=%+v lease=%s run=%s", r.Period.Name(), r.AsOf.UTC().Format(time.RFC3339Nano), r.Devices, r.Lease, r.Run)
}

// TestUsageFromRealCommands drives two sim phones through the real
// commands on an injected clock, across the end of January:
//   - phone A: a person's lease acquired at 23:30, renewed, released at
//     00:40 (split 30 min January, 40 min February); a lease that runs out
//     at 01:10 and is recorded expired by the expiry command at 01:30; a
//     lease that runs out at 01:50 and is recorded expired by the next
//     acquisition at 02:00, still held at 02:05;
//   - phone B: a run holding the lease 01:00–01:20 (cancelled); a second
//     run 01:30–01:40, parked for a person, who holds the phone
//     01:45–01:50 and hands it back by resuming the run (released and
//     acquired in one append), which still holds it at 02:05.
//
// The report as of 02:05 counts each lease to its end (an expired one to
// its expiry, not to when that was noticed) and open ones to 02:05; the
// usage projection rebuilt from position 0 holds the same rows and gives
// the same reports. Another organisation sees nothing; a key narrowed to
// phone A sees phone A only; a key without devices:read is refused.
func TestUsageFromRealCommands(t *testing.T) {
	ctx := testutil.Context(t)
	clock := fleettest.NewClock(time.Date(2026, 1, 31, 23, 30, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 2, Clock: clock})
	ur := usageRunner(t, env.Store)
	devA, devB := env.DeviceIDs[0], env.DeviceIDs[1]
	op := env.Auth
	set := func(hhmm string) {
		t.Helper()
		tm, err := time.Parse("2006-01-02 15:04", hhmm)
		if err != nil {
			t.Fatal(err)
		}
		clock.Set(tm)
	}
	acquire := func(dev string, ttl int) string {
		t.Helper()
		l, err := env.Fleet.AcquireLease().Handle(ctx, fleet.AcquireLease{Auth: op, DeviceID: dev, TTLSeconds: ttl})
		if err != nil {
			t.Fatalf("acquire %s at %s: %v", dev, clock.Now(), err)
		}
		return l.LeaseID
	}

	// Phone A.
	lease := acquire(devA, 3600)
	set("2026-02-01 00:10")
	if _, err := env.Fleet.RenewLease().Handle(ctx, fleet.RenewLease{Auth: op, DeviceID: devA, LeaseID: lease, TTLSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	set("2026-02-01 00:40")
	if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(ctx, fleet.ReleaseLease{Auth: op, DeviceID: devA, LeaseID: lease})); err != nil {
		t.Fatal(err)
	}
	set("2026-02-01 01:00")
	acquire(devA, 600)

	// Phone B: a run, cancelled after 20 minutes.
	run, err := (runs.StartRunHandler{Runs: env.Runs}).Handle(ctx, runs.StartRun{Auth: op, DeviceID: devB, Goal: "open notes", Executor: domain.ExecutorExternal,
		DeadlineSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	set("2026-02-01 01:20")
	if _, err := (runs.CancelRunHandler{Runs: env.Runs}).Handle(ctx, runs.CancelRun{Auth: op, RunID: run.Run.RunID}); err != nil {
		t.Fatal(err)
	}

	set("2026-02-01 01:30")
	if ok, err := env.Fleet.ExpireLease().Handle(ctx, fleet.ExpireLease{DeviceID: devA}); err != nil || !ok {
		t.Fatalf("expire phone A's lease: got %v, %v; want it recorded expired", ok, err)
	}
	run2, err := (runs.StartRunHandler{Runs: env.Runs}).Handle(ctx, runs.StartRun{Auth: op, DeviceID: devB, Goal: "open notes", Executor: domain.ExecutorExternal,
		DeadlineSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, _ := strings.Cut(run2.VrxBaseURL, "/vrx/")
	set("2026-02-01 01:40")
	if _, err := (runs.RunNeedsUserHandler{Runs: env.Runs}).Handle(ctx, runs.RunNeedsUser{Access: runs.RunAccess{Token: tok}, Reason: "captcha", DeadlineSeconds: 1200}); err != nil {
		t.Fatal(err)
	}
	acquire(devA, 600)
	set("2026-02-01 01:45")
	acquire(devB, 600)
	set("2026-02-01 01:50")
	if _, err := (runs.ResumeRunHandler{Runs: env.Runs}).Handle(ctx, runs.ResumeRun{Auth: op, RunID: run2.Run.RunID}); err != nil {
		t.Fatal(err)
	}
	set("2026-02-01 02:00")
	acquire(devA, 600) // the 01:40 lease ran out at 01:50: recorded expired in the same append
	set("2026-02-01 02:05")

	q := usageQuery(env.Store, ur, clock.Now)
	feb, err := q.Handle(ctx, provisioning.GetUsage{Auth: op})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]domain.DeviceUsage{
		devA: {DeviceID: devA, Lease: (40 + 10 + 10 + 5) * time.Minute},
		devB: {DeviceID: devB, Lease: 5 * time.Minute, Run: (20 + 10 + 15) * time.Minute},
	}
	if feb.Period.Name() != "2026-02-01" || !feb.AsOf.Equal(clock.Now()) || len(feb.Devices) != 2 {
		t.Fatalf("got %s; want February as of 02:05 with both phones", reportText(feb))
	}
	for _, d := range feb.Devices {
		if d != want[d.DeviceID] {
			t.Errorf("got %+v; want %+v", d, want[d.DeviceID])
		}
	}
	if feb.Devices[0].DeviceID > feb.Devices[1].DeviceID {
		t.Errorf("devices %+v; want them in id order", feb.Devices)
	}
	if feb.Lease != 70*time.Minute || feb.Run != 45*time.Minute {
		t.Errorf("got lease %s run %s; want 1h10m and 45m", feb.Lease, feb.Run)
	}
	jan, err := q.Handle(ctx, provisioning.GetUsage{Auth: op, Period: "2026-01-01"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jan.Devices) != 1 || jan.Devices[0] != (domain.DeviceUsage{DeviceID: devA, Lease: 30 * time.Minute}) || jan.Run != 0 {
		t.Errorf("January: got %s; want phone A's 30 minutes", reportText(jan))
	}
	var runRows, openRows int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE run_id IN ($1, $2)), count(*) FILTER (WHERE ended_at IS NULL)
		FROM usage_intervals`, run.Run.RunID, run2.Run.RunID).Scan(&runRows, &openRows); err != nil {
		t.Fatal(err)
	}
	if runRows != 3 || openRows != 2 {
		t.Errorf("got %d intervals attributed to the runs and %d open; want 3 (one run, the other twice) and 2", runRows, openRows)
	}

	t.Run("access", func(t *testing.T) {
		other := domain.LocalOperator("org_someone_else")
		if r, err := q.Handle(ctx, provisioning.GetUsage{Auth: other}); err != nil || len(r.Devices) != 0 || r.Total() != 0 {
			t.Errorf("another organisation: got %s, %v; want nothing", reportText(r), err)
		}
		foreign, errF := q.Handle(ctx, provisioning.GetUsage{Auth: other, DeviceID: devA})
		missing, errM := q.Handle(ctx, provisioning.GetUsage{Auth: other, DeviceID: domain.NewID(domain.PrefixDevice)})
		if errF != nil || errM != nil || reportText(foreign) != reportText(missing) || len(foreign.Devices) != 0 {
			t.Errorf("another organisation's phone: got %s (%v); a missing one: %s (%v); want one empty answer",
				reportText(foreign), errF, reportText(missing), errM)
		}
		key := domain.Auth{OrgID: env.OrgID, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesRead},
			Devices: []string{devA}}
		r, err := q.Handle(ctx, provisioning.GetUsage{Auth: key})
		if err != nil || len(r.Devices) != 1 || r.Devices[0] != want[devA] || r.Total() != want[devA].Total() {
			t.Errorf("a key narrowed to phone A: got %s, %v; want phone A only", reportText(r), err)
		}
		if r, err := q.Handle(ctx, provisioning.GetUsage{Auth: key, DeviceID: devB}); err != nil || len(r.Devices) != 0 {
			t.Errorf("a key narrowed to phone A asking for phone B: got %s, %v; want nothing", reportText(r), err)
		}
		if r, err := q.Handle(ctx, provisioning.GetUsage{Auth: op, DeviceID: devB}); err != nil || len(r.Devices) != 1 || r.Devices[0] != want[devB] {
			t.Errorf("phone B alone: got %s, %v; want phone B", reportText(r), err)
		}
		key.Scopes = []domain.Scope{domain.ScopeRunsStart}
		if _, err := q.Handle(ctx, provisioning.GetUsage{Auth: key}); domain.ErrorCode(err) != domain.CodePermissionDenied {
			t.Errorf("a key without devices:read: got %v; want permission_denied", err)
		}
		app := domain.Auth{OrgID: env.OrgID, Kind: domain.PrincipalApp, UserID: "u", ClientID: "c", Scopes: domain.AllScopes}
		if _, err := q.Handle(ctx, provisioning.GetUsage{Auth: app}); domain.ErrorCode(err) != domain.CodePermissionDenied {
			t.Errorf("an OAuth app: got %v; want permission_denied", err)
		}
		member := domain.Auth{OrgID: env.OrgID, Kind: domain.PrincipalConsole, UserID: "u_m", Role: domain.RoleMember}
		if r, err := q.Handle(ctx, provisioning.GetUsage{Auth: member}); err != nil || reportText(r) != reportText(feb) {
			t.Errorf("a member: got %s, %v; want the organisation's report", reportText(r), err)
		}
		if _, err := q.Handle(ctx, provisioning.GetUsage{Auth: op, Period: "2026-02-15"}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
			t.Errorf("a period that is not a month's first day: got %v; want invalid_argument", err)
		}
	})

	// Rebuild from position 0: the same rows, the same reports.
	rows := usageRowsText(t, env.Pool)
	if strings.Count(rows, "\n") != 8 {
		t.Fatalf("got rows\n%s; want one per lease (8)", rows)
	}
	if err := ur.Rebuild(ctx, projections.UsageName, nil); err != nil {
		t.Fatal(err)
	}
	if again := usageRowsText(t, env.Pool); again != rows {
		t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", rows, again)
	}
	for _, period := range []string{"2026-01-01", "2026-02-01"} {
		live := feb
		if period == "2026-01-01" {
			live = jan
		}
		rebuilt, err := q.Handle(ctx, provisioning.GetUsage{Auth: op, Period: period})
		if err != nil {
			t.Fatal(err)
		}
		if reportText(rebuilt) != reportText(live) {
			t.Errorf("%s after the rebuild: got %s; want %s", period, reportText(rebuilt), reportText(live))
		}
	}
}

// appendUsageEvent appends ev to stream for org as another part of the
// service would.
func appendUsageEvent(t *testing.T, s *eventstore.Store, stream, org string, ev domain.Event) eventstore.Appended {
	t.Helper()
	news, err := eventstore.Encode(domain.Events, org, ev)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Append(testutil.Context(t), stream, eventstore.AnyVersion, news...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestUsageClosesEveryEnding records, event by event, the endings of a
// lease that no command issues today but the log may hold: a lease
// superseded by a later acquisition with no end recorded, a device
// registered afresh while leased, a run ending or parking without its
// lease's end (closed at the run's time, never past the lease's expiry),
// and a device retired from the organisation; and the plain endings one
// by one (expired, renewed then released). Each interval ends where it
// should, and nothing after an end changes it.
func TestUsageClosesEveryEnding(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r := usageRunner(t, s)
	h := time.Date(2026, 4, 2, 9, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return h.Add(time.Duration(n) * time.Minute) }
	const org = "org_usage_endings"
	person := domain.Actor{Kind: domain.ActorUser, ID: "u_1"}
	acquired := func(dev, lease string, holder domain.Actor, from, until int) {
		appendUsageEvent(t, s, domain.DeviceStream(dev), org, domain.LeaseAcquired{DeviceID: dev, LeaseID: lease, FencingToken: 1,
			Holder: holder, AcquiredAt: m(from), ExpiresAt: m(until)})
	}
	// Superseded: l1 never ends on its own; l2 takes the device at 10.
	acquired("dev_1", "lse_1", person, 0, 60)
	acquired("dev_1", "lse_2", person, 10, 20)
	appendUsageEvent(t, s, domain.DeviceStream("dev_1"), org, domain.LeaseReleased{DeviceID: "dev_1", LeaseID: "lse_2", ReleasedAt: m(15)})
	// A late release of l1 changes nothing: it ended at 10.
	appendUsageEvent(t, s, domain.DeviceStream("dev_1"), org, domain.LeaseReleased{DeviceID: "dev_1", LeaseID: "lse_1", ReleasedAt: m(40)})
	// Registered afresh at 25 while leased.
	acquired("dev_2", "lse_3", person, 5, 65)
	appendUsageEvent(t, s, domain.DeviceStream("dev_2"), org, domain.DeviceRegistered{DeviceID: "dev_2", OrgID: org, Name: "again",
		Backend: domain.BackendSim, RegisteredAt: m(25)})
	// A run ends at 30 with no lease end; another parks at 50, past its
	// lease's expiry at 45.
	run := domain.Actor{Kind: domain.ActorRun, ID: "run_1"}
	acquired("dev_3", "lse_4", run, 0, 90)
	appendUsageEvent(t, s, domain.RunStream("run_1"), org, domain.RunEnded{RunID: "run_1", DeviceID: "dev_3", State: domain.RunStateSucceeded, EndedAt: m(30)})
	run2 := domain.Actor{Kind: domain.ActorRun, ID: "run_2"}
	acquired("dev_4", "lse_5", run2, 0, 45)
	appendUsageEvent(t, s, domain.RunStream("run_2"), org, domain.RunParked{RunID: "run_2", DeviceID: "dev_4", At: m(50)})
	// Recorded expired at its expiry, 30; renewed to 50 and released at
	// 40, after which a renewal changes nothing.
	acquired("dev_6", "lse_7", person, 0, 30)
	appendUsageEvent(t, s, domain.DeviceStream("dev_6"), org, domain.LeaseExpired{DeviceID: "dev_6", LeaseID: "lse_7", ExpiredAt: m(30)})
	acquired("dev_7", "lse_8", person, 0, 20)
	appendUsageEvent(t, s, domain.DeviceStream("dev_7"), org, domain.LeaseRenewed{DeviceID: "dev_7", LeaseID: "lse_8", RenewedAt: m(10), ExpiresAt: m(50)})
	appendUsageEvent(t, s, domain.DeviceStream("dev_7"), org, domain.LeaseReleased{DeviceID: "dev_7", LeaseID: "lse_8", ReleasedAt: m(40)})
	appendUsageEvent(t, s, domain.DeviceStream("dev_7"), org, domain.LeaseRenewed{DeviceID: "dev_7", LeaseID: "lse_8", RenewedAt: m(45), ExpiresAt: m(99)})
	// Retired at 35 (it left the organisation) with its lease's end
	// missing.
	acquired("dev_5", "lse_6", person, 20, 80)
	last := appendUsageEvent(t, s, domain.DeviceStream("dev_5"), org, domain.DeviceRetired{DeviceID: "dev_5", OrgID: org, Reason: "fulfilment_cancelled",
		At: m(35)})
	ctx := testutil.Context(t)
	if err := r.WaitFor(ctx, projections.UsageName, last); err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT lease_id, coalesce(run_id, '-'), coalesce(to_char(ended_at AT TIME ZONE 'UTC', 'HH24:MI'), 'open')
		FROM usage_intervals ORDER BY lease_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var lease, runID, end string
		if err := rows.Scan(&lease, &runID, &end); err != nil {
			t.Fatal(err)
		}
		got[lease] = runID + " " + end
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lse_1": "- 09:10", "lse_2": "- 09:15", "lse_3": "- 09:25", "lse_4": "run_1 09:30", "lse_5": "run_2 09:45", "lse_6": "- 09:35",
		"lse_7": "- 09:30", "lse_8": "- 09:40",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got intervals (run, end) %v; want %v", got, want)
	}
	rep, err := usageQuery(s, r, func() time.Time { return m(100) }).Handle(ctx, provisioning.GetUsage{Auth: domain.LocalOperator(org)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lease != (10+5+20+15+30+40)*time.Minute || rep.Run != (30+45)*time.Minute {
		t.Errorf("got %s; want 120 minutes of leases and 75 of runs", reportText(rep))
	}
}
