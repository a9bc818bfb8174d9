package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
	"phonefleet/internal/clock"
	"phonefleet/internal/payments"
)

// PaymentFollowupsConfig configures PaymentFollowups. Zero values take the
// documented defaults.
type PaymentFollowupsConfig struct {
	// Pool is the service's database (the payment_followups read model and
	// the claims table).
	Pool *pgxpool.Pool
	// Record is the application's RecordPaymentFollowup: it records each
	// attempt.
	Record cqrs.Handler[provisioning.RecordPaymentFollowup, eventstore.Appended]
	// Provider is the payment provider told.
	Provider payments.Provider
	// Now is the clock of due times and leases; nil means clock.Now.
	Now func() time.Time
	// ID names this instance in claims and event metadata; empty means a
	// random one.
	ID string
	// Concurrency is how many provider calls are in flight; zero means 8.
	Concurrency int
	// Lease is how long a claim is held; zero means two minutes (it
	// outlasts domain.FollowupAttemptTimeout).
	Lease time.Duration
	// Poll is how often Run looks for due follow-ups; zero means one second.
	Poll time.Duration
	// Logger receives failures to claim or record; nil discards them.
	Logger *slog.Logger
}

// PaymentFollowups tells the payment provider what our own decisions
// ended (domain payment_followups.go): the payment follow-up reaction over
// projections.PaymentFollowups, claimed through internal/claims, run by a
// Reactor. Every provider call carries domain.PaymentFollowupKey of the
// follow-up (derived from the triggering event), so an attempt made again
// after an instance died, or a retry after the provider was unavailable,
// is performed once by the provider.
type PaymentFollowups struct {
	cfg     PaymentFollowupsConfig
	reactor *Reactor[domain.PaymentFollowup, followupOutcome]
}

// followupOutcome is what one attempt came to: the organisation and the
// event that records it.
type followupOutcome struct {
	orgID string
	event domain.PaymentFollowupAttempted
}

// NewPaymentFollowups returns the worker for cfg.
func NewPaymentFollowups(cfg PaymentFollowupsConfig) *PaymentFollowups {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	w := &PaymentFollowups{cfg: cfg}
	w.reactor = NewReactor[domain.PaymentFollowup, followupOutcome](&followupReaction{
		Claims: claims.New(cfg.Pool, followupSource()), cfg: cfg, recorder: cfg.Record},
		ReactorConfig[domain.PaymentFollowup, followupOutcome]{Name: provisioning.FollowupReaction, ID: cfg.ID, Now: cfg.Now, Concurrency: cfg.Concurrency, Lease: cfg.Lease,
			Poll: cfg.Poll, Logger: cfg.Logger})
	return w
}

// Run carries out follow-ups until ctx ends.
func (w *PaymentFollowups) Run(ctx context.Context) { w.reactor.Run(ctx) }

// FollowupAttempt is one attempt made and recorded.
type FollowupAttempt struct {
	Event domain.PaymentFollowupAttempted
	// Appended is what recording wrote; zero when another instance had
	// recorded this attempt, or recording failed (Err).
	Appended eventstore.Appended
	Err      error
}

// Once claims the due follow-ups, carries them out, records every attempt
// and returns them.
func (w *PaymentFollowups) Once(ctx context.Context) ([]FollowupAttempt, error) {
	as, err := w.reactor.Once(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]FollowupAttempt, len(as))
	for i, a := range as {
		out[i] = FollowupAttempt{Event: a.Outcome.event, Appended: a.Appended, Err: a.Err}
	}
	return out, nil
}

// followupReaction is the Reaction: a pending row of payment_followups is
// an item (its id, derived from the triggering event, is the key), the
// provider call is the effect, payment.followup_attempted in the
// follow-up's stream records each attempt. Its claims (Claim, Cleanup) are
// the one claims mechanism's.
type followupReaction struct {
	*claims.Claims[domain.PaymentFollowup]
	cfg      PaymentFollowupsConfig
	recorder cqrs.Handler[provisioning.RecordPaymentFollowup, eventstore.Appended]
}

// followupSource is where the follow-up reaction's items are: the rows of
// the payment_followups read model; a follow-up is due while it is pending
// and its time has come.
func followupSource() claims.Source[domain.PaymentFollowup] {
	return claims.Source[domain.PaymentFollowup]{
		Reaction: provisioning.FollowupReaction,
		Items:    `SELECT followup_id AS key, attempts FROM payment_followups`,
		// A follow-up of a subscription waits while one triggered before it
		// on the same subscription is pending: each sets the subscription
		// as the log stood at its trigger, so they land in the log's order
		// (a quantity set for three phones never overwrites the one set
		// for two).
		Due: `SELECT f.followup_id AS key, f.attempts, f.next_attempt_at AS due_at,
			f.followup_id, f.org_id, f.fulfilment_id, f.action, f.note, f.subscription_id, f.payment_intent_id,
			f.amount, f.currency, f.quantity, f.proration, f.refund_share, f.created_at
			FROM payment_followups f WHERE f.status = 'pending'
				AND NOT EXISTS (SELECT 1 FROM payment_followups b WHERE f.subscription_id <> ''
					AND b.subscription_id = f.subscription_id AND b.status = 'pending'
					AND b.trigger_position < f.trigger_position)`,
		Scan: func(f *domain.PaymentFollowup) []any {
			return []any{&f.FollowupID, &f.OrgID, &f.FulfilmentID, &f.Action, &f.Note, &f.SubscriptionID,
				&f.PaymentIntentID, &f.Amount, &f.Currency, &f.Quantity, &f.Proration, &f.RefundShare, &f.TriggeredAt}
		},
	}
}

// Act implements Reaction: one provider call (none for FollowupNone),
// bounded by domain.FollowupAttemptTimeout, with the follow-up's
// idempotency key.
func (r *followupReaction) Act(ctx context.Context, c Claimed[domain.PaymentFollowup]) followupOutcome {
	f := c.Item
	var res domain.FollowupResult
	if f.Action != domain.FollowupNone {
		cctx, cancel := context.WithTimeout(ctx, domain.FollowupAttemptTimeout)
		key := domain.PaymentFollowupKey(f.FollowupID)
		var err error
		switch f.Action {
		case domain.FollowupCancelSubscription:
			err = r.cfg.Provider.CancelSubscription(cctx, f.SubscriptionID, false, key)
		case domain.FollowupCancelAtPeriodEnd:
			err = r.cfg.Provider.CancelSubscription(cctx, f.SubscriptionID, true, key)
		case domain.FollowupRefund:
			res.RefundID, err = r.cfg.Provider.Refund(cctx, f.PaymentIntentID, f.Amount, key)
		case domain.FollowupSetQuantity:
			res.ProviderQuantity, err = r.cfg.Provider.SetSubscriptionQuantity(cctx, f.SubscriptionID, f.Quantity, f.Proration, key)
		default:
			err = &payments.RefusedError{Message: "unknown follow-up action " + f.Action}
		}
		// The share of the paid invoice is refunded once the subscription
		// stopped billing the phone; a retry repeats both calls, each with
		// its own key, so each is performed once.
		if err == nil && f.RefundShare && f.Amount > 0 {
			res.RefundID, res.RefundedAmount, err = r.cfg.Provider.RefundSubscriptionShare(cctx, f.SubscriptionID, f.Amount,
				f.TriggeredAt, domain.PaymentFollowupRefundKey(f.FollowupID))
		}
		cancel()
		if err != nil {
			res.Error = err.Error()
			res.Unavailable = errors.Is(err, payments.ErrUnavailable)
			res.Refused = !res.Unavailable
		}
	}
	return followupOutcome{orgID: f.OrgID, event: domain.DecidePaymentFollowup(f, c.Attempt, r.cfg.Now(), res)}
}

// Record implements Reaction.
// A follow-up that ends refused or given up is logged at ERROR once, by
// the instance that recorded it: money may be owed to a customer, or a
// subscription may go on billing, until the operator retries or settles
// it (phonefleet payments followups). The admins hear of it through the
// notifications capability (payment_followup_failed) and /healthz warns.
func (r *followupReaction) Record(ctx context.Context, _ Claimed[domain.PaymentFollowup], o followupOutcome) (eventstore.Appended, error) {
	a, err := r.recorder.Handle(ctx, provisioning.RecordPaymentFollowup{OrgID: o.orgID, Event: o.event})
	if err == nil && r.cfg.Logger != nil && (o.event.Outcome == domain.FollowupGaveUp || o.event.Outcome == domain.FollowupRefused) {
		e := o.event
		r.cfg.Logger.LogAttrs(ctx, slog.LevelError, "payment follow-up needs the operator",
			slog.String("followup_id", e.FollowupID), slog.String("outcome", e.Outcome), slog.String("org_id", o.orgID),
			slog.String("fulfilment_id", e.FulfilmentID), slog.String("action", e.Action),
			slog.String("subscription_id", e.SubscriptionID), slog.String("payment_intent_id", e.PaymentIntentID),
			slog.Int64("amount", e.Amount), slog.String("currency", e.Currency), slog.Int("attempt", e.Attempt),
			slog.String("error", e.Error), slog.String("see", "phonefleet payments followups"))
	}
	return a, err
}
