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

// Runs is the runs read model: one row per run (its view), one per step
// (run_steps) and the run frame index (run_frames: every frame the run
// observed, and the frames before and after each of its actions). It
// consumes run.*, frame.captured and action.* and emits nothing.
type Runs struct{}

// RunsName is the projection's stable name.
const RunsName = "runs"

// Name implements Projection.
func (Runs) Name() string { return RunsName }

// Tables implements Projection.
func (Runs) Tables() []string { return []string{"runs", "run_steps", "run_frames", "run_actions"} }

// EventTypes implements Selective.
func (Runs) EventTypes() []string {
	return []string{"run.%", "frame.captured", "action.requested", "action.committed", "action.failed"}
}

// Setup implements Projection.
func (Runs) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.runs (
		run_id            text PRIMARY KEY,
		agent_run_id      text NOT NULL UNIQUE,
		org_id            text NOT NULL,
		device_id         text NOT NULL,
		goal              text NOT NULL,
		executor          text NOT NULL,
		state             text NOT NULL,
		max_steps         int NOT NULL,
		step_seq          int NOT NULL DEFAULT 0,
		deadline_at       timestamptz NOT NULL,
		success_check     jsonb,
		has_script        boolean NOT NULL,
		starter_kind      text NOT NULL,
		starter_id        text NOT NULL,
		schedule_id       text,
		claimed_by        text,
		claim_until       timestamptz,
		park_reason       text,
		park_deadline_at  timestamptz,
		reason            text,
		detail            text,
		created_at        timestamptz NOT NULL,
		updated_at        timestamptz NOT NULL,
		ended_at          timestamptz
	);
	CREATE INDEX ON `+schema+`.runs (org_id, run_id DESC);
	CREATE INDEX ON `+schema+`.runs (state, deadline_at) WHERE state NOT IN ('succeeded', 'failed', 'cancelled');
	CREATE TABLE `+schema+`.run_steps (
		run_id          text NOT NULL,
		seq             int NOT NULL,
		idempotency_key text NOT NULL,
		action          text NOT NULL,
		arguments       jsonb NOT NULL,
		observed_frame  text,
		observed_screen text,
		at              timestamptz NOT NULL,
		PRIMARY KEY (run_id, seq)
	);
	CREATE TABLE `+schema+`.run_actions (
		action_id text PRIMARY KEY,
		run_id    text NOT NULL
	);
	CREATE TABLE `+schema+`.run_frames (
		run_id    text NOT NULL,
		frame_id  text NOT NULL,
		kind      text NOT NULL,
		action_id text,
		at        timestamptz NOT NULL,
		position  bigint NOT NULL,
		PRIMARY KEY (run_id, frame_id, kind)
	);
	CREATE INDEX ON `+schema+`.run_frames (run_id, position);`)
	return err
}

var runEventTypes = typeSet(nameOf(domain.RunStarted{}), nameOf(domain.RunClaimed{}), nameOf(domain.RunPaused{}),
	nameOf(domain.RunResumed{}), nameOf(domain.RunParked{}), nameOf(domain.RunStepTaken{}), nameOf(domain.RunEnded{}),
	nameOf(domain.FrameCaptured{}), nameOf(domain.ActionRequested{}), nameOf(domain.ActionCommitted{}), nameOf(domain.ActionFailed{}))

// Apply implements Projection. The frames of a run of consecutive action
// outcomes are written in one statement (most actions are in no run, and
// the statement finds their run in run_actions, by index however large that
// table: queueCustomPlanned); every other event's statements keep their
// place after it.
func (Runs) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	runs, steps, frames, acts := schema+`.runs`, schema+`.run_steps`, schema+`.run_frames`, schema+`.run_actions`
	var (
		fActions, fFrames, fKinds []string
		fAt                       []time.Time
		fPos                      []int64
	)
	frame := func(actionID string, ref *domain.FrameRef, kind string, at time.Time, pos int64) {
		if ref != nil {
			fActions, fFrames, fKinds, fAt, fPos = append(fActions, actionID), append(fFrames, ref.FrameID), append(fKinds, kind), append(fAt, at), append(fPos, pos)
		}
	}
	flush := func(b *pgx.Batch) {
		if len(fActions) == 0 {
			return
		}
		queueCustomPlanned(b, `INSERT INTO `+frames+` (run_id, frame_id, kind, action_id, at, position)
			SELECT a.run_id, u.f, u.k, u.a, u.t, u.p
			FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::bigint[]) WITH ORDINALITY u(a, f, k, t, p, n)
			JOIN `+acts+` a ON a.action_id = u.a
			ORDER BY u.n
			ON CONFLICT DO NOTHING`, fActions, fFrames, fKinds, fAt, fPos)
		fActions, fFrames, fKinds, fAt, fPos = nil, nil, nil, nil, nil
	}
	return applyBatchFlushed(ctx, tx, events, runEventTypes, flush, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev.(type) {
		case domain.ActionCommitted, domain.ActionFailed:
		default:
			flush(b)
		}
		switch ev := ev.(type) {
		case domain.RunStarted:
			state := domain.RunStateRunning
			if ev.Executor == domain.ExecutorBuiltin {
				state = domain.RunStateQueued
			}
			var check []byte
			if ev.SuccessCheck != nil {
				check, _ = json.Marshal(ev.SuccessCheck)
			}
			b.Queue(`INSERT INTO `+runs+` (run_id, agent_run_id, org_id, device_id, goal, executor, state, max_steps,
					deadline_at, success_check, has_script, starter_kind, starter_id, schedule_id, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15) ON CONFLICT DO NOTHING`,
				ev.RunID, ev.AgentRunID, e.OrgID, ev.DeviceID, ev.Goal, ev.Executor, state, ev.MaxSteps,
				ev.DeadlineAt, check, len(ev.Script) > 0, ev.Starter.Kind, ev.Starter.ID, nullString(ev.ScheduleID), ev.StartedAt)
		case domain.RunClaimed:
			b.Queue(`UPDATE `+runs+` SET claimed_by = $2, claim_until = $4, updated_at = $3,
					state = CASE WHEN state = 'queued' THEN 'running' ELSE state END WHERE run_id = $1`,
				ev.RunID, ev.Worker, ev.ClaimedAt, ev.Until)
		case domain.RunPaused:
			b.Queue(`UPDATE `+runs+` SET state = 'paused', claimed_by = NULL, claim_until = NULL, updated_at = $2 WHERE run_id = $1`, ev.RunID, ev.At)
		case domain.RunResumed:
			b.Queue(`UPDATE `+runs+` SET state = CASE WHEN executor = 'builtin' AND claimed_by IS NULL THEN 'queued' ELSE 'running' END,
					park_reason = NULL, park_deadline_at = NULL, updated_at = $2 WHERE run_id = $1`, ev.RunID, ev.At)
		case domain.RunParked:
			b.Queue(`UPDATE `+runs+` SET state = 'awaiting_user', claimed_by = NULL, claim_until = NULL, park_reason = $2, park_deadline_at = $3, updated_at = $4
				WHERE run_id = $1`, ev.RunID, ev.Reason, ev.DeadlineAt, ev.At)
		case domain.RunStepTaken:
			b.Queue(`UPDATE `+runs+` SET step_seq = $2, updated_at = $3 WHERE run_id = $1`, ev.RunID, ev.Seq, ev.At)
			b.Queue(`INSERT INTO `+steps+` (run_id, seq, idempotency_key, action, arguments, observed_frame, observed_screen, at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
				ev.RunID, ev.Seq, ev.IdempotencyKey, string(ev.Action), jsonOrEmpty(ev.Arguments),
				nullString(ev.ObservedFrame), nullString(ev.ObservedScreen), ev.At)
		case domain.RunEnded:
			b.Queue(`UPDATE `+runs+` SET state = $2, reason = $3, detail = $4, ended_at = $5, updated_at = $5,
					park_reason = NULL, park_deadline_at = NULL WHERE run_id = $1`,
				ev.RunID, ev.State, ev.Reason, ev.Detail, ev.EndedAt)
		case domain.FrameCaptured:
			if ev.RunID != "" {
				b.Queue(`INSERT INTO `+frames+` (run_id, frame_id, kind, at, position) VALUES ($1, $2, 'observed', $3, $4)
					ON CONFLICT DO NOTHING`, ev.RunID, ev.Frame.FrameID, ev.Frame.CapturedAt, e.Position)
			}
		case domain.ActionRequested:
			if ev.AgentRunID != "" && ev.RunID != "" {
				b.Queue(`INSERT INTO `+acts+` (action_id, run_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ActionID, ev.RunID)
			}
		case domain.ActionCommitted:
			frame(ev.ActionID, ev.FrameBefore, "before", ev.StartedAt, e.Position)
			frame(ev.ActionID, ev.FrameAfter, "after", ev.FinishedAt, e.Position)
		case domain.ActionFailed:
			frame(ev.ActionID, ev.FrameBefore, "before", ev.StartedAt, e.Position)
			frame(ev.ActionID, ev.FrameAfter, "after", ev.FinishedAt, e.Position)
		}
		return nil
	})
}

func jsonOrEmpty(b json.RawMessage) string {
	if len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// RunView is a run as the runs read model shows it.
type RunView struct {
	RunID        string
	AgentRunID   string
	DeviceID     string
	Goal         string
	Executor     string
	State        string
	MaxSteps     int
	StepSeq      int
	DeadlineAt   time.Time
	SuccessCheck *domain.SuccessCheck
	HasScript    bool
	Starter      domain.ReceiptActor
	ScheduleID   string
	ParkReason   string
	// ParkDeadlineAt is when a parked run gives up waiting for a person.
	ParkDeadlineAt *time.Time
	Reason         *string
	Detail         *string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	EndedAt        *time.Time
}

// RunQuery filters a run list.
type RunQuery struct {
	State         string
	DeviceID      string
	StarterUserID string
	StarterKeyID  string
	// Before is the cursor: runs strictly older than this run id.
	Before string
	Limit  int
}

// RunPage is one page of runs, newest first; NextBefore is empty on the
// last page.
type RunPage struct {
	Runs       []RunView
	NextBefore string
}

const runColumns = `run_id, agent_run_id, device_id, goal, executor, state, max_steps, step_seq, deadline_at,
	success_check, has_script, starter_kind, starter_id, coalesce(schedule_id, ''), coalesce(park_reason, ''),
	park_deadline_at, reason, detail, created_at, updated_at, ended_at`

func scanRun(row pgx.Row) (RunView, error) {
	var v RunView
	var check []byte
	var starter domain.Actor
	err := row.Scan(&v.RunID, &v.AgentRunID, &v.DeviceID, &v.Goal, &v.Executor, &v.State, &v.MaxSteps, &v.StepSeq,
		&v.DeadlineAt, &check, &v.HasScript, &starter.Kind, &starter.ID, &v.ScheduleID, &v.ParkReason,
		&v.ParkDeadlineAt, &v.Reason, &v.Detail, &v.CreatedAt, &v.UpdatedAt, &v.EndedAt)
	if err != nil {
		return v, err
	}
	v.Starter = starter.ForReceipt()
	if len(check) > 0 {
		v.SuccessCheck = &domain.SuccessCheck{}
		if err := json.Unmarshal(check, v.SuccessCheck); err != nil {
			return v, err
		}
	}
	return v, nil
}

// LiveRunsOnDevice lists the runs on deviceID that have not ended.
func LiveRunsOnDevice(ctx context.Context, pool *pgxpool.Pool, deviceID string) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT run_id FROM public.runs WHERE device_id = $1 AND state <> ALL($2) ORDER BY run_id`,
		deviceID, []string{domain.RunStateSucceeded, domain.RunStateFailed, domain.RunStateCancelled})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// FindRun reads a run of orgID by its run id or agent run id; ok is false
// when there is none.
func FindRun(ctx context.Context, pool *pgxpool.Pool, orgID, id string) (RunView, bool, error) {
	v, err := scanRun(pool.QueryRow(ctx, `SELECT `+runColumns+` FROM public.runs
		WHERE org_id = $1 AND (run_id = $2 OR agent_run_id = $2)`, orgID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return RunView{}, false, nil
	}
	return v, err == nil, err
}

// ListRuns returns one page of orgID's runs, newest first, among the
// devices (nil: all).
func ListRuns(ctx context.Context, pool *pgxpool.Pool, orgID string, devices []string, q RunQuery) (RunPage, error) {
	limit := ClampLimit(q.Limit)
	rows, err := pool.Query(ctx, `SELECT `+runColumns+` FROM public.runs
		WHERE org_id = $1 AND ($2::text[] IS NULL OR device_id = ANY($2))
		  AND ($3 = '' OR state = $3) AND ($4 = '' OR device_id = $4)
		  AND ($5 = '' OR (starter_kind = 'user' AND starter_id = $5))
		  AND ($6 = '' OR (starter_kind = 'api_key' AND starter_id = $6))
		  AND ($7 = '' OR run_id < $7)
		ORDER BY run_id DESC LIMIT $8`,
		orgID, devices, q.State, q.DeviceID, q.StarterUserID, q.StarterKeyID, q.Before, limit+1)
	if err != nil {
		return RunPage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunView, error) { return scanRun(r) })
	if err != nil {
		return RunPage{}, err
	}
	page := RunPage{Runs: out}
	if len(out) > limit {
		page.Runs = out[:limit]
		page.NextBefore = out[limit-1].RunID
	}
	return page, nil
}

// RunFrame is one frame of a run's frame index.
type RunFrame struct {
	FrameID string
	// Kind is observed (the run looked), before or after (an action's).
	Kind     string
	ActionID string
	At       time.Time
	Position int64
}

// RunFrameQuery pages a run's frames, oldest first.
type RunFrameQuery struct {
	// After is the cursor: frames recorded after this position.
	After int64
	Limit int
}

// RunFramePage is one page of a run's frames; NextAfter is 0 on the last.
type RunFramePage struct {
	Frames    []RunFrame
	NextAfter int64
}

// ListRunFrames returns one page of a run's frame index.
func ListRunFrames(ctx context.Context, pool *pgxpool.Pool, runID string, q RunFrameQuery) (RunFramePage, error) {
	limit := ClampLimit(q.Limit)
	rows, err := pool.Query(ctx, `SELECT frame_id, kind, coalesce(action_id, ''), at, position FROM public.run_frames
		WHERE run_id = $1 AND position > $2 ORDER BY position, kind DESC LIMIT $3`, runID, q.After, limit+1)
	if err != nil {
		return RunFramePage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunFrame, error) {
		var f RunFrame
		err := r.Scan(&f.FrameID, &f.Kind, &f.ActionID, &f.At, &f.Position)
		return f, err
	})
	if err != nil {
		return RunFramePage{}, err
	}
	page := RunFramePage{Frames: out}
	if len(out) > limit {
		// Frames of one position (an action's before and after) stay on one
		// page: the cursor is a position.
		cut := limit
		for cut > 0 && out[cut].Position == out[cut-1].Position {
			cut--
		}
		if cut == 0 {
			cut = limit
		}
		page.Frames = out[:cut]
		page.NextAfter = out[cut-1].Position
	}
	return page, nil
}

// RunStep is one recorded step of a run.
type RunStep struct {
	Seq            int
	IdempotencyKey string
	Action         string
	Arguments      json.RawMessage
	ObservedFrame  string
	ObservedScreen string
	At             time.Time
}

// ListRunSteps returns the steps of a run of orgID whose actions
// committed, in order.
func ListRunSteps(ctx context.Context, pool *pgxpool.Pool, orgID, runID string) ([]RunStep, error) {
	rows, err := pool.Query(ctx, `SELECT s.seq, s.idempotency_key, s.action, s.arguments, coalesce(s.observed_frame, ''),
			coalesce(s.observed_screen, ''), s.at FROM public.run_steps s
		JOIN public.receipts r ON r.org_id = $1 AND r.idempotency_key = s.idempotency_key AND r.state = 'committed'
		WHERE s.run_id = $2 ORDER BY s.seq`, orgID, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunStep, error) {
		var s RunStep
		var args []byte
		err := r.Scan(&s.Seq, &s.IdempotencyKey, &s.Action, &args, &s.ObservedFrame, &s.ObservedScreen, &s.At)
		s.Arguments = args
		return s, err
	})
}

// LiveRun names a run that has not ended.
type LiveRun struct {
	RunID    string
	OrgID    string
	State    string
	Executor string
}

// RunsToClaim returns up to limit built-in runs waiting for an executor at
// now: queued ones, and running ones whose executor's claim lapsed (it
// stopped), oldest first.
func RunsToClaim(ctx context.Context, pool *pgxpool.Pool, now time.Time, limit int) ([]LiveRun, error) {
	return liveRuns(ctx, pool, `executor = 'builtin' AND (state = 'queued' OR (state = 'running' AND claim_until <= $1))`, now, limit)
}

// RunsOverdue returns up to limit runs whose deadline, or wait for a
// person, has passed at now.
func RunsOverdue(ctx context.Context, pool *pgxpool.Pool, now time.Time, limit int) ([]LiveRun, error) {
	return liveRuns(ctx, pool, `state NOT IN ('succeeded', 'failed', 'cancelled')
		AND (deadline_at <= $1 OR (state = 'awaiting_user' AND park_deadline_at <= $1))`, now, limit)
}

func liveRuns(ctx context.Context, pool *pgxpool.Pool, where string, now time.Time, limit int) ([]LiveRun, error) {
	rows, err := pool.Query(ctx, `SELECT run_id, org_id, state, executor FROM public.runs WHERE `+where+`
		ORDER BY run_id LIMIT $2`, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LiveRun, error) {
		var l LiveRun
		err := r.Scan(&l.RunID, &l.OrgID, &l.State, &l.Executor)
		return l, err
	})
}
