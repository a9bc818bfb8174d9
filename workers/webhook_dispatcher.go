package workers

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/claims"
	"phonefleet/internal/clock"
	"phonefleet/webhooksig"
)

// WebhookDispatcherConfig configures a WebhookDispatcher. Zero values take
// the documented defaults.
type WebhookDispatcherConfig struct {
	// Pool is the service's database (read models and the claims table).
	Pool *pgxpool.Pool
	// Record is the application's RecordWebhookAttempt: it records each
	// attempt.
	Record cqrs.Handler[webhooks.RecordWebhookAttempt, webhooks.RecordedWebhookAttempt]
	// Box opens the sealed signing secrets.
	Box *domain.SecretBox
	// Client sends deliveries; nil means NewWebhookClient with the zero
	// options (the strict address policy, system CAs).
	Client *http.Client
	// Now is the clock due times, leases and signatures use; nil means clock.Now.
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
// projections.Webhooks, and claims work through internal/claims) run by
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
		cfg.Now = clock.Now
	}
	d := &WebhookDispatcher{cfg: cfg}
	d.reaction = &webhookReaction{Claims: claims.New(cfg.Pool, webhookSource()), d: d, recorder: cfg.Record}
	rc := ReactorConfig[webhookDelivery, webhooks.RecordWebhookAttempt]{Name: webhooks.DeliveryReaction, ID: cfg.ID, Now: cfg.Now,
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

// webhookReaction is the Reaction a WebhookDispatcher runs: a delivery row
// of the webhooks read model is an item (its id, derived from subscription
// and event id, is the key), sending it is the effect, and
// webhook.delivery_attempted in the delivery's stream records each attempt.
// Its claims (Claim, Cleanup) are the one claims mechanism's.
type webhookReaction struct {
	*claims.Claims[webhookDelivery]
	d        *WebhookDispatcher
	recorder cqrs.Handler[webhooks.RecordWebhookAttempt, webhooks.RecordedWebhookAttempt]
}

// webhookDelivery is what sending one claimed delivery needs.
type webhookDelivery struct {
	webhookID, orgID, event, url string
	payload, sealed              []byte
}

// webhookSource is where the webhook reaction's items are: the delivery
// rows of the webhooks read model; a delivery is due while it is pending,
// its time has come and its subscription is enabled.
func webhookSource() claims.Source[webhookDelivery] {
	return claims.Source[webhookDelivery]{
		Reaction: webhooks.DeliveryReaction,
		Items:    `SELECT delivery_id AS key, attempts FROM webhook_deliveries`,
		Due: `SELECT d.delivery_id AS key, d.attempts, d.next_attempt_at AS due_at,
			d.webhook_id, d.org_id, d.event, d.payload, s.url, s.sealed_secret
			FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.webhook_id = d.webhook_id
			WHERE d.status = 'pending' AND s.enabled`,
		Scan: func(d *webhookDelivery) []any {
			return []any{&d.webhookID, &d.orgID, &d.event, &d.payload, &d.url, &d.sealed}
		},
	}
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
