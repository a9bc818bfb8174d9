package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
)

// PaymentFollowupsConfig configures PaymentFollowups. Zero values take the
// documented defaults.
type PaymentFollowupsConfig struct {
	// Pool is the service's database (the payment_followups read model and
	// the claim table).
	Pool *pgxpool.Pool
	// Record is the application's RecordPaymentFollowup: it records each
	// attempt.
	Record cqrs.Handler[provisioning.RecordPaymentFollowup, eventstore.Appended]
	// Provider is the payment provider told.
	Provider payments.Provider
	// Now is the clock of due times and leases; nil means time.Now.
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
// projections.PaymentFollowups and payment_followup_claims, run by a
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
		cfg.Now = time.Now
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
	w.reactor = NewReactor[domain.PaymentFollowup, followupOutcome](&followupReaction{cfg: cfg,
		recorder: cfg.Record}, ReactorConfig[domain.PaymentFollowup, followupOutcome]{
		Name: "payment-followups", ID: cfg.ID, Now: cfg.Now, Concurrency: cfg.Concurrency, Lease: cfg.Lease,
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
// follow-up's stream records each attempt.
type followupReaction struct {
	cfg      PaymentFollowupsConfig
	recorder cqrs.Handler[provisioning.RecordPaymentFollowup, eventstore.Appended]
}

// ensureFollowupClaims gives due follow-ups without a claim row one, outside
// the claiming transaction, in one total order (no deadlock between
// instances).
const ensureFollowupClaims = `INSERT INTO payment_followup_claims (followup_id)
	SELECT f.followup_id FROM payment_followups f
	WHERE f.status = 'pending' AND f.next_attempt_at <= $1
	  AND NOT EXISTS (SELECT 1 FROM payment_followup_claims c WHERE c.followup_id = f.followup_id)
	ORDER BY f.next_attempt_at, f.followup_id LIMIT $2
	ON CONFLICT DO NOTHING`

// claimFollowups takes the lease on up to $2 due attempts. A claim row is
// free when the read model has applied its recorded attempt, or when its
// holder never recorded it and the lease has ended (the same attempt is
// made again, under the same idempotency key).
const claimFollowups = `WITH picked AS (
	SELECT c.followup_id, f.attempts + 1 AS attempt, f.org_id, f.fulfilment_id, f.action, f.note,
		f.subscription_id, f.payment_intent_id, f.amount, f.currency
	FROM payment_followup_claims c
	JOIN payment_followups f ON f.followup_id = c.followup_id
	WHERE f.status = 'pending' AND f.next_attempt_at <= $1
	  AND (c.attempt <= f.attempts OR (c.attempt = f.attempts + 1 AND NOT c.recorded AND c.leased_until <= $1))
	ORDER BY f.next_attempt_at, f.followup_id
	LIMIT $2
	FOR UPDATE OF c SKIP LOCKED
)
UPDATE payment_followup_claims c
SET attempt = p.attempt, recorded = false, claimed_by = $3, claimed_at = $1, leased_until = $4
FROM picked p WHERE c.followup_id = p.followup_id
RETURNING p.followup_id, p.attempt, p.org_id, p.fulfilment_id, p.action, p.note, p.subscription_id,
	p.payment_intent_id, p.amount, p.currency`

// Claim implements Reaction.
func (r *followupReaction) Claim(ctx context.Context, l Lease, n int) ([]Claimed[domain.PaymentFollowup], error) {
	pool := r.cfg.Pool
	if _, err := pool.Exec(ctx, ensureFollowupClaims, l.Now, n); err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	var out []Claimed[domain.PaymentFollowup]
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimFollowups, l.Now, n, l.Holder, l.Until)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claimed[domain.PaymentFollowup], error) {
			var c Claimed[domain.PaymentFollowup]
			f := &c.Item
			err := row.Scan(&c.Key, &c.Attempt, &f.OrgID, &f.FulfilmentID, &f.Action, &f.Note, &f.SubscriptionID,
				&f.PaymentIntentID, &f.Amount, &f.Currency)
			f.FollowupID = c.Key
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
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
		default:
			err = &payments.RefusedError{Message: "unknown follow-up action " + f.Action}
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
func (r *followupReaction) Record(ctx context.Context, _ Claimed[domain.PaymentFollowup], o followupOutcome) (eventstore.Appended, error) {
	return r.recorder.Handle(ctx, provisioning.RecordPaymentFollowup{OrgID: o.orgID, Event: o.event})
}

// Cleanup implements ClaimCleaner: it drops claims of follow-ups that are
// settled (no longer pending) once their attempt is applied.
func (r *followupReaction) Cleanup(ctx context.Context, now time.Time) error {
	_, err := r.cfg.Pool.Exec(ctx, `DELETE FROM payment_followup_claims c
		WHERE (c.recorded AND EXISTS (SELECT 1 FROM payment_followups f
			WHERE f.followup_id = c.followup_id AND f.attempts >= c.attempt AND f.status <> 'pending'))
		   OR (c.leased_until <= $1 AND NOT EXISTS (SELECT 1 FROM payment_followups f WHERE f.followup_id = c.followup_id))`, now)
	return err
}
