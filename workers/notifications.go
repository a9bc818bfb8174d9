package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/notifications"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
	"phonefleet/internal/clock"
	"phonefleet/internal/smtpmail"
	"phonefleet/projections"
)

// NotificationsConfig configures the notification workers. Zero values
// take the documented defaults.
type NotificationsConfig struct {
	// Pool is the service's database (the notifications read model, the
	// read models recipients are found in, the claims table and the e-mail
	// send marks of migration 0011).
	Pool *pgxpool.Pool
	// App is the notifications capability's entry points.
	App notifications.Handlers
	// Mail sends e-mail; nil: the deployment sends none (no e-mail
	// reaction runs, and notifications are raised for the console only).
	Mail *smtpmail.Config
	// Now is the clock of due times, leases and the key-expiry sweep; nil
	// means clock.Now.
	Now func() time.Time
	// ID names this instance in claims and event metadata; empty: random.
	ID string
	// Poll is how often the fan-out looks for due triggers when nothing
	// wakes it; zero means 250 ms (a parked run's starter hears of it within
	// a second). The e-mail reaction looks four times less often.
	Poll time.Duration
	// Lease is how long a claim is held; zero means one minute.
	Lease time.Duration
	// SweepInterval is the key-expiry sweep's interval; zero means an hour.
	SweepInterval time.Duration
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
	// CopilotMetered and CopilotTokensPerDevice are the copilot's
	// allowance as the copilot meters it (hosted: the price list's tokens
	// per subscribed device); unmetered, or with no allowance configured,
	// the copilot's answers raise no notification.
	CopilotMetered         bool
	CopilotTokensPerDevice *int64
}

// Notifications are the notification workers: the fan-out reaction (a
// trigger of the notifications read model → the notifications of the
// people who should hear of it, recorded in notification.raised), the
// e-mail reaction (a notification to e-mail → one SMTP message, recorded
// in notification.email_attempted), and the key-expiry sweep.
type Notifications struct {
	cfg    NotificationsConfig
	fanout *Reactor[notificationTrigger, domain.NotificationsRaised]
	email  *Reactor[notificationEmail, domain.NotificationEmailAttempted]
	sweep  Sweep[int]
}

// NewNotifications returns the workers for cfg.
func NewNotifications(cfg NotificationsConfig) *Notifications {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	q := projections.NotificationQueries{DB: cfg.Pool}
	w := &Notifications{cfg: cfg}
	w.fanout = NewReactor[notificationTrigger, domain.NotificationsRaised](&fanoutReaction{
		Claims: claims.New(cfg.Pool, fanoutSource()), cfg: cfg, q: q},
		ReactorConfig[notificationTrigger, domain.NotificationsRaised]{Name: notifications.FanoutReaction, ID: cfg.ID, Now: cfg.Now,
			Poll: cfg.Poll, Lease: cfg.Lease, Concurrency: 8, Logger: cfg.Logger})
	if cfg.Mail != nil {
		w.email = NewReactor[notificationEmail, domain.NotificationEmailAttempted](&emailReaction{
			Claims: claims.New(cfg.Pool, emailSource()), cfg: cfg},
			ReactorConfig[notificationEmail, domain.NotificationEmailAttempted]{Name: notifications.EmailReaction, ID: cfg.ID, Now: cfg.Now,
				Poll: 4 * cfg.Poll, Lease: cfg.Lease, Concurrency: 4, Logger: cfg.Logger})
	}
	w.sweep = Sweep[int]{Worker: "notification-key-expiry", Interval: cfg.SweepInterval, Default: time.Hour, AtOnce: true,
		Logger: cfg.Logger, Pass: func(ctx context.Context) (int, error) {
			now := cfg.Now()
			return sendEachDue(ctx, func(ctx context.Context, limit int) ([]projections.ExpiringKey, error) {
				return q.KeysExpiring(ctx, now, limit)
			}, func(ctx context.Context, k projections.ExpiringKey) (bool, error) {
				return cfg.App.RaiseKeyExpiryNotice.Handle(ctx, notifications.RaiseKeyExpiryNotice{OrgID: k.OrgID,
					Event: domain.APIKeyExpiryNoticeDue{KeyID: k.KeyID, Name: k.Name, MintedBy: k.MintedBy, ExpiresAt: k.ExpiresAt,
						Threshold: k.Threshold, At: now.UTC().Truncate(time.Microsecond)}})
			})
		}}
	return w
}

// Runs returns the workers' loops, for the service to run.
func (w *Notifications) Runs() []func(context.Context) {
	out := []func(context.Context){w.fanout.Run, w.sweep.Run}
	if w.email != nil {
		out = append(out, w.email.Run)
	}
	return out
}

// FanoutOnce makes the due fan-out attempts and returns what they recorded.
func (w *Notifications) FanoutOnce(ctx context.Context) ([]domain.NotificationsRaised, error) {
	as, err := w.fanout.Once(ctx)
	out := make([]domain.NotificationsRaised, 0, len(as))
	for _, a := range as {
		out = append(out, a.Outcome)
	}
	return out, err
}

// EmailOnce makes the due e-mail attempts and returns what they recorded.
func (w *Notifications) EmailOnce(ctx context.Context) ([]domain.NotificationEmailAttempted, error) {
	if w.email == nil {
		return nil, nil
	}
	as, err := w.email.Once(ctx)
	out := make([]domain.NotificationEmailAttempted, 0, len(as))
	for _, a := range as {
		out = append(out, a.Outcome)
	}
	return out, err
}

// SweepOnce makes one key-expiry pass and says how many notices it raised.
func (w *Notifications) SweepOnce(ctx context.Context) (int, error) { return w.sweep.Once(ctx) }

// notificationTrigger is a trigger as the fan-out claims it.
type notificationTrigger struct {
	OrgID, Kind string
	Facts       map[string]string
	CreatedAt   time.Time
	// SourceTx and SourcePos place the trigger's event in the feed.
	SourceTx  string
	SourcePos int64
}

func fanoutSource() claims.Source[notificationTrigger] {
	return claims.Source[notificationTrigger]{
		Reaction: notifications.FanoutReaction,
		Items:    `SELECT trigger_key AS key, attempts FROM notification_triggers`,
		Due: `SELECT t.trigger_key AS key, t.attempts, t.due_at, t.org_id, t.kind, t.facts, t.created_at, t.source_tx, t.source_pos
			FROM notification_triggers t WHERE t.status = 'pending'`,
		Scan: func(t *notificationTrigger) []any {
			return []any{&t.OrgID, &t.Kind, &t.Facts, &t.CreatedAt, &t.SourceTx, &t.SourcePos}
		},
	}
}

// fanoutReaction decides who hears of a trigger and on which channels.
type fanoutReaction struct {
	*claims.Claims[notificationTrigger]
	cfg NotificationsConfig
	q   projections.NotificationQueries
}

// Act finds the recipients (reading the read models the trigger names),
// applies each one's preferences and decides the attempt's event.
func (r *fanoutReaction) Act(ctx context.Context, c Claimed[notificationTrigger]) domain.NotificationsRaised {
	t := c.Item
	key := c.Key
	var people []string
	var err error
	if t.Kind == domain.CopilotTokensTrigger {
		// Which notification (if any) is decided here, not by the trigger.
		var kind string
		kind, key, people, err = r.copilotAllowance(ctx, &t)
		t.Kind = kind
		if kind == "" {
			t.Kind = domain.CopilotTokensTrigger
		}
	} else {
		people, err = r.recipients(ctx, t)
	}
	m := domain.NotificationMessageFor(t.Kind, t.Facts)
	var rs []domain.NotificationRecipient
	if err == nil && len(people) > 0 {
		var prefs map[string]domain.NotificationPreferences
		prefs, err = r.q.People(ctx, t.OrgID, people)
		for _, p := range people {
			ch := prefs[p].For(t.Kind)
			rec := domain.NotificationRecipient{NotificationID: domain.NotificationID(key, p), UserID: p, Console: ch.Console}
			if ch.Email && r.cfg.Mail != nil {
				rec.Email = prefs[p].Email
			}
			if rec.Console || rec.Email != "" {
				rs = append(rs, rec)
			}
		}
	}
	return domain.DecideNotificationsRaised(c.Key, m, c.Attempt, r.cfg.Now(), rs, err)
}

func (r *fanoutReaction) recipients(ctx context.Context, t notificationTrigger) ([]string, error) {
	one := func(who string, err error) ([]string, error) {
		if err != nil || who == "" {
			return nil, err
		}
		return []string{who}, nil
	}
	// The read models recipients are found in must have seen the trigger.
	var sources []string
	switch t.Kind {
	case domain.NotifyRunNeedsUser, domain.NotifyRunEnded:
		sources = []string{projections.RunsName, projections.APIKeysName}
	case domain.NotifyDeviceOffline:
		sources = []string{projections.LeasesName, projections.RunsName, projections.APIKeysName}
	}
	if len(sources) > 0 {
		if err := r.q.CaughtUp(ctx, t.SourceTx, t.SourcePos, sources...); err != nil {
			return nil, err
		}
	}
	switch t.Kind {
	case domain.NotifyRunNeedsUser:
		return one(r.q.RunStarter(ctx, t.OrgID, t.Facts["runId"]))
	case domain.NotifyRunEnded:
		who, err := r.q.RunStarter(ctx, t.OrgID, t.Facts["runId"])
		if err == nil && t.Facts["endedBy"] == "user:"+who {
			return nil, nil // the starter ended it themselves
		}
		return one(who, err)
	case domain.NotifyPaymentFollowupFailed, domain.NotifyGatewayGone:
		return r.q.Admins(ctx, t.OrgID)
	case domain.NotifyAPIKeyExpiring:
		return one(t.Facts["mintedBy"], nil)
	case domain.NotifyDeviceOffline:
		at, err := time.Parse(time.RFC3339Nano, t.Facts["at"])
		if err != nil {
			at = t.CreatedAt
		}
		return r.q.RecentDeviceUsers(ctx, t.OrgID, t.Facts["deviceId"], at)
	}
	return nil, fmt.Errorf("unknown notification kind %q", t.Kind)
}

// copilotAllowance decides what one answer of the copilot's model (a
// copilot.tokens_used trigger) raises: the kind (none: ""), the key the
// notifications' ids derive from, and the recipients (every admin and the
// person whose turn it was). The allowance is the one the allowance route
// reads (domain.MeteredCopilotAllowance over the price list, the live
// subscriptions of the fulfilments read model, the tokens of the copilot
// read model), once both read models have applied the answer; before is
// the organisation's use just before the answer, in the order (at, event
// id). A kind already raised for the organisation this period is not
// raised again; nor is one of a period already over when it is decided
// (the triggers of answers recorded before this notification existed). It
// adds the figures the message says to t.Facts.
func (r *fanoutReaction) copilotAllowance(ctx context.Context, t *notificationTrigger) (string, string, []string, error) {
	if !r.cfg.CopilotMetered || r.cfg.CopilotTokensPerDevice == nil {
		return "", "", nil, nil
	}
	at, err := time.Parse(time.RFC3339Nano, t.Facts["at"])
	if err != nil {
		return "", "", nil, fmt.Errorf("copilot tokens trigger without its time: %w", err)
	}
	tokens, err := strconv.ParseInt(t.Facts["tokens"], 10, 64)
	if err != nil {
		return "", "", nil, fmt.Errorf("copilot tokens trigger without its tokens: %w", err)
	}
	period := domain.BillingPeriodOf(at)
	if err := r.q.CaughtUp(ctx, t.SourceTx, t.SourcePos, projections.CopilotName, projections.FulfilmentsName); err != nil {
		return "", "", nil, err
	}
	devices, err := projections.LiveFulfilments(ctx, r.cfg.Pool, t.OrgID, domain.BillingSubscription)
	if err != nil {
		return "", "", nil, err
	}
	before, err := r.q.CopilotTokensBefore(ctx, t.OrgID, period.Start, at, t.Facts["eventId"])
	if err != nil {
		return "", "", nil, err
	}
	per := *r.cfg.CopilotTokensPerDevice
	after := domain.MeteredCopilotAllowance(per, devices, before+tokens, period)
	kind := domain.CopilotAllowanceCrossed(domain.MeteredCopilotAllowance(per, devices, before, period), after)
	if kind == "" {
		return "", "", nil, nil
	}
	if raised, err := r.q.CopilotNoticeRaised(ctx, t.OrgID, kind, period.Name()); err != nil || raised {
		return "", "", nil, err
	}
	admins, err := r.q.Admins(ctx, t.OrgID)
	if err != nil {
		return "", "", nil, err
	}
	people := admins
	if u := t.Facts["userId"]; u != "" && !slices.Contains(people, u) {
		people = append(people, u)
	}
	t.Facts["period"] = period.Name()
	t.Facts["used"] = strconv.FormatInt(after.Used, 10)
	t.Facts["included"] = strconv.FormatInt(after.Included, 10)
	return kind, domain.CopilotAllowanceNoticeKey(t.OrgID, period, kind), people, nil
}

// Record implements Reaction.
func (r *fanoutReaction) Record(ctx context.Context, c Claimed[notificationTrigger], o domain.NotificationsRaised) (eventstore.Appended, error) {
	return r.cfg.App.RecordNotificationsRaised.Handle(ctx, notifications.RecordNotificationsRaised{OrgID: c.Item.OrgID, Event: o})
}

// notificationEmail is a notification as the e-mail reaction claims it.
type notificationEmail struct {
	OrgID, UserID, Email, Title, Body string
}

func emailSource() claims.Source[notificationEmail] {
	return claims.Source[notificationEmail]{
		Reaction: notifications.EmailReaction,
		Items:    `SELECT notification_id AS key, email_attempts AS attempts FROM notifications WHERE email <> ''`,
		Due: `SELECT n.notification_id AS key, n.email_attempts AS attempts, n.email_due_at AS due_at,
				n.org_id, n.user_id, n.email, n.title, n.body
			FROM notifications n WHERE n.email_status = 'pending'`,
		Scan: func(e *notificationEmail) []any { return []any{&e.OrgID, &e.UserID, &e.Email, &e.Title, &e.Body} },
	}
}

// emailReaction sends one notification's e-mail.
type emailReaction struct {
	*claims.Claims[notificationEmail]
	cfg NotificationsConfig
}

// Act sends the message unless an earlier try of this very attempt got as
// far as sending its end: that try's instance died before recording, and
// the server may hold the message, so it is never sent again (recorded
// unconfirmed). The mark is committed in notification_email_sends before
// the final "." goes out.
func (r *emailReaction) Act(ctx context.Context, c Claimed[notificationEmail]) domain.NotificationEmailAttempted {
	e := c.Item
	decide := func(res domain.EmailResult) domain.NotificationEmailAttempted {
		return domain.DecideEmailAttempt(c.Key, e.UserID, c.Attempt, r.cfg.Now(), res)
	}
	var marked bool
	err := r.cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notification_email_sends WHERE notification_id = $1 AND attempt = $2)`,
		c.Key, c.Attempt).Scan(&marked)
	if err != nil {
		return decide(domain.EmailResult{Temporary: true, Error: "reading the send marks: " + err.Error()})
	}
	if marked {
		return decide(domain.EmailResult{Unconfirmed: true, Error: "an earlier try sent the whole message; its answer was lost with its instance"})
	}
	msg := smtpmail.Message{To: e.Email, Subject: "[phonefleet] " + e.Title,
		Body:      e.Body + "\n\nSee your notifications in the phonefleet console; switch this e-mail off in its notification preferences.\n",
		MessageID: domain.NotificationEmailKey(c.Key)}
	err = r.cfg.Mail.Send(ctx, msg, r.cfg.Now(), func() error {
		_, err := r.cfg.Pool.Exec(ctx, `INSERT INTO notification_email_sends (notification_id, attempt, holder, marked_at)
			VALUES ($1, $2, $3, now())`, c.Key, c.Attempt, r.cfg.ID)
		return err
	})
	var se *smtpmail.Error
	switch {
	case err == nil:
		return decide(domain.EmailResult{})
	case errors.As(err, &se):
		return decide(domain.EmailResult{Temporary: se.Temporary, Permanent: !se.Temporary, Error: se.Error()})
	}
	return decide(domain.EmailResult{Temporary: true, Error: err.Error()})
}

// Cleanup implements ClaimCleaner: the claims' cleanup, and the send
// marks of attempts the read model shows recorded (a recorded attempt is
// never taken over, so its mark is never read again).
func (r *emailReaction) Cleanup(ctx context.Context, now time.Time) error {
	if err := r.Claims.Cleanup(ctx, now); err != nil {
		return err
	}
	_, err := r.cfg.Pool.Exec(ctx, `DELETE FROM notification_email_sends s WHERE EXISTS (SELECT 1 FROM notifications n
		WHERE n.notification_id = s.notification_id AND n.email_attempts >= s.attempt)`)
	return err
}

// Record implements Reaction.
func (r *emailReaction) Record(ctx context.Context, c Claimed[notificationEmail], o domain.NotificationEmailAttempted) (eventstore.Appended, error) {
	return r.cfg.App.RecordEmailAttempt.Handle(ctx, notifications.RecordEmailAttempt{OrgID: c.Item.OrgID, Event: o})
}
