package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/runs"
	"phonefleet/commands/schedules"
	"phonefleet/domain"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Schedules fires due schedules: every Interval it reads the schedules
// read model for schedules whose next occurrence has come (by its
// injected clock) and, for each, records the firing's intent, starts the
// run as the schedule's creator, and records what that came to.
//
// The order is what keeps a firing to one run. The intent
// (schedule.fired, with a firing id derived from the schedule and the
// occurrence) is appended at the schedule stream's expected version, so
// of several instances that see one occurrence due exactly one records it
// and goes on to start the run; the others find nothing due. Only then is
// the run started, and its outcome recorded (schedule.firing_completed:
// the run, no_device, or failed). A start whose outcome is ambiguous (an
// unclassified error: the run may have committed) is not retried: the
// firing stays in flight until StaleAfter has passed, and is then settled
// from the record (ResolveScheduleFiring: the run of the firing if one
// was recorded, else abandoned). The alternative, the Reactor's
// at-least-once retry, would start two runs for one firing.
//
// After downtime a schedule fires once, for its latest due occurrence;
// the earlier ones are skipped and the firing says so (Skipped).
type Schedules struct {
	// Fire, Complete and Resolve are the application's schedule firing
	// commands, StartRun its run start.
	Fire     cqrs.Handler[schedules.FireSchedule, schedules.ScheduleFiring]
	Complete cqrs.Handler[schedules.CompleteScheduleFiring, bool]
	Resolve  cqrs.Handler[schedules.ResolveScheduleFiring, string]
	StartRun cqrs.Handler[runs.StartRun, runs.StartedRun]
	Pool     *pgxpool.Pool
	// Now is the clock that decides what is due; nil means clock.Now.
	Now func() time.Time
	// Interval between passes; zero means one second.
	Interval time.Duration
	// StaleAfter is how long a firing may stay in flight before it is
	// settled from the record; zero means two minutes. Starting a run
	// takes far less.
	StaleAfter time.Duration
	// ID names the instance in the firings it records; empty means a
	// random one.
	ID     string
	Logger *slog.Logger
}

// Fired is what a pass did with one schedule: a firing it recorded and
// what it came to (Outcome empty: still in flight, to be settled), or a
// stale firing it settled (Resolved).
type Fired struct {
	ScheduleID   string
	FiringID     string
	ScheduledFor time.Time
	Outcome      string
	AgentRunID   string
	Resolved     bool
}

const schedulesPassLimit = 100

// NewSchedules fills w's defaults.
func NewSchedules(w Schedules) Schedules {
	if w.Now == nil {
		w.Now = clock.Now
	}
	if w.StaleAfter <= 0 {
		w.StaleAfter = 2 * time.Minute
	}
	if w.ID == "" {
		w.ID = uuid.NewString()[:8]
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	return w
}

// sweep is the worker on the one sweep loop; it acts as "schedules:<ID>".
func (w Schedules) sweep() Sweep[[]Fired] {
	w = NewSchedules(w)
	return Sweep[[]Fired]{Worker: "schedules:" + w.ID, Interval: w.Interval, Default: time.Second, Logger: w.Logger,
		Pass: w.pass}
}

// RunOnce fires every schedule due at the clock's now and settles every
// stale firing, and reports what it did.
func (w Schedules) RunOnce(ctx context.Context) ([]Fired, error) { return w.sweep().Once(ctx) }

// Run fires schedules until ctx ends.
func (w Schedules) Run(ctx context.Context) { w.sweep().Run(ctx) }

// pass is RunOnce on a worker with its defaults filled.
func (w Schedules) pass(ctx context.Context) ([]Fired, error) {
	now := w.Now()
	due, err := projections.DueSchedules(ctx, w.Pool, now, now.Add(-w.StaleAfter), schedulesPassLimit)
	if err != nil {
		return nil, err
	}
	var out []Fired
	for _, d := range due {
		if d.Stale {
			outcome, err := w.Resolve.Handle(ctx, schedules.ResolveScheduleFiring{ScheduleID: d.ScheduleID, At: now, StaleAfter: w.StaleAfter})
			if err != nil {
				return out, err
			}
			if outcome != "" {
				out = append(out, Fired{ScheduleID: d.ScheduleID, Outcome: outcome, Resolved: true})
			}
			continue
		}
		f, err := w.Fire.Handle(ctx, schedules.FireSchedule{ScheduleID: d.ScheduleID, At: now, Worker: w.ID})
		if err != nil {
			return out, err
		}
		if !f.Fired {
			continue
		}
		// The intent is on record: see the firing through to its outcome
		// even if the worker is being stopped.
		out = append(out, w.start(context.WithoutCancel(ctx), f))
	}
	return out, nil
}

// start starts the firing's run and records its outcome.
func (w Schedules) start(ctx context.Context, f schedules.ScheduleFiring) Fired {
	res := Fired{ScheduleID: f.ScheduleID, FiringID: f.FiringID, ScheduledFor: f.ScheduledFor}
	c := schedules.CompleteScheduleFiring{ScheduleID: f.ScheduleID, FiringID: f.FiringID}
	started, err := w.StartRun.Handle(ctx, f.Run)
	var de *domain.Error
	switch {
	case err == nil:
		c.Outcome, c.AgentRunID, c.RunID, c.DeviceID = domain.FiringStarted, started.Run.AgentRunID, started.Run.RunID, started.Run.DeviceID
	case !errors.As(err, &de) || de.Code == domain.CodeInternal:
		// Unclassified: the run may have been recorded before the error.
		// Leave the firing in flight; it is settled from the record later.
		w.Logger.Warn("schedule firing: starting its run failed; the firing will be settled from the record",
			"schedule", f.ScheduleID, "firing", f.FiringID, "err", err)
		return res
	case de.Code == domain.CodeDeviceUnavailable && (de.Extra["reason"] == domain.ReasonAlreadyLeased || de.Extra["reason"] == domain.ReasonOffline || de.Extra["reason"] == domain.ReasonAsleep):
		c.Outcome, c.Reason, c.Detail = domain.FiringNoDevice, de.Extra["reason"].(string), de.Message
	default:
		c.Outcome, c.Reason, c.Detail = domain.FiringFailed, string(de.Code), de.Message
	}
	c.At = w.Now()
	if _, err := w.Complete.Handle(ctx, c); err != nil {
		w.Logger.Warn("schedule firing: recording its outcome failed; the firing will be settled from the record",
			"schedule", f.ScheduleID, "firing", f.FiringID, "err", err)
		return res
	}
	res.Outcome, res.AgentRunID = c.Outcome, c.AgentRunID
	return res
}
