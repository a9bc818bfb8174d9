package workers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/webhooksig"
)

// WebhookDispatcherConfig configures a WebhookDispatcher. Zero values take
// the documented defaults.
type WebhookDispatcherConfig struct {
	// Pool is the service's database (read models and the claim table).
	Pool *pgxpool.Pool
	// Record is the application's RecordWebhookAttempt: it records each
	// attempt.
	Record cqrs.Handler[webhooks.RecordWebhookAttempt, webhooks.RecordedWebhookAttempt]
	// Box opens the sealed signing secrets.
	Box *domain.SecretBox
	// Client sends deliveries; nil means NewWebhookClient with the zero
	// options (the strict address policy, system CAs).
	Client *http.Client
	// Now is the clock due times, leases and signatures use; nil means time.Now.
	Now func() time.Time
	// ID names this dispatcher in claims and event metadata; empty means a random one.
	ID string
	// Concurrency is how many deliveries are in flight at once; zero means 32.
	Concurrency int
	// Lease is how long a claim is held before another dispatcher may take
	// it over (it must outlast an attempt's timeout); zero means one minute.
	Lease time.Duration
	// Poll is how often Run looks for due deliveries when nothing wakes it;
	// zero means 50 ms.
	Poll time.Duration
	// Logger receives failures to claim or record; nil discards them.
	Logger *slog.Logger
	// OnAttempt, when not nil, is called after each attempt is recorded (or
	// recording failed), from the goroutine that made it: a hook for
	// metrics and benchmarks.
	OnAttempt func(WebhookAttempt)
}

// WebhookDispatcher sends due webhook deliveries and records each attempt
// as an event: the webhook reaction (it reads the webhooks read model,
// projections.Webhooks, and claims work in webhook_delivery_claims) run by
// a Reactor, so any number of dispatchers on one database never send one
// attempt twice while they live. A dispatcher that dies between sending
// and recording leaves an unrecorded claim; once its lease ends another
// dispatcher sends that attempt again with the same delivery id (delivery
// is at least once). A recorded attempt is never re-sent, even while the
// read model still lags behind it.
type WebhookDispatcher struct {
	cfg      WebhookDispatcherConfig
	reaction *webhookReaction
	reactor  *Reactor[webhookDelivery, webhooks.RecordWebhookAttempt]
	// afterSend, when not nil, runs between sending and recording (a test seam).
	afterSend func(deliveryID string)
}

// NewWebhookDispatcher returns a dispatcher for cfg.
func NewWebhookDispatcher(cfg WebhookDispatcherConfig) *WebhookDispatcher {
	if cfg.Client == nil {
		cfg.Client = NewWebhookClient(WebhookClientOptions{})
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &WebhookDispatcher{cfg: cfg}
	d.reaction = &webhookReaction{d: d, recorder: cfg.Record}
	rc := ReactorConfig[webhookDelivery, webhooks.RecordWebhookAttempt]{Name: "webhook-dispatcher", ID: cfg.ID, Now: cfg.Now,
		Concurrency: cfg.Concurrency, Lease: cfg.Lease, Poll: cfg.Poll, Logger: cfg.Logger}
	if cfg.OnAttempt != nil {
		rc.OnAttempt = func(a Attempt[webhookDelivery, webhooks.RecordWebhookAttempt]) { cfg.OnAttempt(webhookAttempt(a)) }
	}
	d.reactor = NewReactor(d.reaction, rc)
	return d
}

// ID returns the dispatcher's name.
func (d *WebhookDispatcher) ID() string { return d.reactor.ID() }

// WebhookAttempt is one attempt a dispatcher made and recorded.
type WebhookAttempt struct {
	Event domain.WebhookDeliveryAttempted
	// Appended is what recording wrote; zero when another dispatcher had
	// already recorded this attempt, or recording failed (Err).
	Appended eventstore.Appended
	Err      error
}

func webhookAttempt(a Attempt[webhookDelivery, webhooks.RecordWebhookAttempt]) WebhookAttempt {
	return WebhookAttempt{Event: a.Outcome.Event(), Appended: a.Appended, Err: a.Err}
}

// Run dispatches until ctx ends, then lets the attempts in flight finish
// and be recorded.
func (d *WebhookDispatcher) Run(ctx context.Context) { d.reactor.Run(ctx) }

// DispatchOnce claims up to Concurrency due deliveries, sends them
// concurrently, records every attempt, and returns the attempts made.
func (d *WebhookDispatcher) DispatchOnce(ctx context.Context) ([]WebhookAttempt, error) {
	attempts, err := d.reactor.Once(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]WebhookAttempt, len(attempts))
	for i, a := range attempts {
		out[i] = webhookAttempt(a)
	}
	return out, nil
}

// Cleanup drops claim rows that no longer hold anything back (see
// webhookReaction.Cleanup); Run calls it once a minute.
func (d *WebhookDispatcher) Cleanup(ctx context.Context) error {
	return d.reaction.Cleanup(ctx, d.cfg.Now())
}

// webhookReaction is the Reaction a WebhookDispatcher runs: a delivery row
// of the webhooks read model is an item (its id, derived from subscription
// and event id, is the key), sending it is the effect, and
// webhook.delivery_attempted in the delivery's stream records each attempt.
type webhookReaction struct {
	d        *WebhookDispatcher
	recorder cqrs.Handler[webhooks.RecordWebhookAttempt, webhooks.RecordedWebhookAttempt]
	cursor   claimCursor
}

// webhookDelivery is what sending one claimed delivery needs.
type webhookDelivery struct {
	webhookID, orgID, event, url string
	payload, sealed              []byte
}

// ensureClaimRows gives due deliveries without a claim row one (attempt
// 0), outside the claiming transaction, so concurrent dispatchers meet on
// existing rows that SKIP LOCKED can pass over. Rows are inserted in one
// total order, so two dispatchers inserting overlapping sets wait for each
// other at most, never deadlock.
const ensureClaimRows = `INSERT INTO webhook_delivery_claims (delivery_id)
	SELECT d.delivery_id FROM webhook_deliveries d
	WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND (d.next_attempt_at, d.delivery_id) > ($3, $4)
	  AND NOT EXISTS (SELECT 1 FROM webhook_delivery_claims c WHERE c.delivery_id = d.delivery_id)
	ORDER BY d.next_attempt_at, d.delivery_id LIMIT $2
	ON CONFLICT DO NOTHING`

// claimDue takes the lease on up to $2 due attempts after the cursor
// ($5, $6) in due order. A claim row is free
// when the read model has caught up with it (its attempt is recorded in the
// row's attempts), or when its holder never recorded it and the lease has
// ended (the holder died between send and record: the same attempt is sent
// again). A recorded attempt the read model has not applied yet is not free,
// so lag never causes a second send.
const claimDue = `WITH picked AS (
	SELECT c.delivery_id, d.attempts + 1 AS attempt, d.webhook_id, d.org_id, d.event, d.payload, s.url, s.sealed_secret, d.next_attempt_at
	FROM webhook_delivery_claims c
	JOIN webhook_deliveries d ON d.delivery_id = c.delivery_id
	JOIN webhook_subscriptions s ON s.webhook_id = d.webhook_id
	WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND (d.next_attempt_at, d.delivery_id) > ($5, $6) AND s.enabled
	  AND (c.attempt <= d.attempts OR (c.attempt = d.attempts + 1 AND NOT c.recorded AND c.leased_until <= $1))
	ORDER BY d.next_attempt_at, d.delivery_id
	LIMIT $2
	FOR UPDATE OF c SKIP LOCKED
)
UPDATE webhook_delivery_claims c
SET attempt = p.attempt, recorded = false, claimed_by = $3, claimed_at = $1, leased_until = $4
FROM picked p WHERE c.delivery_id = p.delivery_id
RETURNING p.delivery_id, p.attempt, p.webhook_id, p.org_id, p.event, p.payload, p.url, p.sealed_secret, p.next_attempt_at`

// claimCursor is where the next claim starts in due order. Rows before
// it are in flight (claimed by some dispatcher) or wait for the read model,
// and rescanning them on every claim would cost time proportional to the
// work in flight; so a claim that filled its quota moves the cursor past
// its last row, and one that did not resets it to the start, so nothing
// behind the cursor (a lapsed lease, a late-arriving delivery) waits longer
// than one more round.
type claimCursor struct {
	at time.Time
	id string
}

var cursorStart = claimCursor{at: time.Unix(0, 0).UTC()}

// Claim implements Reaction: it gives due deliveries claim rows, then
// takes the lease on up to n of them after the cursor.
func (w *webhookReaction) Claim(ctx context.Context, l Lease, n int) ([]Claimed[webhookDelivery], error) {
	pool, from := w.d.cfg.Pool, w.cursor
	if from.at.IsZero() {
		from = cursorStart
	}
	if _, err := pool.Exec(ctx, ensureClaimRows, l.Now, n, from.at, from.id); err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	var out []Claimed[webhookDelivery]
	last := from
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimDue, l.Now, n, l.Holder, l.Until, from.at, from.id)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed[webhookDelivery], error) {
			var c Claimed[webhookDelivery]
			var due time.Time
			d := &c.Item
			err := r.Scan(&c.Key, &c.Attempt, &d.webhookID, &d.orgID, &d.event, &d.payload, &d.url, &d.sealed, &due)
			if err == nil && (due.After(last.at) || due.Equal(last.at) && c.Key > last.id) {
				last = claimCursor{at: due, id: c.Key}
			}
			return c, err
		})
		return err
	})
	if err != nil {
		w.cursor = cursorStart
		return nil, fmt.Errorf("claim: %w", err)
	}
	if len(out) == n {
		w.cursor = last
	} else {
		w.cursor = cursorStart
	}
	return out, nil
}

// Act implements Reaction: it sends the delivery signed now, and returns
// the command recording what the receiver answered.
func (w *webhookReaction) Act(ctx context.Context, c Claimed[webhookDelivery]) webhooks.RecordWebhookAttempt {
	at := w.d.cfg.Now()
	status, errCode := w.send(ctx, c, at)
	if w.d.afterSend != nil {
		w.d.afterSend(c.Key)
	}
	return webhooks.RecordWebhookAttempt{OrgID: c.Item.orgID, DeliveryID: c.Key, WebhookID: c.Item.webhookID,
		Attempt: c.Attempt, At: at, ResponseStatus: status, Error: errCode, DispatcherID: w.d.ID()}
}

// Record implements Reaction: the command appends the attempt at the
// delivery stream's version attempt−1 and marks the claim recorded.
func (w *webhookReaction) Record(ctx context.Context, _ Claimed[webhookDelivery], cmd webhooks.RecordWebhookAttempt) (eventstore.Appended, error) {
	r, err := w.recorder.Handle(ctx, cmd)
	return r.Appended, err
}

// maxAnswerBytes is how much of a receiver's answer is read (and discarded)
// so the connection can be reused.
const maxAnswerBytes = 64 << 10

// send POSTs the delivery signed at at and returns the status answered, or
// 0 and why there was none.
func (w *webhookReaction) send(ctx context.Context, c Claimed[webhookDelivery], at time.Time) (int, string) {
	d := c.Item
	secret, err := w.d.cfg.Box.Open(d.webhookID, d.sealed)
	if err != nil {
		return 0, domain.WebhookErrorSecret
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.payload))
	if err != nil {
		return 0, domain.WebhookErrorConnection
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "phonefleet-webhooks/1")
	h.Set(webhooksig.EventHeader, d.event)
	h.Set(webhooksig.DeliveryHeader, c.Key)
	h.Set(webhooksig.SignatureHeader, webhooksig.Sign(secret, at, d.payload))
	resp, err := w.d.cfg.Client.Do(req)
	if err != nil {
		return 0, classifyWebhookError(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	_ = resp.Body.Close()
	return resp.StatusCode, ""
}

// Cleanup implements ClaimCleaner: it drops claim rows that no longer hold
// anything back: recorded attempts the read model has applied, and claims
// of deliveries that left the read side (their subscription was deleted)
// once their lease is over.
func (w *webhookReaction) Cleanup(ctx context.Context, now time.Time) error {
	_, err := w.d.cfg.Pool.Exec(ctx, `DELETE FROM webhook_delivery_claims c
		WHERE (c.recorded AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.delivery_id = c.delivery_id AND d.attempts >= c.attempt))
		   OR (c.leased_until <= $1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.delivery_id = c.delivery_id))`, now)
	return err
}
