package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/webhooksig"
)

// WebhookDispatcherConfig configures a WebhookDispatcher. Zero values take
// the documented defaults.
type WebhookDispatcherConfig struct {
	// Pool is the service's database (read models and the claim table).
	Pool *pgxpool.Pool
	// Store records attempts.
	Store *eventstore.Store
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
// as an event. It reads the webhooks read model (projections.Webhooks) and
// claims work in webhook_delivery_claims with FOR UPDATE SKIP LOCKED and a
// lease, so any number of dispatchers on one database never send one
// attempt twice while they live. A dispatcher that dies between sending
// and recording leaves an unrecorded claim; once its lease ends another
// dispatcher sends that attempt again with the same delivery id (delivery
// is at least once). A recorded attempt is never re-sent, even while the
// read model still lags behind it.
type WebhookDispatcher struct {
	cfg      WebhookDispatcherConfig
	recorder *attemptRecorder
	claimMu  sync.Mutex
	cursor   claimCursor
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
	if cfg.ID == "" {
		cfg.ID = uuid.NewString()[:8]
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &WebhookDispatcher{cfg: cfg, recorder: &attemptRecorder{h: commands.RecordWebhookAttemptHandler{Store: cfg.Store}}}
}

// ID returns the dispatcher's name.
func (d *WebhookDispatcher) ID() string { return d.cfg.ID }

// WebhookAttempt is one attempt a dispatcher made and recorded.
type WebhookAttempt struct {
	Event domain.WebhookDeliveryAttempted
	// Appended is what recording wrote; zero when another dispatcher had
	// already recorded this attempt, or recording failed (Err).
	Appended eventstore.Appended
	Err      error
}

// claimed is one delivery attempt this dispatcher holds a lease on.
type claimed struct {
	deliveryID, webhookID, orgID, event, url string
	payload, sealed                          []byte
	attempt                                  int
}

// Run dispatches until ctx ends, then lets the attempts in flight finish
// and be recorded.
func (d *WebhookDispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, d.cfg.Concurrency)
	freed := make(chan struct{}, 1)
	lowWater := max(1, d.cfg.Concurrency/4)
	backoff := d.cfg.Poll
	nextCleanup := time.Now()
	for ctx.Err() == nil {
		free := d.cfg.Concurrency - len(slots)
		full := false
		if free >= lowWater || (free > 0 && len(slots) == 0) {
			items, err := d.claim(ctx, free)
			if err != nil {
				if ctx.Err() == nil {
					d.cfg.Logger.Warn("webhook dispatcher: claim failed", "dispatcher", d.cfg.ID, "err", err)
				}
				backoff = min(backoff*2, 5*time.Second)
			} else {
				backoff = d.cfg.Poll
			}
			for _, c := range items {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					d.deliver(ctx, c)
					<-slots
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
			}
			full = len(items) == free
		}
		if time.Now().After(nextCleanup) {
			if err := d.Cleanup(ctx); err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("webhook dispatcher: cleanup failed", "err", err)
			}
			nextCleanup = time.Now().Add(time.Minute)
		}
		if full {
			continue // more may be due at once
		}
		select {
		case <-ctx.Done():
		case <-freed:
		case <-time.After(backoff):
		}
	}
}

// DispatchOnce claims up to Concurrency due deliveries, sends them
// concurrently, records every attempt, and returns the attempts made.
func (d *WebhookDispatcher) DispatchOnce(ctx context.Context) ([]WebhookAttempt, error) {
	items, err := d.claim(ctx, d.cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	out := make([]WebhookAttempt, len(items))
	var wg sync.WaitGroup
	for i, c := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = d.deliver(ctx, c)
		}()
	}
	wg.Wait()
	return out, nil
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

func (d *WebhookDispatcher) claim(ctx context.Context, n int) ([]claimed, error) {
	if n <= 0 {
		return nil, nil
	}
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	now, from := d.cfg.Now(), d.cursor
	if from.at.IsZero() {
		from = cursorStart
	}
	if _, err := d.cfg.Pool.Exec(ctx, ensureClaimRows, now, n, from.at, from.id); err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	var out []claimed
	last := from
	err := pgx.BeginFunc(ctx, d.cfg.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimDue, now, n, d.cfg.ID, now.Add(d.cfg.Lease), from.at, from.id)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			var due time.Time
			err := r.Scan(&c.deliveryID, &c.attempt, &c.webhookID, &c.orgID, &c.event, &c.payload, &c.url, &c.sealed, &due)
			if err == nil && (due.After(last.at) || due.Equal(last.at) && c.deliveryID > last.id) {
				last = claimCursor{at: due, id: c.deliveryID}
			}
			return c, err
		})
		return err
	})
	if err != nil {
		d.cursor = cursorStart
		return nil, fmt.Errorf("claim: %w", err)
	}
	if len(out) == n {
		d.cursor = last
	} else {
		d.cursor = cursorStart
	}
	return out, nil
}

// deliver sends one claimed attempt and records it. It runs to the end
// even when ctx ends: an attempt, once sent, is recorded.
func (d *WebhookDispatcher) deliver(ctx context.Context, c claimed) WebhookAttempt {
	ctx = context.WithoutCancel(ctx)
	at := d.cfg.Now()
	status, errCode := d.send(ctx, c, at)
	if d.afterSend != nil {
		d.afterSend(c.deliveryID)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := d.recorder.record(rctx, commands.RecordWebhookAttempt{OrgID: c.orgID, DeliveryID: c.deliveryID, WebhookID: c.webhookID,
		Attempt: c.attempt, At: at, ResponseStatus: status, Error: errCode, DispatcherID: d.cfg.ID})
	a, ev, err := r.Appended, r.Event, r.Err
	if errors.Is(err, commands.ErrAttemptRecorded) {
		err = nil
	}
	if err != nil {
		d.cfg.Logger.Warn("webhook dispatcher: recording an attempt failed; its lease will lapse and it will be sent again",
			"delivery", c.deliveryID, "attempt", c.attempt, "err", err)
	} else {
		d.cfg.Logger.Debug("webhook attempt", "delivery", c.deliveryID, "attempt", c.attempt, "answer", statusText(status, errCode))
	}
	out := WebhookAttempt{Event: ev, Appended: a, Err: err}
	if d.cfg.OnAttempt != nil {
		d.cfg.OnAttempt(out)
	}
	return out
}

// maxAnswerBytes is how much of a receiver's answer is read (and discarded)
// so the connection can be reused.
const maxAnswerBytes = 64 << 10

// send POSTs the delivery signed at at and returns the status answered, or
// 0 and why there was none.
func (d *WebhookDispatcher) send(ctx context.Context, c claimed, at time.Time) (int, string) {
	secret, err := d.cfg.Box.Open(c.webhookID, c.sealed)
	if err != nil {
		return 0, domain.WebhookErrorSecret
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.payload))
	if err != nil {
		return 0, domain.WebhookErrorConnection
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "phonefleet-webhooks/1")
	h.Set(webhooksig.EventHeader, c.event)
	h.Set(webhooksig.DeliveryHeader, c.deliveryID)
	h.Set(webhooksig.SignatureHeader, webhooksig.Sign(secret, at, c.payload))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, classifyWebhookError(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	_ = resp.Body.Close()
	return resp.StatusCode, ""
}

// Cleanup drops claim rows that no longer hold anything back: recorded
// attempts the read model has applied, and claims of deliveries that left
// the read side (their subscription was deleted) once their lease is over.
func (d *WebhookDispatcher) Cleanup(ctx context.Context) error {
	_, err := d.cfg.Pool.Exec(ctx, `DELETE FROM webhook_delivery_claims c
		WHERE (c.recorded AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.delivery_id = c.delivery_id AND d.attempts >= c.attempt))
		   OR (c.leased_until <= $1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.delivery_id = c.delivery_id))`, d.cfg.Now())
	return err
}

// maxRecordBatch bounds how many attempts one recording transaction holds.
const maxRecordBatch = 128

// maxRecorders bounds the recording transactions under way at once.
const maxRecorders = 4

// attemptRecorder records attempts with group commit: a sender that finds
// fewer than maxRecorders transactions under way writes every attempt
// queued meanwhile in one (commands.RecordWebhookAttemptHandler.HandleAll)
// and hands each its outcome; the others wait for theirs. At full load one
// commit then serves many attempts instead of one.
type attemptRecorder struct {
	h     commands.RecordWebhookAttemptHandler
	mu    sync.Mutex
	queue []recordRequest
	busy  int
}

type recordRequest struct {
	cmd   commands.RecordWebhookAttempt
	reply chan commands.RecordedWebhookAttempt
}

func (r *attemptRecorder) record(ctx context.Context, cmd commands.RecordWebhookAttempt) commands.RecordedWebhookAttempt {
	req := recordRequest{cmd: cmd, reply: make(chan commands.RecordedWebhookAttempt, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, req)
	if r.busy >= maxRecorders {
		r.mu.Unlock()
		return <-req.reply
	}
	r.busy++
	for len(r.queue) > 0 {
		n := min(len(r.queue), maxRecordBatch)
		batch := r.queue[:n:n]
		r.queue = r.queue[n:]
		r.mu.Unlock()
		cmds := make([]commands.RecordWebhookAttempt, len(batch))
		for i, b := range batch {
			cmds[i] = b.cmd
		}
		for i, res := range r.h.HandleAll(ctx, cmds) {
			batch[i].reply <- res
		}
		r.mu.Lock()
	}
	r.busy--
	r.mu.Unlock()
	return <-req.reply
}
