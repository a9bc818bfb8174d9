package projections

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Schedules is the schedules read model: one row per live schedule (its
// view, with the next occurrence it will fire for) and one per firing
// (what each firing did). It consumes schedule.* and emits nothing. The
// next occurrence is computed here from the events alone (the cron
// expression and where occurrences count from), so a rebuild computes the
// same.
type Schedules struct{}

// SchedulesName is the projection's stable name.
const SchedulesName = "schedules"

// Name implements Projection.
func (Schedules) Name() string { return SchedulesName }

// Tables implements Projection.
func (Schedules) Tables() []string { return []string{"schedules", "schedule_firings"} }

// EventTypes implements Selective.
func (Schedules) EventTypes() []string { return []string{"schedule.%"} }

// Setup implements Projection.
func (Schedules) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.schedules (
		schedule_id        text PRIMARY KEY,
		org_id             text NOT NULL,
		name               text NOT NULL,
		cron               text NOT NULL,
		timezone           text NOT NULL,
		enabled            boolean NOT NULL,
		goal               text NOT NULL,
		device_id          text,
		executor           text NOT NULL,
		max_steps          int NOT NULL,
		deadline_seconds   int NOT NULL,
		success_check      jsonb,
		script             jsonb,
		created_by_kind    text NOT NULL,
		created_by_id      text NOT NULL,
		created_at         timestamptz NOT NULL,
		updated_at         timestamptz NOT NULL,
		next_fire_at       timestamptz,
		pending_firing_id  text,
		pending_fired_at   timestamptz,
		last_scheduled_for timestamptz,
		last_outcome       text,
		last_agent_run_id  text
	);
	CREATE INDEX ON `+schema+`.schedules (org_id, schedule_id);
	CREATE INDEX ON `+schema+`.schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;
	CREATE INDEX ON `+schema+`.schedules (pending_fired_at) WHERE pending_fired_at IS NOT NULL;
	CREATE TABLE `+schema+`.schedule_firings (
		firing_id     text PRIMARY KEY,
		schedule_id   text NOT NULL,
		org_id        text NOT NULL,
		scheduled_for timestamptz NOT NULL,
		fired_at      timestamptz NOT NULL,
		skipped       boolean NOT NULL,
		outcome       text NOT NULL,
		agent_run_id  text,
		run_id        text,
		device_id     text,
		reason        text,
		detail        text,
		completed_at  timestamptz
	);
	CREATE INDEX ON `+schema+`.schedule_firings (schedule_id, scheduled_for DESC);`)
	return err
}

var scheduleEventTypes = typeSet(nameOf(domain.ScheduleCreated{}), nameOf(domain.ScheduleUpdated{}), nameOf(domain.ScheduleDeleted{}),
	nameOf(domain.ScheduleFired{}), nameOf(domain.ScheduleFiringCompleted{}))

// nextFire is the next occurrence of settings counted from since, NULL
// when the schedule is off or will not fire.
func nextFire(set domain.ScheduleSettings, since time.Time) *time.Time {
	if !set.Enabled {
		return nil
	}
	c, err := domain.ParseCron(set.Cron, set.Timezone)
	if err != nil {
		return nil
	}
	return nullTime(c.Next(since))
}

// FiringPending is the outcome column of a firing whose outcome is not on
// record yet.
const FiringPending = "pending"

// Apply implements Projection.
func (Schedules) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	scheds, firings := schema+`.schedules`, schema+`.schedule_firings`
	settings := func(set domain.ScheduleSettings) (check, script []byte) {
		if set.SuccessCheck != nil {
			check, _ = json.Marshal(set.SuccessCheck)
		}
		if len(set.Script) > 0 {
			script = set.Script
		}
		return check, script
	}
	return applyBatch(ctx, tx, events, scheduleEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.ScheduleCreated:
			check, script := settings(ev.ScheduleSettings)
			by := domain.ActorOf(domain.Auth{Kind: ev.CreatedBy.Kind, UserID: ev.CreatedBy.UserID, APIKeyID: ev.CreatedBy.APIKeyID})
			b.Queue(`INSERT INTO `+scheds+` (schedule_id, org_id, name, cron, timezone, enabled, goal, device_id, executor,
					max_steps, deadline_seconds, success_check, script, created_by_kind, created_by_id, created_at, updated_at, next_fire_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16, $17) ON CONFLICT DO NOTHING`,
				ev.ScheduleID, e.OrgID, ev.Name, ev.Cron, ev.Timezone, ev.Enabled, ev.Goal, nullString(ev.DeviceID), ev.Executor,
				ev.MaxSteps, ev.DeadlineSeconds, check, script, by.Kind, by.ID, ev.CreatedAt, nextFire(ev.ScheduleSettings, ev.CreatedAt))
		case domain.ScheduleUpdated:
			check, script := settings(ev.ScheduleSettings)
			b.Queue(`UPDATE `+scheds+` SET name = $2, cron = $3, timezone = $4, enabled = $5, goal = $6, device_id = $7,
					executor = $8, max_steps = $9, deadline_seconds = $10, success_check = $11, script = $12, updated_at = $13,
					next_fire_at = $14 WHERE schedule_id = $1`,
				ev.ScheduleID, ev.Name, ev.Cron, ev.Timezone, ev.Enabled, ev.Goal, nullString(ev.DeviceID), ev.Executor,
				ev.MaxSteps, ev.DeadlineSeconds, check, script, ev.At, nextFire(ev.ScheduleSettings, ev.CountFrom))
		case domain.ScheduleDeleted:
			b.Queue(`DELETE FROM `+scheds+` WHERE schedule_id = $1`, ev.ScheduleID)
			b.Queue(`DELETE FROM `+firings+` WHERE schedule_id = $1`, ev.ScheduleID)
		case domain.ScheduleFired:
			b.Queue(`UPDATE `+scheds+` SET pending_firing_id = $2, pending_fired_at = $3, last_scheduled_for = $4,
					last_outcome = NULL, last_agent_run_id = NULL, next_fire_at = $5 WHERE schedule_id = $1`,
				ev.ScheduleID, ev.FiringID, ev.FiredAt, ev.ScheduledFor, nullTime(ev.Next))
			b.Queue(`INSERT INTO `+firings+` (firing_id, schedule_id, org_id, scheduled_for, fired_at, skipped, outcome)
				SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM `+scheds+` WHERE schedule_id = $2)
				ON CONFLICT DO NOTHING`,
				ev.FiringID, ev.ScheduleID, e.OrgID, ev.ScheduledFor, ev.FiredAt, ev.Skipped, FiringPending)
		case domain.ScheduleFiringCompleted:
			b.Queue(`UPDATE `+scheds+` SET pending_firing_id = NULL, pending_fired_at = NULL, last_outcome = $3,
					last_agent_run_id = $4 WHERE schedule_id = $1 AND last_scheduled_for = $2`,
				ev.ScheduleID, ev.ScheduledFor, ev.Outcome, nullString(ev.AgentRunID))
			b.Queue(`UPDATE `+firings+` SET outcome = $2, agent_run_id = $3, run_id = $4, device_id = $5, reason = $6,
					detail = $7, completed_at = $8 WHERE firing_id = $1`,
				ev.FiringID, ev.Outcome, nullString(ev.AgentRunID), nullString(ev.RunID), nullString(ev.DeviceID),
				nullString(ev.Reason), nullString(ev.Detail), ev.At)
		}
		return nil
	})
}

// ScheduleView is a schedule as the schedules read model shows it.
type ScheduleView struct {
	ScheduleID string
	domain.ScheduleSettings
	CreatedBy domain.ReceiptActor
	CreatedAt time.Time
	UpdatedAt time.Time
	// NextFireAt is the next occurrence it will fire for (nil: off, or no
	// further date).
	NextFireAt *time.Time
	// LastScheduledFor and LastOutcome describe the latest firing
	// (LastOutcome "pending" while it is in flight).
	LastScheduledFor *time.Time
	LastOutcome      string
	LastAgentRunID   string
}

const scheduleColumns = `schedule_id, name, cron, timezone, enabled, goal, coalesce(device_id, ''), executor, max_steps,
	deadline_seconds, success_check, script, created_by_kind, created_by_id, created_at, updated_at, next_fire_at,
	last_scheduled_for, CASE WHEN pending_firing_id IS NOT NULL THEN 'pending' ELSE coalesce(last_outcome, '') END,
	coalesce(last_agent_run_id, '')`

func scanSchedule(row pgx.Row) (ScheduleView, error) {
	var v ScheduleView
	var check, script []byte
	var by domain.Actor
	err := row.Scan(&v.ScheduleID, &v.Name, &v.Cron, &v.Timezone, &v.Enabled, &v.Goal, &v.DeviceID, &v.Executor, &v.MaxSteps,
		&v.DeadlineSeconds, &check, &script, &by.Kind, &by.ID, &v.CreatedAt, &v.UpdatedAt, &v.NextFireAt,
		&v.LastScheduledFor, &v.LastOutcome, &v.LastAgentRunID)
	if err != nil {
		return v, err
	}
	v.CreatedBy = by.ForReceipt()
	if len(check) > 0 {
		v.SuccessCheck = &domain.SuccessCheck{}
		if err := json.Unmarshal(check, v.SuccessCheck); err != nil {
			return v, err
		}
	}
	if len(script) > 0 {
		v.Script = script
	}
	return v, nil
}

// GetSchedule reads a schedule of orgID; ok is false when there is none.
func GetSchedule(ctx context.Context, pool *pgxpool.Pool, orgID, id string) (ScheduleView, bool, error) {
	v, err := scanSchedule(pool.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM public.schedules
		WHERE org_id = $1 AND schedule_id = $2`, orgID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return ScheduleView{}, false, nil
	}
	return v, err == nil, err
}

// ScheduleQuery pages a schedule list, oldest first.
type ScheduleQuery struct {
	// After is the cursor: schedules created after this schedule id.
	After string
	Limit int
}

// SchedulePage is one page of schedules; NextAfter is empty on the last.
type SchedulePage struct {
	Schedules []ScheduleView
	NextAfter string
}

// ListSchedules returns one page of orgID's schedules, oldest first,
// leaving out those on a device outside devices (nil: all).
func ListSchedules(ctx context.Context, pool *pgxpool.Pool, orgID string, devices []string, q ScheduleQuery) (SchedulePage, error) {
	limit := ClampLimit(q.Limit)
	rows, err := pool.Query(ctx, `SELECT `+scheduleColumns+` FROM public.schedules
		WHERE org_id = $1 AND ($2::text[] IS NULL OR device_id IS NULL OR device_id = ANY($2)) AND schedule_id > $3
		ORDER BY schedule_id LIMIT $4`, orgID, devices, q.After, limit+1)
	if err != nil {
		return SchedulePage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScheduleView, error) { return scanSchedule(r) })
	if err != nil {
		return SchedulePage{}, err
	}
	page := SchedulePage{Schedules: out}
	if len(out) > limit {
		page.Schedules = out[:limit]
		page.NextAfter = out[limit-1].ScheduleID
	}
	return page, nil
}

// FiringView is one firing of a schedule: the occurrence, when it fired,
// and what it came to (Outcome pending while in flight).
type FiringView struct {
	FiringID     string
	ScheduleID   string
	ScheduledFor time.Time
	FiredAt      time.Time
	Skipped      bool
	Outcome      string
	AgentRunID   string
	RunID        string
	DeviceID     string
	Reason       string
	Detail       string
	CompletedAt  *time.Time
}

// FiringQuery pages a schedule's firings, newest first.
type FiringQuery struct {
	// Before is the cursor: firings of occurrences before this one.
	Before time.Time
	Limit  int
}

// FiringPage is one page of firings; NextBefore is nil on the last.
type FiringPage struct {
	Firings    []FiringView
	NextBefore *time.Time
}

// ListScheduleFirings returns one page of a schedule's firings.
func ListScheduleFirings(ctx context.Context, pool *pgxpool.Pool, scheduleID string, q FiringQuery) (FiringPage, error) {
	limit := ClampLimit(q.Limit)
	rows, err := pool.Query(ctx, `SELECT firing_id, schedule_id, scheduled_for, fired_at, skipped, outcome,
			coalesce(agent_run_id, ''), coalesce(run_id, ''), coalesce(device_id, ''), coalesce(reason, ''),
			coalesce(detail, ''), completed_at
		FROM public.schedule_firings
		WHERE schedule_id = $1 AND ($2::timestamptz IS NULL OR scheduled_for < $2)
		ORDER BY scheduled_for DESC LIMIT $3`, scheduleID, nullTime(q.Before), limit+1)
	if err != nil {
		return FiringPage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FiringView, error) {
		var f FiringView
		err := r.Scan(&f.FiringID, &f.ScheduleID, &f.ScheduledFor, &f.FiredAt, &f.Skipped, &f.Outcome, &f.AgentRunID,
			&f.RunID, &f.DeviceID, &f.Reason, &f.Detail, &f.CompletedAt)
		return f, err
	})
	if err != nil {
		return FiringPage{}, err
	}
	page := FiringPage{Firings: out}
	if len(out) > limit {
		page.Firings = out[:limit]
		at := out[limit-1].ScheduledFor
		page.NextBefore = &at
	}
	return page, nil
}

// DueSchedule is a schedule the firing worker should look at: one due to
// fire, or one whose firing has been in flight so long that the instance
// firing it may have stopped.
type DueSchedule struct {
	ScheduleID string
	OrgID      string
	// Stale is true for a firing in flight since before the stale time.
	Stale bool
}

// DueSchedules returns up to limit schedules due at now (next occurrence
// at or before now, no firing in flight) and those whose firing has been
// in flight since before staleBefore. The read model may lag: the worker
// decides on the schedule's stream, never on these rows.
func DueSchedules(ctx context.Context, pool *pgxpool.Pool, now, staleBefore time.Time, limit int) ([]DueSchedule, error) {
	rows, err := pool.Query(ctx, `(SELECT schedule_id, org_id, false FROM public.schedules
			WHERE next_fire_at <= $1 AND pending_firing_id IS NULL ORDER BY next_fire_at LIMIT $3)
		UNION ALL
		(SELECT schedule_id, org_id, true FROM public.schedules
			WHERE pending_fired_at <= $2 ORDER BY pending_fired_at LIMIT $3)`, now, staleBefore, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueSchedule, error) {
		var d DueSchedule
		err := r.Scan(&d.ScheduleID, &d.OrgID, &d.Stale)
		return d, err
	})
}
