package projections

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// CopilotName is the stable name of the Copilot projection.
const CopilotName = "copilot"

// Copilot is the read side of copilot threads: one row per thread
// (copilot_threads: whose, which device — empty for a fleet thread —, the turn in flight, the tokens
// spent) and its items in the order they happened (copilot_items: the
// person's messages, the assistant's text, each tool call with the receipt
// or frame it produced, each turn's end), and the tokens each person spent
// (copilot_tokens, one row per answer of the model). It consumes
// copilot.* and emits nothing. Everything comes from event data, in
// stream order, so a rebuild gives the same rows.
type Copilot struct{}

// Name implements Projection.
func (Copilot) Name() string { return CopilotName }

// Tables implements Projection.
func (Copilot) Tables() []string {
	return []string{"copilot_threads", "copilot_items", "copilot_tokens", "copilot_approvals"}
}

// EventTypes implements Selective.
func (Copilot) EventTypes() []string { return []string{"copilot.%"} }

// Setup implements Projection.
func (Copilot) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.copilot_threads (
		thread_id     text PRIMARY KEY,
		org_id        text NOT NULL,
		user_id       text NOT NULL,
		device_id     text NOT NULL,
		title         text NOT NULL,
		created_at    timestamptz NOT NULL,
		updated_at    timestamptz NOT NULL,
		turn_id       text,
		last_outcome  text,
		input_tokens  bigint NOT NULL DEFAULT 0,
		output_tokens bigint NOT NULL DEFAULT 0,
		version       bigint NOT NULL
	);
	CREATE INDEX ON `+schema+`.copilot_threads (org_id, user_id, updated_at DESC, thread_id);
	CREATE TABLE `+schema+`.copilot_items (
		thread_id text NOT NULL,
		item_key  text NOT NULL,
		seq       bigint NOT NULL,
		kind      text NOT NULL,
		turn_id   text NOT NULL,
		data      jsonb NOT NULL,
		PRIMARY KEY (thread_id, item_key)
	);
	CREATE INDEX ON `+schema+`.copilot_items (thread_id, seq);
	CREATE TABLE `+schema+`.copilot_tokens (
		event_id      uuid PRIMARY KEY,
		org_id        text NOT NULL,
		user_id       text NOT NULL,
		thread_id     text NOT NULL,
		input_tokens  bigint NOT NULL,
		output_tokens bigint NOT NULL,
		at            timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.copilot_tokens (org_id, at);
	CREATE TABLE `+schema+`.copilot_approvals (
		approval_id    text PRIMARY KEY,
		thread_id      text NOT NULL,
		org_id         text NOT NULL,
		call_id        text NOT NULL,
		device_id      text NOT NULL,
		action         text NOT NULL,
		arguments      jsonb NOT NULL,
		frame          text NOT NULL,
		fencing_token  bigint NOT NULL,
		digest         text NOT NULL,
		reason         text NOT NULL,
		state          text NOT NULL,
		refused_reason text,
		expires_at     timestamptz NOT NULL,
		requested_at   timestamptz NOT NULL,
		decided_at     timestamptz
	);
	CREATE INDEX ON `+schema+`.copilot_approvals (org_id, state, requested_at);`)
	return err
}

var copilotEventTypes = typeSet(nameOf(domain.CopilotThreadStarted{}), nameOf(domain.CopilotMessagePosted{}),
	nameOf(domain.CopilotTextStreamed{}), nameOf(domain.CopilotToolCalled{}), nameOf(domain.CopilotToolCompleted{}),
	nameOf(domain.CopilotTokensUsed{}), nameOf(domain.CopilotStopRequested{}), nameOf(domain.CopilotTurnEnded{}),
	nameOf(domain.CopilotApprovalRequested{}), nameOf(domain.CopilotApprovalGranted{}), nameOf(domain.CopilotApprovalDenied{}),
	nameOf(domain.CopilotApprovalExpired{}), nameOf(domain.CopilotApprovalRefused{}), nameOf(domain.CopilotLeaseTaken{}))

// Kinds of copilot items.
const (
	CopilotItemMessage  = "message"
	CopilotItemToolCall = "tool_call"
	CopilotItemTurnEnd  = "turn_ended"
	CopilotItemApproval = "approval"
)

// Apply implements Projection.
func (Copilot) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	threads, items, tokens := schema+`.copilot_threads`, schema+`.copilot_items`, schema+`.copilot_tokens`
	approvals := schema + `.copilot_approvals`
	decided := func(b *pgx.Batch, threadID, approvalID, state, reason string, at time.Time) {
		b.Queue(`UPDATE `+approvals+` SET state = $2, refused_reason = $3, decided_at = $4 WHERE approval_id = $1`,
			approvalID, state, nullString(reason), at)
		b.Queue(`UPDATE `+items+` SET data = data || jsonb_build_object('state', $3::text, 'decidedAt', $4::timestamptz, 'refusedReason', $5::text)
			WHERE thread_id = $1 AND item_key = $2`, threadID, "approval:"+approvalID, state, at, nullString(reason))
	}
	return applyBatch(ctx, tx, events, copilotEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		touch := func(threadID string, at time.Time) {
			b.Queue(`UPDATE `+threads+` SET updated_at = greatest(updated_at, $2), version = $3 WHERE thread_id = $1`, threadID, at, e.StreamVersion)
		}
		item := func(threadID, key, kind, turnID string, data any) error {
			raw, err := json.Marshal(data)
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO `+items+` (thread_id, item_key, seq, kind, turn_id, data) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT DO NOTHING`, threadID, key, e.StreamVersion, kind, turnID, raw)
			return nil
		}
		switch ev := ev.(type) {
		case domain.CopilotThreadStarted:
			b.Queue(`INSERT INTO `+threads+` (thread_id, org_id, user_id, device_id, title, created_at, updated_at, version)
				VALUES ($1, $2, $3, $4, $5, $6, $6, $7) ON CONFLICT DO NOTHING`,
				ev.ThreadID, e.OrgID, ev.UserID, ev.DeviceID, ev.Title, ev.At, e.StreamVersion)
		case domain.CopilotMessagePosted:
			b.Queue(`UPDATE `+threads+` SET turn_id = $2 WHERE thread_id = $1`, ev.ThreadID, ev.TurnID)
			touch(ev.ThreadID, ev.At)
			return item(ev.ThreadID, "msg:"+ev.TurnID, CopilotItemMessage, ev.TurnID,
				map[string]any{"role": "user", "text": ev.Text, "at": ev.At})
		case domain.CopilotTextStreamed:
			raw, _ := json.Marshal(map[string]any{"role": "assistant", "text": ev.Text, "at": ev.At})
			b.Queue(`INSERT INTO `+items+` (thread_id, item_key, seq, kind, turn_id, data) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (thread_id, item_key) DO UPDATE SET data = jsonb_set(`+items+`.data, '{text}',
					to_jsonb((`+items+`.data->>'text') || $7))`,
				ev.ThreadID, "text:"+ev.TurnID+":"+strconv.Itoa(ev.Step), e.StreamVersion, CopilotItemMessage, ev.TurnID, raw, ev.Text)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotToolCalled:
			touch(ev.ThreadID, ev.At)
			data := map[string]any{"callId": ev.CallID, "tool": ev.Tool, "arguments": ev.Arguments, "state": "pending",
				"idempotencyKey": ev.IdempotencyKey, "observedFrame": ev.ObservedFrame, "at": ev.At}
			if ev.DeviceID != "" {
				data["deviceId"] = ev.DeviceID
			}
			return item(ev.ThreadID, "call:"+ev.CallID, CopilotItemToolCall, ev.TurnID, data)
		case domain.CopilotToolCompleted:
			raw, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			b.Queue(`UPDATE `+items+` SET data = data || jsonb_build_object('state', $3::text, 'result', $4::jsonb)
				WHERE thread_id = $1 AND item_key = $2`, ev.ThreadID, "call:"+ev.CallID, ev.State, raw)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotTokensUsed:
			b.Queue(`INSERT INTO `+tokens+` (event_id, org_id, user_id, thread_id, input_tokens, output_tokens, at)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				e.ID, e.OrgID, ev.UserID, ev.ThreadID, ev.InputTokens, ev.OutputTokens, ev.At)
			b.Queue(`UPDATE `+threads+` SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3, version = $4
				WHERE thread_id = $1`, ev.ThreadID, ev.InputTokens, ev.OutputTokens, e.StreamVersion)
		case domain.CopilotStopRequested:
			touch(ev.ThreadID, ev.At)
		case domain.CopilotLeaseTaken:
			touch(ev.ThreadID, ev.At)
		case domain.CopilotApprovalRequested:
			b.Queue(`INSERT INTO `+approvals+` (approval_id, thread_id, org_id, call_id, device_id, action, arguments, frame,
					fencing_token, digest, reason, state, expires_at, requested_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending', $12, $13) ON CONFLICT DO NOTHING`,
				ev.ApprovalID, ev.ThreadID, e.OrgID, ev.CallID, ev.DeviceID, ev.Action, ev.Arguments, ev.Frame, ev.FencingToken,
				ev.Digest, ev.Reason, ev.ExpiresAt, ev.At)
			touch(ev.ThreadID, ev.At)
			return item(ev.ThreadID, "approval:"+ev.ApprovalID, CopilotItemApproval, ev.TurnID, map[string]any{
				"approvalId": ev.ApprovalID, "callId": ev.CallID, "action": ev.Action, "arguments": ev.Arguments, "frame": ev.Frame,
				"fencingToken": ev.FencingToken, "digest": ev.Digest, "reason": ev.Reason, "state": domain.ApprovalPending,
				"expiresAt": ev.ExpiresAt, "at": ev.At})
		case domain.CopilotApprovalGranted:
			decided(b, ev.ThreadID, ev.ApprovalID, domain.ApprovalGranted, "", ev.At)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotApprovalDenied:
			decided(b, ev.ThreadID, ev.ApprovalID, domain.ApprovalDenied, "", ev.At)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotApprovalExpired:
			decided(b, ev.ThreadID, ev.ApprovalID, domain.ApprovalExpired, "", ev.At)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotApprovalRefused:
			decided(b, ev.ThreadID, ev.ApprovalID, domain.ApprovalRefused, ev.Reason, ev.At)
			touch(ev.ThreadID, ev.At)
		case domain.CopilotTurnEnded:
			b.Queue(`UPDATE `+threads+` SET turn_id = NULL, last_outcome = $3 WHERE thread_id = $1 AND turn_id = $2`,
				ev.ThreadID, ev.TurnID, ev.Outcome)
			touch(ev.ThreadID, ev.At)
			return item(ev.ThreadID, "end:"+ev.TurnID, CopilotItemTurnEnd, ev.TurnID, map[string]any{
				"outcome": ev.Outcome, "reason": ev.Reason, "detail": ev.Detail, "at": ev.At})
		}
		return nil
	})
}

// CopilotThreadView is a thread as the read model shows it.
type CopilotThreadView struct {
	ThreadID     string
	DeviceID     string
	Title        string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	TurnID       string
	LastOutcome  string
	InputTokens  int64
	OutputTokens int64
	// Version is the thread stream's version the row shows.
	Version int64
}

// CopilotItem is one item of a thread, in the order it happened.
type CopilotItem struct {
	Seq    int64
	Kind   string
	TurnID string
	Data   json.RawMessage
}

// CopilotQueries reads the copilot read model.
type CopilotQueries struct{ DB *pgxpool.Pool }

const copilotThreadColumns = `thread_id, device_id, title, created_at, updated_at, coalesce(turn_id, ''), coalesce(last_outcome, ''),
	input_tokens, output_tokens, version`

func scanCopilotThread(row pgx.Row) (CopilotThreadView, error) {
	var v CopilotThreadView
	err := row.Scan(&v.ThreadID, &v.DeviceID, &v.Title, &v.CreatedAt, &v.UpdatedAt, &v.TurnID, &v.LastOutcome,
		&v.InputTokens, &v.OutputTokens, &v.Version)
	return v, err
}

// Threads lists the person's threads in orgID, most recently active
// first, at most limit, within devices (nil: all).
func (q CopilotQueries) Threads(ctx context.Context, orgID, userID string, devices []string, limit int) ([]CopilotThreadView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+copilotThreadColumns+` FROM public.copilot_threads
		WHERE org_id = $1 AND user_id = $2 AND ($3::text[] IS NULL OR device_id = ANY($3))
		ORDER BY updated_at DESC, thread_id DESC LIMIT $4`, orgID, userID, devices, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []CopilotThreadView{}
	for rows.Next() {
		v, err := scanCopilotThread(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Thread reads one of the person's threads with its items; found is false
// for a thread that is not theirs in orgID.
func (q CopilotQueries) Thread(ctx context.Context, orgID, userID, threadID string) (CopilotThreadView, []CopilotItem, bool, error) {
	v, err := scanCopilotThread(q.DB.QueryRow(ctx, `SELECT `+copilotThreadColumns+` FROM public.copilot_threads
		WHERE org_id = $1 AND user_id = $2 AND thread_id = $3`, orgID, userID, threadID))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, nil, false, nil
	}
	if err != nil {
		return v, nil, false, err
	}
	rows, err := q.DB.Query(ctx, `SELECT seq, kind, turn_id, data FROM public.copilot_items WHERE thread_id = $1 ORDER BY seq`, threadID)
	if err != nil {
		return v, nil, false, err
	}
	defer rows.Close()
	items := []CopilotItem{}
	for rows.Next() {
		var it CopilotItem
		if err := rows.Scan(&it.Seq, &it.Kind, &it.TurnID, &it.Data); err != nil {
			return v, nil, false, err
		}
		items = append(items, it)
	}
	return v, items, true, rows.Err()
}

// Tokens sums the input and output tokens the copilot's model took for
// orgID in [from, to), on threads about devices (nil: all) or about
// deviceID (when set).
func Tokens(ctx context.Context, db *pgxpool.Pool, orgID string, devices []string, deviceID string, from, to time.Time) (in, out int64, err error) {
	err = db.QueryRow(ctx, `SELECT coalesce(sum(k.input_tokens), 0), coalesce(sum(k.output_tokens), 0)
		FROM public.copilot_tokens k JOIN public.copilot_threads t ON t.thread_id = k.thread_id
		WHERE k.org_id = $1 AND k.at >= $2 AND k.at < $3 AND ($4::text[] IS NULL OR t.device_id = ANY($4))
		AND ($5 = '' OR t.device_id = $5)`, orgID, from, to, devices, deviceID).Scan(&in, &out)
	return in, out, err
}

// CopilotApprovalView is an approval as the read model shows it.
type CopilotApprovalView struct {
	ApprovalID    string
	ThreadID      string
	CallID        string
	DeviceID      string
	Action        string
	Arguments     json.RawMessage
	Frame         string
	FencingToken  int64
	Digest        string
	Reason        string
	State         string
	RefusedReason string
	ExpiresAt     time.Time
	RequestedAt   time.Time
	DecidedAt     *time.Time
}

const copilotApprovalColumns = `a.approval_id, a.thread_id, a.call_id, a.device_id, a.action, a.arguments, a.frame, a.fencing_token,
	a.digest, a.reason, a.state, coalesce(a.refused_reason, ''), a.expires_at, a.requested_at, a.decided_at`

// Approvals lists the person's approvals in orgID in state (all when
// empty), newest first, at most limit, within devices (nil: all).
func (q CopilotQueries) Approvals(ctx context.Context, orgID, userID string, devices []string, state string, limit int) ([]CopilotApprovalView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+copilotApprovalColumns+` FROM public.copilot_approvals a
		JOIN public.copilot_threads t ON t.thread_id = a.thread_id
		WHERE a.org_id = $1 AND t.user_id = $2 AND ($3::text[] IS NULL OR a.device_id = ANY($3)) AND ($4 = '' OR a.state = $4)
		ORDER BY a.requested_at DESC, a.approval_id DESC LIMIT $5`, orgID, userID, devices, state, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []CopilotApprovalView{}
	for rows.Next() {
		var v CopilotApprovalView
		if err := rows.Scan(&v.ApprovalID, &v.ThreadID, &v.CallID, &v.DeviceID, &v.Action, &v.Arguments, &v.Frame, &v.FencingToken,
			&v.Digest, &v.Reason, &v.State, &v.RefusedReason, &v.ExpiresAt, &v.RequestedAt, &v.DecidedAt); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ApprovalThread names the thread of one of the person's approvals in
// orgID; found is false for any other.
func (q CopilotQueries) ApprovalThread(ctx context.Context, orgID, userID, approvalID string) (string, bool, error) {
	var id string
	err := q.DB.QueryRow(ctx, `SELECT a.thread_id FROM public.copilot_approvals a JOIN public.copilot_threads t ON t.thread_id = a.thread_id
		WHERE a.org_id = $1 AND t.user_id = $2 AND a.approval_id = $3`, orgID, userID, approvalID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return id, err == nil, err
}

// CopilotThreadsDue lists threads a sweep has something to decide on at
// now: a pending approval past its expiry, or a turn in flight on a
// thread untouched since lostBefore (the command side decides; rows the
// read model has not caught up on come back at a later pass).
func CopilotThreadsDue(ctx context.Context, db *pgxpool.Pool, now, lostBefore time.Time, limit int) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT thread_id FROM (
			SELECT thread_id FROM public.copilot_approvals WHERE state = 'pending' AND expires_at <= $1
			UNION
			SELECT thread_id FROM public.copilot_threads WHERE turn_id IS NOT NULL AND updated_at <= $2
		) due ORDER BY thread_id LIMIT $3`, now, lostBefore, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
