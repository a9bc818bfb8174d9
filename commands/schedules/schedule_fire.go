package schedules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// FireSchedule records the firing of a schedule's due occurrence, if one
// is due at At (the firing worker). It is the firing's intent, recorded
// before its run starts: appended at the schedule stream's version, so
// that of several instances firing one occurrence exactly one records it
// (the others find nothing due on the new state).
type FireSchedule struct {
	ScheduleID string
	// At is the firing worker's clock.
	At time.Time
	// Worker names the instance firing, for the record.
	Worker string
}

// ScheduleFiring is a firing this call recorded (Fired), and the run it
// is to start: the schedule's settings, as its creator.
type ScheduleFiring struct {
	Fired bool
	domain.ScheduleFired
	Name string
	Run  runs.StartRun
}

// FireScheduleHandler handles FireSchedule.
type FireScheduleHandler struct {
	*Schedules
}

// Handle answers Fired false when nothing is due (or another instance
// fired it first).
func (h FireScheduleHandler) Handle(ctx context.Context, cmd FireSchedule) (ScheduleFiring, error) {
	at := cmd.At.UTC().Truncate(time.Microsecond)
	st, c, err := h.repo.Update(ctx, cmd.ScheduleID, func(s *domain.Schedule) ([]domain.Event, error) {
		return s.Fire(at, cmd.Worker)
	})
	if err != nil || len(c.Appends) == 0 {
		return ScheduleFiring{}, err
	}
	// The read model shows the firing in flight before its run starts, so
	// later passes of any instance see it so.
	if err := h.wait(ctx, c); err != nil {
		return ScheduleFiring{}, err
	}
	f := ScheduleFiring{Fired: true, Name: st.Name, ScheduleFired: domain.ScheduleFired{ScheduleID: st.ID, FiringID: st.Last.ID,
		ScheduledFor: st.Last.ScheduledFor, FiredAt: st.Last.FiredAt}}
	f.Run = runs.StartRun{Auth: st.Auth(), DeviceID: st.DeviceID, Goal: st.Goal, MaxSteps: st.MaxSteps,
		DeadlineSeconds: st.DeadlineSeconds, Executor: st.Executor, SuccessCheck: st.SuccessCheck, Script: st.Script,
		ScheduleID: st.ID}
	if f.Run.Auth, err = h.currentAuth(ctx, f.Run.Auth, at); err != nil {
		return ScheduleFiring{}, err
	}
	return f, nil
}

// currentAuth is the schedule's creator as they stand now: a key that was
// revoked or expired since it made the schedule starts nothing (its
// firings fail with permission_denied), and one narrowed since starts runs
// only within its scopes and devices now. A person's grant is as recorded.
func (h FireScheduleHandler) currentAuth(ctx context.Context, a domain.Auth, now time.Time) (domain.Auth, error) {
	if a.Kind != domain.PrincipalAPIKey {
		return a, nil
	}
	k, found, err := projections.APIKeyReader{DB: h.pool}.Lookup(ctx, a.APIKeyID)
	if err != nil {
		return a, err
	}
	if !found || k.OrgID != a.OrgID || k.State(now) != domain.KeyStateActive {
		a.Scopes = nil
		return a, nil
	}
	a.Scopes = slices.DeleteFunc(slices.Clone(a.Scopes), func(s domain.Scope) bool { return !slices.Contains(k.Scopes, s) })
	if k.DeviceIDs != nil {
		a.Devices = k.DeviceIDs
	}
	return a, nil
}

// CompleteScheduleFiring records what a firing came to (the firing
// worker, once starting its run answered).
type CompleteScheduleFiring struct {
	ScheduleID string
	FiringID   string
	// Outcome is domain.FiringStarted (with the run), FiringNoDevice or
	// FiringFailed (with the refusal's code and message).
	Outcome    string
	AgentRunID string
	RunID      string
	DeviceID   string
	Reason     string
	Detail     string
	At         time.Time
}

// CompleteScheduleFiringHandler handles CompleteScheduleFiring.
type CompleteScheduleFiringHandler struct {
	*Schedules
}

// Handle records the outcome once and answers whether this call recorded
// it (false: it was on record already).
func (h CompleteScheduleFiringHandler) Handle(ctx context.Context, cmd CompleteScheduleFiring) (bool, error) {
	_, c, err := h.repo.Update(ctx, cmd.ScheduleID, func(s *domain.Schedule) ([]domain.Event, error) {
		return s.Complete(domain.ScheduleFiringCompleted{FiringID: cmd.FiringID, Outcome: cmd.Outcome,
			AgentRunID: cmd.AgentRunID, RunID: cmd.RunID, DeviceID: cmd.DeviceID, Reason: cmd.Reason, Detail: cmd.Detail,
			At: cmd.At.UTC().Truncate(time.Microsecond)})
	})
	if err != nil {
		return false, err
	}
	return len(c.Appends) > 0, h.wait(ctx, c)
}

// ResolveScheduleFiring settles a firing whose outcome has not been
// recorded for StaleAfter since it fired (the firing worker): the instance
// that fired it stopped between recording the intent and recording what
// starting the run came to. The run, if it started, is found among the
// run.started events recorded after the firing's own event that name the
// schedule, and the firing is completed started with it; otherwise it is
// completed abandoned (a run of it that starts even later supersedes
// that). The run is never started here: a firing starts at most one run.
type ResolveScheduleFiring struct {
	ScheduleID string
	At         time.Time
	StaleAfter time.Duration
}

// ResolveScheduleFiringHandler handles ResolveScheduleFiring.
type ResolveScheduleFiringHandler struct {
	*Schedules
}

// Handle answers the outcome recorded, or "" when the firing was not
// stale (or not in flight).
func (h ResolveScheduleFiringHandler) Handle(ctx context.Context, cmd ResolveScheduleFiring) (string, error) {
	st, _, err := h.repo.Load(ctx, cmd.ScheduleID)
	if err != nil {
		return "", err
	}
	if !st.Last.Pending() || st.Last.FiredAt.Add(cmd.StaleAfter).After(cmd.At) {
		return "", nil
	}
	complete := CompleteScheduleFiring{ScheduleID: st.ID, FiringID: st.Last.ID, Outcome: domain.FiringAbandoned,
		Reason: "firing_interrupted", Detail: "the instance firing it stopped before recording whether its run started; no run of it is on record", At: cmd.At}
	run, found, err := h.runOfFiring(ctx, st)
	if err != nil {
		return "", err
	}
	if found {
		complete = CompleteScheduleFiring{ScheduleID: st.ID, FiringID: st.Last.ID, Outcome: domain.FiringStarted,
			AgentRunID: run.AgentRunID, RunID: run.RunID, DeviceID: run.DeviceID, At: cmd.At}
	}
	recorded, err := CompleteScheduleFiringHandler(h).Handle(ctx, complete)
	if err != nil || !recorded {
		return "", err
	}
	return complete.Outcome, nil
}

// runOfFiring finds the run started by st's latest firing: the first
// run.started naming the schedule recorded after the firing's event. A
// run of an earlier firing was recorded before that firing completed,
// hence before this firing's event.
func (h ResolveScheduleFiringHandler) runOfFiring(ctx context.Context, st domain.Schedule) (domain.RunStarted, bool, error) {
	evs, err := h.store.Load(ctx, domain.ScheduleStream(st.ID), st.Last.Version)
	if err != nil {
		return domain.RunStarted{}, false, err
	}
	if len(evs) == 0 || evs[0].StreamVersion != st.Last.Version {
		return domain.RunStarted{}, false, fmt.Errorf("schedule %s: firing event at version %d not found", st.ID, st.Last.Version)
	}
	var run domain.RunStarted
	err = h.pool.QueryRow(ctx, `SELECT data->>'runId', data->>'agentRunId', data->>'deviceId' FROM events
		WHERE position > $1 AND event_type = $2 AND org_id = $3 AND data->>'scheduleId' = $4
		ORDER BY position LIMIT 1`, evs[0].Position, domain.RunStarted{}.EventName(), st.OrgID, st.ID).
		Scan(&run.RunID, &run.AgentRunID, &run.DeviceID)
	if errors.Is(err, pgx.ErrNoRows) {
		return run, false, nil
	}
	return run, err == nil, err
}
