package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Receipts is the receipts read model (spec 2.5, 4.3): one row per action,
// keyed by (organisation, idempotency key), ordered for paging by (timestamp,
// key). It consumes action.* and receipt.reviewed and emits nothing. The
// lease id and fencing token of an action are never copied into it.
type Receipts struct{}

// ReceiptsName is the projection's stable name.
const ReceiptsName = "receipts"

// Name implements Projection.
func (Receipts) Name() string { return ReceiptsName }

// Tables implements Projection.
func (Receipts) Tables() []string { return []string{"receipts"} }

// Setup implements Projection. The key is collated "C" so that paging by
// (ts, key) is a plain byte order, identical in ORDER BY and the cursor.
func (Receipts) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.receipts (
		org_id            text NOT NULL,
		idempotency_key   text COLLATE "C" NOT NULL,
		action_id         text NOT NULL UNIQUE,
		device_id         text NOT NULL,
		agent_run_id      text,
		state             text NOT NULL,
		outcome_unknown   boolean NOT NULL DEFAULT false,
		actor_kind        text NOT NULL,
		actor_id          text NOT NULL,
		action            text NOT NULL,
		arguments         jsonb NOT NULL,
		result            jsonb,
		error_code        text,
		error_message     text,
		error_reason      text,
		observed_frame    text,
		frame_before      text,
		frame_after       text,
		ts                timestamptz NOT NULL,
		started_at        timestamptz,
		finished_at       timestamptz,
		reviewed_at       timestamptz,
		reviewer_kind     text,
		reviewer_id       text,
		review_note       text,
		PRIMARY KEY (org_id, idempotency_key)
	);
	CREATE INDEX ON `+schema+`.receipts (org_id, ts DESC, idempotency_key DESC);
	CREATE INDEX ON `+schema+`.receipts (org_id, device_id, ts DESC, idempotency_key DESC);`)
	return err
}

var receiptEvents = typeSet(nameOf(domain.ActionRequested{}), nameOf(domain.ActionCommitted{}), nameOf(domain.ActionFailed{}),
	nameOf(domain.ActionOutcomeUnknown{}), nameOf(domain.ReceiptReviewed{}))

// Apply implements Projection.
func (Receipts) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.receipts`
	// A run of consecutive requests is one INSERT, a run of consecutive
	// commits one UPDATE (under load a group commit puts many devices'
	// requests, or outcomes, side by side in the feed); the other events
	// are a statement each. The statements keep the events' order.
	var reqs receiptRequests
	var commits receiptCommits
	flush := func(b *pgx.Batch) {
		reqs.queue(b, t)
		commits.queue(b, t)
	}
	return applyBatchFlushed(ctx, tx, events, receiptEvents, flush, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		if _, ok := ev.(domain.ActionRequested); !ok {
			reqs.queue(b, t)
		}
		if _, ok := ev.(domain.ActionCommitted); !ok {
			commits.queue(b, t)
		}
		switch ev := ev.(type) {
		case domain.ActionRequested:
			reqs.add(e.OrgID, ev)
		case domain.ActionCommitted:
			res, err := json.Marshal(storedResult{ev.Result, ev.Effect})
			if err != nil {
				return err
			}
			commits.add(ev, res)
		case domain.ActionFailed:
			b.Queue(`UPDATE `+t+` SET state = 'failed', error_code = $2, error_message = $3, error_reason = $4, frame_before = $5,
				frame_after = $6, started_at = $7, finished_at = $8 WHERE action_id = $1`,
				ev.ActionID, string(ev.Code), ev.Message, nullString(ev.Reason), frameID(ev.FrameBefore), frameID(ev.FrameAfter),
				ev.StartedAt, ev.FinishedAt)
		case domain.ActionOutcomeUnknown:
			b.Queue(`UPDATE `+t+` SET outcome_unknown = true, error_code = $2, error_message = $3, error_reason = $4
				WHERE action_id = $1`, ev.ActionID, string(domain.CodeActionOutcomeUnknown),
				"the outcome of this action is unknown", nullString(ev.Reason))
		case domain.ReceiptReviewed:
			b.Queue(`UPDATE `+t+` SET reviewed_at = $2, reviewer_kind = $3, reviewer_id = $4, review_note = $5 WHERE action_id = $1`,
				ev.ActionID, ev.At, ev.Reviewer.Kind, ev.Reviewer.ID, nullString(ev.Note))
		}
		return nil
	})
}

// receiptRequests is a run of action.requested events, inserted as one
// statement.
type receiptRequests struct {
	orgs, keys, actions, devices, actorKinds, actorIDs, verbs []string
	runs, observed                                            []*string
	args                                                      [][]byte
	at                                                        []time.Time
}

func (r *receiptRequests) add(org string, ev domain.ActionRequested) {
	r.orgs, r.keys, r.actions, r.devices = append(r.orgs, org), append(r.keys, ev.IdempotencyKey), append(r.actions, ev.ActionID), append(r.devices, ev.DeviceID)
	r.runs, r.actorKinds, r.actorIDs = append(r.runs, nullString(ev.AgentRunID)), append(r.actorKinds, ev.Actor.Kind), append(r.actorIDs, ev.Actor.ID)
	r.verbs, r.args, r.observed, r.at = append(r.verbs, string(ev.Action)), append(r.args, []byte(ev.Arguments)), append(r.observed, nullString(ev.ObservedFrame)), append(r.at, ev.RequestedAt)
}

// queue queues the run's statement, if it has rows, and starts a new run.
func (r *receiptRequests) queue(b *pgx.Batch, t string) {
	if len(r.actions) == 0 {
		return
	}
	b.Queue(`INSERT INTO `+t+` (org_id, idempotency_key, action_id, device_id, agent_run_id, state, actor_kind, actor_id,
			action, arguments, observed_frame, ts)
		SELECT o, k, a, d, r, 'pending', ak, ai, v, g, f, ts
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::jsonb[],
			$10::text[], $11::timestamptz[]) u(o, k, a, d, r, ak, ai, v, g, f, ts)`,
		r.orgs, r.keys, r.actions, r.devices, r.runs, r.actorKinds, r.actorIDs, r.verbs, r.args, r.observed, r.at)
	*r = receiptRequests{}
}

// receiptCommits is a run of action.committed events, applied as one
// statement (an action has one outcome, so no action is in a run twice).
type receiptCommits struct {
	actions           []string
	results           [][]byte
	before, after     []*string
	started, finished []time.Time
}

func (c *receiptCommits) add(ev domain.ActionCommitted, result []byte) {
	c.actions, c.results = append(c.actions, ev.ActionID), append(c.results, result)
	c.before, c.after = append(c.before, frameID(ev.FrameBefore)), append(c.after, frameID(ev.FrameAfter))
	c.started, c.finished = append(c.started, ev.StartedAt), append(c.finished, ev.FinishedAt)
}

// queue queues the run's statement, if it has rows, and starts a new run.
func (c *receiptCommits) queue(b *pgx.Batch, t string) {
	if len(c.actions) == 0 {
		return
	}
	queueCustomPlanned(b, `UPDATE `+t+` r SET state = 'committed', result = u.res, frame_before = u.fb, frame_after = u.fa, started_at = u.s,
			finished_at = u.f
		FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[]) u(a, res, fb, fa, s, f)
		WHERE r.action_id = u.a`, c.actions, c.results, c.before, c.after, c.started, c.finished)
	*c = receiptCommits{}
}

// storedResult is what the result column holds: the device's result and,
// beside its members, the action's effect (absent on actions committed
// before effects were judged). One column for both keeps the table's shape,
// so an existing deployment's read model serves effects without a rebuild.
type storedResult struct {
	domain.ActionResult
	Effect *domain.ActionEffect `json:"effect,omitempty"`
}

func frameID(f *domain.FrameRef) *string {
	if f == nil {
		return nil
	}
	return &f.FrameID
}

// ReceiptFilter is the query of GET /v1/receipts (spec 4.3). The caller
// has checked that at most one actor filter is set.
type ReceiptFilter struct {
	OrgID string
	// Devices, when not nil, is the credential's device subset.
	Devices       []string
	DeviceID      string
	AgentRunID    string
	Status        string
	ActorUserID   string
	ActorAPIKeyID string
	// Before, when not zero, keeps receipts strictly before it; with
	// BeforeKey, strictly before (Before, BeforeKey) in (timestamp, key)
	// order, which is the cursor of the previous page.
	Before    time.Time
	BeforeKey string
	Limit     int
}

// ReceiptPage is one page of receipts, newest first. NextBefore is zero on
// the last page.
type ReceiptPage struct {
	Receipts      []domain.Receipt
	NextBefore    time.Time
	NextBeforeKey string
}

const receiptColumns = `idempotency_key, action_id, device_id, agent_run_id, state, outcome_unknown, actor_kind, actor_id,
	action, arguments, result, error_code, error_message, error_reason, observed_frame, frame_before, frame_after, ts,
	started_at, finished_at, reviewed_at, reviewer_kind, reviewer_id, review_note`

// ListReceipts returns one page of the organisation's receipts, newest
// first, ties broken by idempotency key (descending), so equal timestamps
// page without skipping or repeating.
func ListReceipts(ctx context.Context, pool *pgxpool.Pool, f ReceiptFilter) (ReceiptPage, error) {
	limit := ClampLimit(f.Limit)
	var where []string
	args := []any{f.OrgID}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	where = append(where, "org_id = $1")
	if f.Devices != nil {
		add("device_id = ANY(?)", f.Devices)
	}
	if f.DeviceID != "" {
		add("device_id = ?", f.DeviceID)
	}
	if f.AgentRunID != "" {
		add("agent_run_id = ?", f.AgentRunID)
	}
	if f.Status != "" {
		add("state = ?", f.Status)
	}
	if f.ActorUserID != "" {
		add("actor_kind = 'user' AND actor_id = ?", f.ActorUserID)
	}
	if f.ActorAPIKeyID != "" {
		add("actor_kind = 'api_key' AND actor_id = ?", f.ActorAPIKeyID)
	}
	switch {
	case !f.Before.IsZero() && f.BeforeKey != "":
		args = append(args, f.Before, f.BeforeKey)
		where = append(where, fmt.Sprintf("(ts, idempotency_key) < ($%d, $%d)", len(args)-1, len(args)))
	case !f.Before.IsZero():
		add("ts < ?", f.Before)
	}
	args = append(args, limit+1)
	q := `SELECT ` + receiptColumns + ` FROM public.receipts WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY ts DESC, idempotency_key DESC LIMIT $%d`, len(args))
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return ReceiptPage{}, err
	}
	defer rows.Close()
	page := ReceiptPage{Receipts: []domain.Receipt{}}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return ReceiptPage{}, err
		}
		page.Receipts = append(page.Receipts, r)
	}
	if err := rows.Err(); err != nil {
		return ReceiptPage{}, err
	}
	if len(page.Receipts) > limit {
		page.Receipts = page.Receipts[:limit]
		last := page.Receipts[limit-1]
		page.NextBefore, page.NextBeforeKey = last.Timestamp, last.IdempotencyKey
	}
	return page, nil
}

// GetReceipt returns the organisation's receipt under key, or ErrNoRow.
func GetReceipt(ctx context.Context, pool *pgxpool.Pool, orgID, key string) (domain.Receipt, error) {
	r, err := scanReceipt(pool.QueryRow(ctx, `SELECT `+receiptColumns+` FROM public.receipts WHERE org_id = $1 AND idempotency_key = $2`,
		orgID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNoRow
	}
	return r, err
}

func scanReceipt(row pgx.Row) (domain.Receipt, error) {
	var r domain.Receipt
	var run, code, msg, reason, observed, before, after, rk, rid, note *string
	var actorKind, actorID, action string
	var args, result []byte
	var started, finished, reviewed *time.Time
	err := row.Scan(&r.IdempotencyKey, &r.ActionID, &r.DeviceID, &run, &r.State, &r.OutcomeUnknown, &actorKind, &actorID,
		&action, &args, &result, &code, &msg, &reason, &observed, &before, &after, &r.Timestamp, &started, &finished,
		&reviewed, &rk, &rid, &note)
	if err != nil {
		return r, err
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	r.AgentRunID, r.ObservedFrame = str(run), str(observed)
	r.Frames = domain.ReceiptFrames{Before: str(before), After: str(after)}
	r.Actor = domain.Actor{Kind: actorKind, ID: actorID}.ForReceipt()
	r.Action, r.Arguments = domain.ActionType(action), args
	if result != nil {
		var res storedResult
		if err := json.Unmarshal(result, &res); err != nil {
			return r, err
		}
		r.Result, r.Effect = &res.ActionResult, res.Effect
	}
	if code != nil {
		r.Error = &domain.ReceiptError{Code: domain.Code(*code), Message: str(msg), Reason: str(reason)}
	}
	if started != nil && finished != nil {
		s, f := started.UTC(), finished.UTC()
		r.StartedAt, r.FinishedAt = &s, &f
		d := float64(f.Sub(s).Microseconds()) / 1000
		r.DurationMs = &d
	}
	r.Timestamp = r.Timestamp.UTC()
	if reviewed != nil {
		r.Reviewed = &domain.ReceiptReview{At: reviewed.UTC(), By: domain.Actor{Kind: str(rk), ID: str(rid)}.ForReceipt(), Note: str(note)}
	}
	return r, nil
}
