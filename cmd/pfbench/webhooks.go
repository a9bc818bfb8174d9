package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/webhooksig"
	"phonefleet/workers"
)

func init() {
	addSection("webhooks", 60, func(ctx context.Context, b *bench, _ options) error { return b.webhooks(ctx) })
}

// Webhook benchmark settings.
const (
	whDeliveries  = 5000 // throughput run
	whConcurrency = 64   // deliveries in flight, dispatcher and baseline alike
	whRate        = 200  // events per second in the latency run
	whLatencyFor  = 5 * time.Second
)

// webhooks measures deliveries per second from the outbox to a local HTTPS
// receiver (beside raw signed POSTs to the same receiver with the same
// client and concurrency), and the time from a domain event's commit to
// its first attempt arriving at the receiver (p50/p99) under a steady load.
func (b *bench) webhooks(ctx context.Context) error {
	header("Webhooks: deliveries to a local HTTPS receiver; event → first attempt")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Webhooks{}})
	if err != nil {
		return err
	}
	if err := runner.Ensure(ctx); err != nil {
		return err
	}
	rctx, stopRunner := context.WithCancel(ctx)
	defer stopRunner()
	go runner.Run(rctx)
	go store.Relay(rctx, quiet)

	// The receiver notes when each delivery id first arrives.
	var mu sync.Mutex
	firstSeen := map[string]time.Time{}
	var received atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		if id := r.Header.Get(webhooksig.DeliveryHeader); id != "" {
			mu.Lock()
			if _, ok := firstSeen[id]; !ok {
				firstSeen[id] = now
			}
			mu.Unlock()
		}
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	clientOpts := workers.WebhookClientOptions{Addresses: domain.AddressPolicy{AllowLoopback: true}, RootCAs: roots, MaxConnsPerHost: whConcurrency}

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := domain.NewSecretBox(key)
	if err != nil {
		return err
	}
	auth := domain.LocalOperator(domain.NewID(domain.PrefixOrganisation))
	app := commands.NewApplication(commands.Capabilities{Webhooks: &webhooks.Capability{
		Webhooks: webhooks.Webhooks{Store: store, Box: box, ReadModels: runner},
		Create:   webhooks.CreateWebhookHandler{Addresses: domain.AddressPolicy{AllowLoopback: true}}}})
	created, err := app.Webhooks.CreateWebhook.Handle(ctx, webhooks.CreateWebhook{Auth: auth, URL: srv.URL + "/in", Events: []string{domain.WebhookRunEnded}})
	if err != nil {
		return err
	}

	// Baseline: the same number of signed POSTs of a delivery-sized body,
	// straight from the same client at the same concurrency.
	body, _ := domain.EncodeWebhookBody(domain.DeliveryID(created.WebhookID, uuid.New()), domain.WebhookRunEnded, time.Now(),
		map[string]any{"agentRunId": "arun_x", "runId": "run_x", "deviceId": nil, "state": "succeeded", "goal": "bench", "stepSeq": 0, "reason": nil, "detail": nil, "test": true})
	client := workers.NewWebhookClient(clientOpts)
	start := time.Now()
	if err := rawPosts(ctx, client, srv.URL+"/in", created.Secret, body, whDeliveries, whConcurrency); err != nil {
		return err
	}
	baseTime := time.Since(start)

	// Throughput: queue whDeliveries test deliveries (the outbox builds the
	// rows first), then time the dispatcher sending and recording them all.
	evs := make([]eventstore.NewEvent, 0, 100)
	var last eventstore.Appended
	for i := 0; i < whDeliveries; i += 100 {
		evs = evs[:0]
		for j := 0; j < 100; j++ {
			evs = append(evs, testEvent(auth.OrgID, created.WebhookID))
		}
		if last, err = store.Append(ctx, "bench-webhook-tests", eventstore.AnyVersion, evs...); err != nil {
			return err
		}
	}
	if err := runner.WaitFor(ctx, projections.WebhooksName, last); err != nil {
		return err
	}
	received.Store(0)
	var recorded atomic.Int64
	d := workers.NewWebhookDispatcher(workers.WebhookDispatcherConfig{Pool: pool, Record: app.Webhooks.RecordWebhookAttempt, Box: box,
		Client: workers.NewWebhookClient(clientOpts), Concurrency: whConcurrency, Logger: quiet,
		OnAttempt: func(a workers.WebhookAttempt) {
			if a.Err == nil {
				recorded.Add(1)
			}
		}})
	dctx, stopDispatcher := context.WithCancel(ctx)
	dispatched := make(chan struct{})
	start = time.Now()
	go func() { d.Run(dctx); close(dispatched) }()
	for recorded.Load() < whDeliveries {
		time.Sleep(time.Millisecond)
	}
	sendTime := time.Since(start)
	r := float64(whDeliveries) / sendTime.Seconds()
	line("throughput: %d deliveries sent and recorded in %s = %s (%d requests received)   baseline raw signed POSTs: %d in %s = %s   ratio %.2f×   target ≥1,000/s: %s",
		whDeliveries, sendTime.Round(time.Millisecond), rate(whDeliveries, sendTime), received.Load(), whDeliveries, baseTime.Round(time.Millisecond),
		rate(whDeliveries, baseTime), baseTime.Seconds()/sendTime.Seconds(), verdict(r >= 1000))

	// Latency: a steady whRate events/s while the dispatcher runs; each
	// event's commit time against the receiver's first sight of its delivery.
	committed := map[string]time.Time{}
	tick := time.NewTicker(time.Second / whRate)
	deadline := time.Now().Add(whLatencyFor)
	for time.Now().Before(deadline) {
		<-tick.C
		e := testEvent(auth.OrgID, created.WebhookID)
		if _, err := store.Append(ctx, "bench-webhook-tests", eventstore.AnyVersion, e); err != nil {
			tick.Stop()
			stopDispatcher()
			return err
		}
		committed[domain.DeliveryID(created.WebhookID, e.ID)] = time.Now()
	}
	tick.Stop()
	wait := time.Now().Add(10 * time.Second)
	for time.Now().Before(wait) {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := firstSeen[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n == len(committed) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopDispatcher()
	<-dispatched
	mu.Lock()
	var lat []time.Duration
	missing := 0
	for id, at := range committed {
		if seen, ok := firstSeen[id]; ok {
			lat = append(lat, max(0, seen.Sub(at)))
		} else {
			missing++
		}
	}
	mu.Unlock()
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	line("event → first attempt at %d events/s for %s: %d deliveries, p50 %s, p99 %s, max %s, %d not arrived   baseline: a raw POST takes %s on average at %d in flight   target p99 ≤1s: %s",
		whRate, whLatencyFor, len(lat), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), percentile(lat, 1).Round(time.Millisecond), missing,
		(baseTime * whConcurrency / whDeliveries).Round(10*time.Microsecond), whConcurrency, verdict(p99 <= time.Second && missing == 0))
	return nil
}

// testEvent is a webhook.test_requested aimed at webhookID.
func testEvent(orgID, webhookID string) eventstore.NewEvent {
	name, v, data, _ := domain.Events.Encode(domain.WebhookTestRequested{WebhookID: webhookID, AgentRunID: "arun_bench", RunID: "run_bench"})
	return eventstore.NewEvent{ID: uuid.Must(uuid.NewV7()), Type: name, SchemaVersion: v, OrgID: orgID, Data: data,
		Metadata: eventstore.Metadata{ActorKind: "system", ActorID: "pfbench"}}
}

// rawPosts sends n signed POSTs of body to url with the given concurrency.
func rawPosts(ctx context.Context, client *http.Client, url, secret string, body []byte, n, concurrency int) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(webhooksig.SignatureHeader, webhooksig.Sign(secret, time.Now(), body))
				resp, err := client.Do(req)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("baseline POST: %w", err) })
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return firstErr
}
