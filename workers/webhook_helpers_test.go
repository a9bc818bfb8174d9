package workers_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	stripewebhook "github.com/stripe/stripe-go/v79/webhook"

	"phonefleet/commands"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

var quiet = slog.New(slog.DiscardHandler)

// newClock is a clock tests move by hand, stopped at about now.
func newClock() *testutil.Clock { return testutil.NewClock(time.Now().UTC().Truncate(time.Second)) }

// fakeResolver resolves names from a table it can change; a name not in it
// does not exist.
type fakeResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
}

func (f *fakeResolver) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrs == nil {
		f.addrs = map[string][]netip.Addr{}
	}
	f.addrs[host] = nil
	for _, a := range addrs {
		f.addrs[host] = append(f.addrs[host], netip.MustParseAddr(a))
	}
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.addrs[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// env is a database with the webhooks projection running and the webhook
// commands over it.
type env struct {
	pool   *pgxpool.Pool
	url    string
	store  *eventstore.Store
	runner *projections.Runner
	box    *domain.SecretBox
	key    []byte
	clock  *testutil.Clock
	base   webhooks.Webhooks
	q      projections.WebhookQueries
	auth   domain.Auth
}

// smallPool opens a pool of at most n connections: three engineers share
// the test server's connections.
func smallPool(t *testing.T, url string, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	cfg.MaxConnIdleTime = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(testutil.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := testutil.DatabaseURL(t)
	pool := smallPool(t, url, 8)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Webhooks{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	key[3] = 42
	box, err := domain.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	e := &env{pool: pool, url: url, store: store, runner: runner, box: box, key: key, clock: c,
		q:    projections.WebhookQueries{DB: pool},
		auth: domain.LocalOperator(domain.NewID(domain.PrefixOrganisation))}
	e.base = webhooks.Webhooks{Store: store, Box: box, Now: c.Now, ReadModels: testutil.ReadModels{RM: e.runner}}
	return e
}

func (e *env) wait(ctx context.Context, a eventstore.Appended) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return e.runner.WaitFor(ctx, projections.WebhooksName, a)
}

// subscribe creates a webhook to url (loopback receivers allowed) and
// returns its id and secret.
func (e *env) subscribe(t *testing.T, url string) (string, string) {
	t.Helper()
	created, err := webhooks.CreateWebhookHandler{Webhooks: e.base, Addresses: domain.AddressPolicy{AllowLoopback: true}}.
		Handle(testutil.Context(t), webhooks.CreateWebhook{Auth: e.auth, URL: url, Events: []string{domain.WebhookRunEnded}})
	if err != nil {
		t.Fatal(err)
	}
	return created.WebhookID, created.Secret
}

// test queues a test delivery and returns its id.
func (e *env) test(t *testing.T, webhookID string) string {
	t.Helper()
	id, err := webhooks.TestWebhookHandler{Webhooks: e.base}.Handle(testutil.Context(t), webhooks.TestWebhook{Auth: e.auth, WebhookID: webhookID})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) delivery(t *testing.T, id string) projections.DeliveryView {
	t.Helper()
	d, err := e.q.Delivery(testutil.Context(t), e.auth, id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// app is the application object over e's webhook capability.
func (e *env) app() commands.Application {
	return commands.NewApplication(commands.Capabilities{Webhooks: &webhooks.Capability{Webhooks: e.base, Queries: e.q}})
}

// dispatcher returns a dispatcher on e's clock that trusts rcv's
// certificate and allows loopback receivers.
func (e *env) dispatcher(t *testing.T, rcv *receiver, opts ...func(*workers.WebhookDispatcherConfig, *workers.WebhookClientOptions)) *workers.WebhookDispatcher {
	t.Helper()
	co := workers.WebhookClientOptions{Addresses: domain.AddressPolicy{AllowLoopback: true}}
	if rcv != nil {
		co.RootCAs = rcv.roots()
	}
	cfg := workers.WebhookDispatcherConfig{Pool: e.pool, Record: e.app().Webhooks.RecordWebhookAttempt, Box: e.box, Now: e.clock.Now, Concurrency: 4, Logger: quiet}
	for _, o := range opts {
		o(&cfg, &co)
	}
	cfg.Client = workers.NewWebhookClient(co)
	return workers.NewWebhookDispatcher(cfg)
}

// dispatch runs one round and waits until the read model shows its attempts.
func (e *env) dispatch(t *testing.T, d *workers.WebhookDispatcher) []workers.WebhookAttempt {
	t.Helper()
	attempts, err := d.DispatchOnce(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		if a.Err != nil {
			t.Fatalf("recording attempt %d of %s: %v", a.Event.Attempt, a.Event.DeliveryID, a.Err)
		}
		if a.Appended.LastPosition != 0 {
			if err := e.wait(testutil.Context(t), a.Appended); err != nil {
				t.Fatal(err)
			}
		}
	}
	return attempts
}

// request is one delivery a receiver got.
type request struct {
	header http.Header
	body   []byte
	path   string
}

// receiver is a real HTTPS endpoint (httptest TLS server) that records what
// it receives and answers with answer.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []request
	answer func(w http.ResponseWriter, r *http.Request)
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, request{header: r.Header.Clone(), body: body, path: r.URL.Path})
		rc.mu.Unlock()
		if rc.answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		rc.answer(w, r)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// roots trusts the receiver's self-signed certificate (the injected CA).
func (rc *receiver) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(rc.srv.Certificate())
	return pool
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.got...)
}

func (rc *receiver) port() string {
	_, port, _ := net.SplitHostPort(rc.srv.Listener.Addr().String())
	return port
}

func decodeBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, b)
	}
	return m
}

// waitUntil polls cond until it holds or 30 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stripeCheck verifies a signature with stripe-go's verifier, ignoring the
// timestamp (the injected clock may be ahead of the wall clock).
func stripeCheck(body []byte, header, secret string) error {
	return stripewebhook.ValidatePayloadIgnoringTolerance(body, header, secret)
}
