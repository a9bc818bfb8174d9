package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// NotificationsName is the stable name of the Notifications projection.
const NotificationsName = "notifications"

// Notifications is the read side of notifications (domain
// notification_events.go), in one projection so that each table sees the
// others as they stood at each event's place in the feed:
//   - notification_triggers: one row per domain event a person must hear of
//     (run.parked, run.ended, payment.followup_attempted refused or given up,
//     gateway.disconnected for a reason that is not routine,
//     device.went_offline, notification.api_key_expiry_due, and every
//     copilot.tokens_used, whose fan-out decides whether it took the
//     copilot allowance past a threshold), keyed by
//     domain.NotificationTriggerKey of the event, with the facts the message
//     is made of; notification.raised moves it pending → done | failed.
//     These are the notification reaction's items.
//   - notifications: one row per notification raised for a person (ids in
//     the notification.raised event), read by notification.read, with its
//     e-mail state moved by notification.email_attempted (the e-mail
//     reaction's items).
//   - notification_people: who the organisation's people are to
//     notifications (role, address, preferences).
//
// It has no side effect: recipients are decided by the reaction and
// recorded in notification.raised, so a rebuild makes the same rows and
// nothing is sent twice.
type Notifications struct{}

// Name implements Projection.
func (Notifications) Name() string { return NotificationsName }

// Tables implements Projection.
func (Notifications) Tables() []string {
	return []string{"notification_triggers", "notifications", "notification_people"}
}

// EventTypes implements Selective.
func (Notifications) EventTypes() []string {
	return []string{"notification.%", "run.parked", "run.ended", "payment.followup_attempted", "gateway.disconnected",
		"device.went_offline", "copilot.tokens_used"}
}

// Setup implements Projection.
func (Notifications) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE `+schema+`.notification_triggers (
		trigger_key  text PRIMARY KEY,
		org_id       text NOT NULL,
		kind         text NOT NULL,
		facts        jsonb NOT NULL,
		status       text NOT NULL,
		attempts     integer NOT NULL DEFAULT 0,
		due_at       timestamptz NOT NULL,
		last_error   text NOT NULL DEFAULT '',
		created_at   timestamptz NOT NULL,
		source_tx    text NOT NULL,
		source_pos   bigint NOT NULL
	);
	CREATE INDEX ON `+schema+`.notification_triggers (due_at, trigger_key) WHERE status = 'pending';
	CREATE TABLE `+schema+`.notifications (
		notification_id text PRIMARY KEY,
		org_id          text NOT NULL,
		user_id         text NOT NULL,
		trigger_key     text NOT NULL,
		kind            text NOT NULL,
		title           text NOT NULL,
		body            text NOT NULL,
		subject         jsonb NOT NULL,
		console         boolean NOT NULL,
		email           text NOT NULL,
		email_status    text NOT NULL,
		email_attempts  integer NOT NULL DEFAULT 0,
		email_due_at    timestamptz NOT NULL,
		email_error     text NOT NULL DEFAULT '',
		created_at      timestamptz NOT NULL,
		read_at         timestamptz
	);
	CREATE INDEX ON `+schema+`.notifications (org_id, user_id, created_at DESC, notification_id DESC) WHERE console;
	CREATE INDEX ON `+schema+`.notifications (email_due_at, notification_id) WHERE email_status = 'pending';
	CREATE TABLE `+schema+`.notification_people (
		org_id      text NOT NULL,
		user_id     text NOT NULL,
		role        text NOT NULL,
		preferences jsonb NOT NULL,
		updated_at  timestamptz NOT NULL,
		PRIMARY KEY (org_id, user_id)
	);`)
	return err
}

// Trigger and e-mail statuses.
const (
	NotificationPending = "pending"
	NotificationDone    = "done"
	NotificationFailed  = "failed"
	// EmailNone: the notification is not e-mailed.
	EmailNone = "none"
)

// gatewayGoneReasons are the disconnections that leave a gateway's phones
// unserved until someone acts; the others (replaced, shutting down,
// revoked, superseded) are routine or done by an admin.
var gatewayGoneReasons = map[string]bool{domain.GatewayReasonHeartbeatLost: true, domain.GatewayReasonConnectionLost: true,
	domain.GatewayReasonClosedByGateway: true, domain.GatewayReasonInstanceLost: true, domain.GatewayReasonClaimLost: true}

var notificationEventTypes = typeSet(nameOf(domain.RunParked{}), nameOf(domain.RunEnded{}), nameOf(domain.PaymentFollowupAttempted{}),
	nameOf(domain.GatewayDisconnected{}), nameOf(domain.DeviceWentOffline{}), nameOf(domain.APIKeyExpiryNoticeDue{}),
	nameOf(domain.CopilotTokensUsed{}),
	nameOf(domain.NotificationsRaised{}), nameOf(domain.NotificationEmailAttempted{}), nameOf(domain.NotificationsRead{}),
	nameOf(domain.NotificationPreferencesSet{}), nameOf(domain.NotificationPersonSeen{}))

// Apply implements Projection, event by event (a read applies to the
// notifications the events before it raised).
func (Notifications) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	for _, e := range events {
		if !notificationEventTypes[e.Type] {
			continue
		}
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
		}
		if err := applyNotification(ctx, tx, schema, e, ev); err != nil {
			return fmt.Errorf("%s at %d: %w", e.Type, e.Position, err)
		}
	}
	return nil
}

func ref(a *domain.Actor) string {
	if a == nil {
		return ""
	}
	return a.Kind + ":" + a.ID
}

func applyNotification(ctx context.Context, tx pgx.Tx, schema string, e eventstore.Event, ev domain.Event) error {
	trigger := func(kind string, at time.Time, facts map[string]string) error {
		b, err := json.Marshal(facts)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.notification_triggers (trigger_key, org_id, kind, facts, status, due_at, created_at,
				source_tx, source_pos)
			VALUES ($1, $2, $3, $4, 'pending', $5, $5, $6, $7) ON CONFLICT DO NOTHING`,
			domain.NotificationTriggerKey(e.ID), e.OrgID, kind, b, at, strconv.FormatUint(e.TransactionID, 10), e.Position)
		return err
	}
	switch ev := ev.(type) {
	case domain.RunParked:
		return trigger(domain.NotifyRunNeedsUser, ev.At, map[string]string{"runId": ev.RunID, "agentRunId": ev.AgentRunID,
			"deviceId": ev.DeviceID, "goal": ev.Goal, "reason": ev.Reason})
	case domain.RunEnded:
		f := map[string]string{"runId": ev.RunID, "agentRunId": ev.AgentRunID, "deviceId": ev.DeviceID, "goal": ev.Goal,
			"state": ev.State, "endedBy": ref(ev.By)}
		if ev.Reason != nil {
			f["reason"] = *ev.Reason
		}
		return trigger(domain.NotifyRunEnded, ev.EndedAt, f)
	case domain.PaymentFollowupAttempted:
		if ev.Outcome != domain.FollowupRefused && ev.Outcome != domain.FollowupGaveUp {
			return nil
		}
		return trigger(domain.NotifyPaymentFollowupFailed, ev.At, map[string]string{"followupId": ev.FollowupID,
			"fulfilmentId": ev.FulfilmentID, "action": ev.Action, "outcome": ev.Outcome, "error": ev.Error,
			"amount": strconv.FormatInt(ev.Amount, 10), "currency": ev.Currency})
	case domain.GatewayDisconnected:
		if !gatewayGoneReasons[ev.Reason] {
			return nil
		}
		return trigger(domain.NotifyGatewayGone, ev.At, map[string]string{"gatewayId": ev.GatewayID, "reason": ev.Reason})
	case domain.DeviceWentOffline:
		return trigger(domain.NotifyDeviceOffline, ev.At, map[string]string{"deviceId": ev.DeviceID, "state": ev.State,
			"at": ev.At.UTC().Format(time.RFC3339Nano)})
	case domain.APIKeyExpiryNoticeDue:
		return trigger(domain.NotifyAPIKeyExpiring, ev.At, map[string]string{"keyId": ev.KeyID, "name": ev.Name,
			"mintedBy": ev.MintedBy, "expiresAt": ev.ExpiresAt.UTC().Format(time.RFC3339), "threshold": ev.Threshold})
	case domain.CopilotTokensUsed:
		return trigger(domain.CopilotTokensTrigger, ev.At, map[string]string{"threadId": ev.ThreadID, "turnId": ev.TurnID,
			"userId": ev.UserID, "tokens": strconv.FormatInt(ev.InputTokens+ev.OutputTokens, 10),
			"at": ev.At.UTC().Format(time.RFC3339Nano), "eventId": e.ID.String()})
	case domain.NotificationsRaised:
		status := NotificationDone
		due := ev.At
		switch {
		case ev.Error != "" && ev.NextAttemptAt != nil:
			status, due = NotificationPending, *ev.NextAttemptAt
		case ev.Error != "":
			status = NotificationFailed
		}
		if _, err := tx.Exec(ctx, `UPDATE `+schema+`.notification_triggers SET status = $2, attempts = $3, due_at = $4, last_error = $5
			WHERE trigger_key = $1 AND attempts < $3`, ev.TriggerKey, status, ev.Attempt, due, ev.Error); err != nil {
			return err
		}
		subject, err := json.Marshal(ev.Subject)
		if err != nil {
			return err
		}
		for _, r := range ev.Recipients {
			email := EmailNone
			if r.Email != "" {
				email = NotificationPending
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.notifications (notification_id, org_id, user_id, trigger_key, kind,
					title, body, subject, console, email, email_status, email_due_at, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) ON CONFLICT DO NOTHING`,
				r.NotificationID, e.OrgID, r.UserID, ev.TriggerKey, ev.Kind, ev.Title, ev.Body, subject, r.Console, r.Email,
				email, ev.At); err != nil {
				return err
			}
		}
		return nil
	case domain.NotificationEmailAttempted:
		status, due := NotificationPending, ev.At
		switch ev.Outcome {
		case domain.EmailSent, domain.EmailUnconfirmed:
			status = domain.EmailSent
		case domain.EmailFailed:
			status = NotificationFailed
		}
		if ev.NextAttemptAt != nil {
			due = *ev.NextAttemptAt
		}
		_, err := tx.Exec(ctx, `UPDATE `+schema+`.notifications SET email_status = $2, email_attempts = $3, email_due_at = $4, email_error = $5
			WHERE notification_id = $1 AND email_attempts < $3`, ev.NotificationID, status, ev.Attempt, due, ev.Error)
		return err
	case domain.NotificationsRead:
		var err error
		switch {
		case len(ev.IDs) > 0:
			_, err = tx.Exec(ctx, `UPDATE `+schema+`.notifications SET read_at = $3
				WHERE org_id = $1 AND user_id = $2 AND notification_id = ANY($4) AND read_at IS NULL`, e.OrgID, ev.UserID, ev.At, ev.IDs)
		case ev.Before != nil:
			_, err = tx.Exec(ctx, `UPDATE `+schema+`.notifications SET read_at = $3
				WHERE org_id = $1 AND user_id = $2 AND (created_at, notification_id) < ($4, $5) AND read_at IS NULL`,
				e.OrgID, ev.UserID, ev.At, *ev.Before, ev.BeforeID)
		default:
			_, err = tx.Exec(ctx, `UPDATE `+schema+`.notifications SET read_at = $3
				WHERE org_id = $1 AND user_id = $2 AND read_at IS NULL`, e.OrgID, ev.UserID, ev.At)
		}
		return err
	case domain.NotificationPersonSeen:
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.notification_people (org_id, user_id, role, preferences, updated_at)
			VALUES ($1, $2, $3, '{"email":"","kinds":{}}', $4)
			ON CONFLICT (org_id, user_id) DO UPDATE SET role = EXCLUDED.role, updated_at = EXCLUDED.updated_at`,
			e.OrgID, ev.UserID, ev.Role, ev.At)
		return err
	case domain.NotificationPreferencesSet:
		b, err := json.Marshal(ev.NotificationPreferences)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.notification_people (org_id, user_id, role, preferences, updated_at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (org_id, user_id) DO UPDATE SET role = EXCLUDED.role, preferences = EXCLUDED.preferences,
				updated_at = EXCLUDED.updated_at`, e.OrgID, ev.UserID, ev.Role, b, ev.At)
		return err
	}
	return nil
}

// NotificationView is a notification as the read model shows it.
type NotificationView struct {
	NotificationID, Kind, Title, Body string
	Subject                           map[string]string
	CreatedAt                         time.Time
	ReadAt                            *time.Time
	EmailStatus                       string
}

// NotificationFilter selects a page of one person's notifications: newest
// first, strictly before (Before, BeforeID) when Before is set.
type NotificationFilter struct {
	OrgID, UserID string
	UnreadOnly    bool
	Before        time.Time
	BeforeID      string
	Limit         int
}

// NotificationPage is a page and the cursor of the next one (zero on the last).
type NotificationPage struct {
	Items        []NotificationView
	NextBefore   time.Time
	NextBeforeID string
	UnreadCount  int
}

// NotificationQueries reads the notifications read model.
type NotificationQueries struct{ DB *pgxpool.Pool }

// List returns a page of f's notifications shown in the console, and how
// many of them are unread in all.
func (q NotificationQueries) List(ctx context.Context, f NotificationFilter) (NotificationPage, error) {
	var page NotificationPage
	args := []any{f.OrgID, f.UserID, f.Limit + 1}
	where := `org_id = $1 AND user_id = $2 AND console`
	if f.UnreadOnly {
		where += ` AND read_at IS NULL`
	}
	if !f.Before.IsZero() {
		args = append(args, f.Before, f.BeforeID)
		where += ` AND (created_at, notification_id) < ($4, $5)`
	}
	rows, err := q.DB.Query(ctx, `SELECT notification_id, kind, title, body, subject, created_at, read_at, email_status
		FROM notifications WHERE `+where+` ORDER BY created_at DESC, notification_id DESC LIMIT $3`, args...)
	if err != nil {
		return page, err
	}
	page.Items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (NotificationView, error) {
		var v NotificationView
		err := r.Scan(&v.NotificationID, &v.Kind, &v.Title, &v.Body, &v.Subject, &v.CreatedAt, &v.ReadAt, &v.EmailStatus)
		return v, err
	})
	if err != nil {
		return page, err
	}
	if len(page.Items) > f.Limit {
		page.Items = page.Items[:f.Limit]
		last := page.Items[len(page.Items)-1]
		page.NextBefore, page.NextBeforeID = last.CreatedAt, last.NotificationID
	}
	page.UnreadCount, err = q.UnreadCount(ctx, f.OrgID, f.UserID)
	return page, err
}

// UnreadCount is how many of a person's console notifications are unread.
func (q NotificationQueries) UnreadCount(ctx context.Context, orgID, userID string) (int, error) {
	var n int
	err := q.DB.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE org_id = $1 AND user_id = $2 AND console AND read_at IS NULL`,
		orgID, userID).Scan(&n)
	return n, err
}

// Person is one person as notifications know them.
type Person struct {
	Role        string
	Preferences domain.NotificationPreferences
}

// Person returns a person of an organisation; found is false when they are
// not known to notifications yet.
func (q NotificationQueries) Person(ctx context.Context, orgID, userID string) (p Person, found bool, err error) {
	err = q.DB.QueryRow(ctx, `SELECT role, preferences FROM notification_people WHERE org_id = $1 AND user_id = $2`, orgID, userID).
		Scan(&p.Role, &p.Preferences)
	if errors.Is(err, pgx.ErrNoRows) {
		return Person{}, false, nil
	}
	return p, err == nil, err
}

// ErrNotYetKnown is returned by a recipient query whose source read model
// has not caught up yet (the reaction tries again).
var ErrNotYetKnown = errors.New("not yet in the read model")

// CaughtUp returns ErrNotYetKnown unless every named read model has applied
// the event at (tx, pos) of the feed: recipients are read as the read
// models stood at the trigger at least, never before it.
func (q NotificationQueries) CaughtUp(ctx context.Context, tx string, pos int64, names ...string) error {
	var behind []string
	err := q.DB.QueryRow(ctx, `SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM unnest($3::text[]) n
		WHERE NOT EXISTS (SELECT 1 FROM projection_checkpoints c JOIN projection_registry g ON c.consumer_group = g.name || '@' || g.active_version
			WHERE g.name = n AND (c.last_transaction_id, c.last_position) >= ($1::text::xid8, $2))`, tx, pos, names).Scan(&behind)
	if err != nil {
		return err
	}
	if len(behind) > 0 {
		return fmt.Errorf("%w: %v", ErrNotYetKnown, behind)
	}
	return nil
}

// personOf maps an actor to the person it stands for: a person is
// themselves, a key is the person who minted it; "" for anything else.
const personOf = `CASE WHEN a.kind = 'user' THEN a.id
	WHEN a.kind = 'api_key' THEN (SELECT k.minted_by FROM api_keys k WHERE k.key_id = a.id AND k.org_id = $1)
	ELSE '' END`

// RunStarter returns the person who started a run (a key's minter when a
// key did); ErrNotYetKnown while the runs read model has not the run.
func (q NotificationQueries) RunStarter(ctx context.Context, orgID, runID string) (string, error) {
	var who *string
	err := q.DB.QueryRow(ctx, `SELECT `+personOf+` FROM runs r, LATERAL (SELECT r.starter_kind AS kind, r.starter_id AS id) a
		WHERE r.org_id = $1 AND r.run_id = $2`, orgID, runID).Scan(&who)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotYetKnown
	}
	if err != nil || who == nil {
		return "", err
	}
	return *who, nil
}

// Admins returns the organisation's admins known to notifications.
func (q NotificationQueries) Admins(ctx context.Context, orgID string) ([]string, error) {
	rows, err := q.DB.Query(ctx, `SELECT user_id FROM notification_people WHERE org_id = $1 AND role = $2 ORDER BY user_id`,
		orgID, domain.RoleAdmin)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RecentDeviceUsers returns the people who held a lease on a device (in
// person, through a key they minted, or through a run they started) in
// the week before at.
func (q NotificationQueries) RecentDeviceUsers(ctx context.Context, orgID, deviceID string, at time.Time) ([]string, error) {
	rows, err := q.DB.Query(ctx, `SELECT DISTINCT who FROM (
			SELECT `+personOf+` AS who FROM leases l,
				LATERAL (SELECT CASE WHEN l.holder_kind = 'run' THEN r.starter_kind ELSE l.holder_kind END AS kind,
					CASE WHEN l.holder_kind = 'run' THEN r.starter_id ELSE l.holder_id END AS id
					FROM (SELECT NULL) x LEFT JOIN runs r ON l.holder_kind = 'run' AND r.run_id = l.holder_id) a
			WHERE l.org_id = $1 AND l.device_id = $2 AND l.acquired_at <= $3
			  AND coalesce(l.ended_at, l.expires_at) >= $3::timestamptz - interval '7 days') w
		WHERE who IS NOT NULL AND who <> '' ORDER BY who`, orgID, deviceID, at)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CopilotTokensBefore sums the tokens the organisation's copilot took in
// [from, at) of the copilot read model (copilot_tokens, the allowance's
// count) and at at itself from events ordered before eventID: the
// organisation's use just before one answer, in one total order.
func (q NotificationQueries) CopilotTokensBefore(ctx context.Context, orgID string, from, at time.Time, eventID string) (int64, error) {
	var n int64
	err := q.DB.QueryRow(ctx, `SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM public.copilot_tokens
		WHERE org_id = $1 AND at >= $2 AND (at, event_id) < ($3, $4::uuid)`, orgID, from, at, eventID).Scan(&n)
	return n, err
}

// CopilotNoticeRaised reports whether a notification of kind was raised
// for the organisation's copilot allowance in period (its subject's
// period), to anyone.
func (q NotificationQueries) CopilotNoticeRaised(ctx context.Context, orgID, kind, period string) (bool, error) {
	var ok bool
	err := q.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notifications WHERE org_id = $1 AND kind = $2 AND subject->>'period' = $3)`,
		orgID, kind, period).Scan(&ok)
	return ok, err
}

// People returns the named people's preferences (defaults for one not known).
func (q NotificationQueries) People(ctx context.Context, orgID string, userIDs []string) (map[string]domain.NotificationPreferences, error) {
	out := make(map[string]domain.NotificationPreferences, len(userIDs))
	for _, u := range userIDs {
		out[u] = domain.NotificationPreferences{}
	}
	rows, err := q.DB.Query(ctx, `SELECT user_id, preferences FROM notification_people WHERE org_id = $1 AND user_id = ANY($2)`,
		orgID, userIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var u string
		var p domain.NotificationPreferences
		if err := rows.Scan(&u, &p); err != nil {
			return nil, err
		}
		out[u] = p
	}
	return out, rows.Err()
}

// ExpiringKey is a key whose minter is owed an expiry notice.
type ExpiringKey struct {
	OrgID, KeyID, Name, MintedBy string
	ExpiresAt                    time.Time
	Threshold                    string
}

// KeysExpiring returns up to limit live keys that expire within a week of
// now and whose notice for their current threshold (a day or a week
// before, domain.KeyExpiryThreshold) is not raised yet.
func (q NotificationQueries) KeysExpiring(ctx context.Context, now time.Time, limit int) ([]ExpiringKey, error) {
	rows, err := q.DB.Query(ctx, `SELECT k.org_id, k.key_id, k.name, k.minted_by, k.expires_at,
			CASE WHEN k.expires_at <= $1::timestamptz + interval '1 day' THEN 'day' ELSE 'week' END AS threshold
		FROM api_keys k
		WHERE k.revoked_at IS NULL AND k.expires_at > $1::timestamptz AND k.expires_at <= $1::timestamptz + interval '7 days'
		  AND NOT EXISTS (SELECT 1 FROM notification_triggers t WHERE t.kind = $2 AND t.org_id = k.org_id
			AND t.facts->>'keyId' = k.key_id AND t.facts->>'expiresAt' = to_char(k.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
			AND t.facts->>'threshold' = CASE WHEN k.expires_at <= $1::timestamptz + interval '1 day' THEN 'day' ELSE 'week' END)
		ORDER BY k.expires_at, k.key_id LIMIT $3`, now, domain.NotifyAPIKeyExpiring, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExpiringKey, error) {
		var k ExpiringKey
		err := r.Scan(&k.OrgID, &k.KeyID, &k.Name, &k.MintedBy, &k.ExpiresAt, &k.Threshold)
		return k, err
	})
}
