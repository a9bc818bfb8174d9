package workers_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v79/webhook"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/webhooksig"
	"phonefleet/workers"
)

// TestDeliveryReachesARealHTTPSReceiverSigned drives the whole path: a test
// request, the outbox projection, the dispatcher, a real TLS receiver
// trusted through an injected CA, and the signature checked by stripe-go's
// verifier (an independent implementation) and by webhooksig.
func TestDeliveryReachesARealHTTPSReceiverSigned(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t, nil)
	id, secret := e.subscribe(t, rcv.srv.URL+"/hooks/in")
	dlv := e.test(t, id)
	if got := e.delivery(t, dlv); got.Status != domain.DeliveryPending || got.Attempts != 0 {
		t.Fatalf("got %s with %d attempts before dispatch; want pending with 0", got.Status, got.Attempts)
	}
	attempts := e.dispatch(t, e.dispatcher(t, rcv))
	if len(attempts) != 1 {
		t.Fatalf("got %d attempts; want 1", len(attempts))
	}
	reqs := rcv.requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests; want 1", len(reqs))
	}
	r := reqs[0]
	sig := r.header.Get("Service-Signature")
	if err := stripewebhook.ValidatePayloadWithTolerance(r.body, sig, secret, 300*time.Second); err != nil {
		t.Errorf("stripe-go's verifier refused the delivery: %v (header %q)", err, sig)
	}
	if err := webhooksig.Verify(r.body, sig, secret, e.clock.Now(), 0); err != nil {
		t.Errorf("webhooksig refused the delivery: %v", err)
	}
	if err := stripewebhook.ValidatePayloadIgnoringTolerance(r.body, sig, "whsec_wrong"); err == nil {
		t.Error("stripe-go accepted the delivery under a wrong secret; want a refusal")
	}
	if !strings.HasPrefix(sig, "t="+strconv.FormatInt(e.clock.Now().Unix(), 10)+",v1=") {
		t.Errorf("got signature header %q; want t=<attempt time>,v1=<hex>", sig)
	}
	for h, want := range map[string]string{"Service-Event": "run.ended", "Service-Delivery": dlv, "Content-Type": "application/json"} {
		if got := r.header.Get(h); got != want {
			t.Errorf("got %s %q; want %q", h, got, want)
		}
	}
	if r.path != "/hooks/in" {
		t.Errorf("got path %q; want /hooks/in", r.path)
	}
	body := decodeBody(t, r.body)
	if body["deliveryId"] != dlv || body["event"] != "run.ended" || body["occurredAt"] != domain.FormatWebhookTime(e.clock.Now()) {
		t.Errorf("got body %s; want deliveryId %s, event run.ended, occurredAt the event's time", r.body, dlv)
	}
	data, _ := body["data"].(map[string]any)
	if data["test"] != true {
		t.Errorf("got data %v; want data.test true", data)
	}
	for _, f := range []string{"agentRunId", "runId", "deviceId", "state", "goal", "stepSeq", "reason", "detail"} {
		if _, ok := data[f]; !ok {
			t.Errorf("data lacks %s", f)
		}
	}
	got := e.delivery(t, dlv)
	if got.Status != domain.DeliveryDelivered || got.Attempts != 1 || got.ResponseStatus == nil || *got.ResponseStatus != 204 ||
		got.Error != nil || got.LastAttemptAt == nil || got.NextAttemptAt != nil {
		t.Errorf("got row %+v; want delivered after 1 attempt, status 204, no error, no next attempt", got)
	}
	if string(got.Payload) != string(r.body) {
		t.Errorf("got stored payload %s; want the bytes sent %s", got.Payload, r.body)
	}
	if again := e.dispatch(t, e.dispatcher(t, rcv)); len(again) != 0 {
		t.Errorf("got %d more attempts of a delivered delivery; want none", len(again))
	}
}

// TestRetryScheduleWithInjectedClock fails every attempt and moves the
// clock: attempts come exactly after 30 s, 2 min, 5 min and 18 min, each
// with the same delivery id and a fresh signature, then the delivery fails.
func TestRetryScheduleWithInjectedClock(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	id, secret := e.subscribe(t, rcv.srv.URL)
	dlv := e.test(t, id)
	d := e.dispatcher(t, rcv)
	start := e.clock.Now()
	gaps := []time.Duration{0, 30 * time.Second, 2 * time.Minute, 5 * time.Minute, 18 * time.Minute}
	var at time.Duration
	for n, gap := range gaps {
		attempt := n + 1
		if gap > 0 {
			e.clock.Advance(gap - time.Second)
			if got := e.dispatch(t, d); len(got) != 0 {
				t.Fatalf("attempt %d: got %d attempts one second early; want none", attempt, len(got))
			}
			e.clock.Advance(time.Second)
		}
		at += gap
		if got := e.dispatch(t, d); len(got) != 1 || got[0].Event.Attempt != attempt {
			t.Fatalf("attempt %d: got %+v; want exactly that attempt when due", attempt, got)
		}
		row := e.delivery(t, dlv)
		if row.Attempts != attempt || row.ResponseStatus == nil || *row.ResponseStatus != 503 || !row.LastAttemptAt.Equal(start.Add(at)) {
			t.Fatalf("attempt %d: got row %+v; want %d attempts, status 503, last attempt at +%s", attempt, row, attempt, at)
		}
		if attempt < domain.WebhookMaxAttempts {
			next := start.Add(at + domain.WebhookRetryGaps[n])
			if row.Status != domain.DeliveryPending || row.NextAttemptAt == nil || !row.NextAttemptAt.Equal(next) {
				t.Fatalf("attempt %d: got status %s next %v; want pending, next at %v", attempt, row.Status, row.NextAttemptAt, next)
			}
		} else if row.Status != domain.DeliveryFailed || row.NextAttemptAt != nil {
			t.Fatalf("attempt 5: got status %s next %v; want failed with no next attempt", row.Status, row.NextAttemptAt)
		}
	}
	e.clock.Advance(24 * time.Hour)
	if got := e.dispatch(t, d); len(got) != 0 {
		t.Fatalf("got %d attempts after the fifth; want none", len(got))
	}
	reqs := rcv.requests()
	if len(reqs) != 5 {
		t.Fatalf("receiver got %d requests; want 5", len(reqs))
	}
	at = 0
	for i, r := range reqs {
		at += gaps[i]
		if got := r.header.Get("Service-Delivery"); got != dlv {
			t.Errorf("request %d: got Service-Delivery %q; want %q on every retry", i+1, got, dlv)
		}
		if err := webhooksig.Verify(r.body, r.header.Get("Service-Signature"), secret, start.Add(at), 0); err != nil {
			t.Errorf("request %d: signature at its attempt time: %v", i+1, err)
		}
		if string(r.body) != string(reqs[0].body) {
			t.Errorf("request %d: body changed between retries", i+1)
		}
	}
}

// TestAnswersWithoutSuccess covers the answers that are recorded and
// retried: a redirect (never followed), a timeout, a refused connection, an
// unresolvable name and a name that resolves to a private address at
// connect time although it was public at subscribe time (DNS rebinding).
func TestAnswersWithoutSuccess(t *testing.T) {
	e := newEnv(t)
	elsewhereHits := 0
	var mu sync.Mutex
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/elsewhere":
			mu.Lock()
			elsewhereHits++
			mu.Unlock()
			w.WriteHeader(http.StatusOK)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	resolver := &fakeResolver{}
	resolver.set("example.com", "93.184.216.34") // public at subscribe time

	tests := []struct {
		name   string
		url    string
		before func()
		status int    // 0: no answer
		errStr string // the recorded error when no answer
	}{
		{name: "30x is the answer, not followed", url: rcv.srv.URL + "/redirect", status: http.StatusFound},
		{name: "timeout", url: rcv.srv.URL + "/slow", errStr: domain.WebhookErrorTimeout},
		{name: "refused connection", url: "https://" + closedAddr + "/in", errStr: domain.WebhookErrorConnectionRefused},
		{name: "unresolved name", url: "https://nowhere.example.com:" + rcv.port() + "/in", errStr: domain.WebhookErrorUnresolvedName},
		{name: "name rebinds to loopback at connect time", url: "https://example.com:" + rcv.port() + "/in",
			before: func() { resolver.set("example.com", "127.0.0.1") }, errStr: domain.WebhookErrorPrivateAddress},
		{name: "name rebinds to 10/8 at connect time", url: "https://example.com:" + rcv.port() + "/in",
			before: func() { resolver.set("example.com", "10.9.8.7") }, errStr: domain.WebhookErrorPrivateAddress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolver.set("example.com", "93.184.216.34")
			created, err := webhooks.CreateWebhookHandler{Webhooks: e.base, Addresses: domain.AddressPolicy{AllowLoopback: true}, Resolver: resolver}.
				Handle(testutil.Context(t), webhooks.CreateWebhook{Auth: e.auth, URL: tt.url, Events: []string{domain.WebhookRunEnded}})
			if err != nil {
				t.Fatal(err)
			}
			dlv := e.test(t, created.WebhookID)
			if tt.before != nil {
				tt.before()
			}
			before := len(rcv.requests())
			// Receivers by name are dialled under the strict (hosted) policy.
			strict := strings.Contains(tt.url, "example.com")
			d := e.dispatcher(t, rcv, func(_ *workers.WebhookDispatcherConfig, o *workers.WebhookClientOptions) {
				o.Timeout = 300 * time.Millisecond
				o.Resolver = resolver
				if strict {
					o.Addresses = domain.AddressPolicy{}
				}
			})
			if got := e.dispatch(t, d); len(got) != 1 {
				t.Fatalf("got %d attempts; want 1", len(got))
			}
			row := e.delivery(t, dlv)
			if row.Status != domain.DeliveryPending || row.Attempts != 1 || row.NextAttemptAt == nil {
				t.Errorf("got status %s, %d attempts, next %v; want pending with a retry scheduled", row.Status, row.Attempts, row.NextAttemptAt)
			}
			if tt.status != 0 {
				if row.ResponseStatus == nil || *row.ResponseStatus != tt.status || row.Error != nil {
					t.Errorf("got responseStatus %v error %v; want %d and no error", row.ResponseStatus, row.Error, tt.status)
				}
			} else if row.ResponseStatus != nil || row.Error == nil || *row.Error != tt.errStr {
				t.Errorf("got responseStatus %v error %v; want null and %q", row.ResponseStatus, row.Error, tt.errStr)
			}
			if strings.Contains(tt.name, "rebinds") && len(rcv.requests()) != before {
				t.Errorf("the receiver got a request through a refused address")
			}
		})
	}
	mu.Lock()
	hits := elsewhereHits
	mu.Unlock()
	if hits != 0 {
		t.Errorf("the redirect target got %d requests; want 0 (redirects are not followed)", hits)
	}
	t.Run("the same name at a public address is delivered", func(t *testing.T) {
		// Positive control for the rebinding rows: with loopback allowed,
		// example.com → 127.0.0.1 reaches the receiver (its certificate names
		// example.com), so the refusals above came from the address check.
		resolver.set("example.com", "127.0.0.1")
		created, err := webhooks.CreateWebhookHandler{Webhooks: e.base, Addresses: domain.AddressPolicy{AllowLoopback: true}, Resolver: resolver}.
			Handle(testutil.Context(t), webhooks.CreateWebhook{Auth: e.auth, URL: "https://example.com:" + rcv.port() + "/elsewhere", Events: []string{domain.WebhookRunEnded}})
		if err != nil {
			t.Fatal(err)
		}
		dlv := e.test(t, created.WebhookID)
		d := e.dispatcher(t, rcv, func(_ *workers.WebhookDispatcherConfig, o *workers.WebhookClientOptions) { o.Resolver = resolver })
		e.dispatch(t, d)
		if row := e.delivery(t, dlv); row.Status != domain.DeliveryDelivered {
			t.Fatalf("got %s (error %v); want delivered", row.Status, row.Error)
		}
	})
}

// TestDisablingAbandonsQueuedRetries: a delivery waiting to retry is never
// retried once its webhook is switched off, nor after it is switched on
// again; events while switched off cause no deliveries.
func TestDisablingAbandonsQueuedRetries(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	id, _ := e.subscribe(t, rcv.srv.URL)
	dlv := e.test(t, id)
	d := e.dispatcher(t, rcv)
	e.dispatch(t, d)
	if row := e.delivery(t, dlv); row.Status != domain.DeliveryPending || row.NextAttemptAt == nil {
		t.Fatalf("got %s next %v; want pending with a retry queued", row.Status, row.NextAttemptAt)
	}
	enable := webhooks.SetWebhookEnabledHandler{Webhooks: e.base}
	if err := cqrs.Err(enable.Handle(testutil.Context(t), webhooks.SetWebhookEnabled{Auth: e.auth, WebhookID: id, Enabled: false})); err != nil {
		t.Fatal(err)
	}
	row := e.delivery(t, dlv)
	if row.Status != domain.DeliveryFailed || row.NextAttemptAt != nil || !row.Abandoned {
		t.Fatalf("got %s next %v abandoned %v; want failed, no next attempt, abandoned", row.Status, row.NextAttemptAt, row.Abandoned)
	}
	if _, err := (webhooks.TestWebhookHandler{Webhooks: e.base}).Handle(testutil.Context(t), webhooks.TestWebhook{Auth: e.auth, WebhookID: id}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Fatalf("got %v testing a switched-off webhook; want invalid_argument", err)
	}
	e.clock.Advance(time.Hour)
	if got := e.dispatch(t, d); len(got) != 0 {
		t.Fatalf("got %d attempts while switched off; want none", len(got))
	}
	if err := cqrs.Err(enable.Handle(testutil.Context(t), webhooks.SetWebhookEnabled{Auth: e.auth, WebhookID: id, Enabled: true})); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if got := e.dispatch(t, d); len(got) != 0 {
		t.Fatalf("got %d attempts of an abandoned delivery after switching on; want none", len(got))
	}
	if n := len(rcv.requests()); n != 1 {
		t.Fatalf("receiver got %d requests; want only the first attempt", n)
	}
}

// TestRotationStopsTheOldSecretAtOnce: after rotate answers, deliveries are
// signed with the new secret only.
func TestRotationStopsTheOldSecretAtOnce(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t, nil)
	id, old := e.subscribe(t, rcv.srv.URL)
	secret, err := webhooks.RotateWebhookSecretHandler{Webhooks: e.base}.Handle(testutil.Context(t), webhooks.RotateWebhookSecret{Auth: e.auth, WebhookID: id})
	if err != nil {
		t.Fatal(err)
	}
	if secret == old {
		t.Fatal("rotate returned the old secret")
	}
	e.test(t, id)
	e.dispatch(t, e.dispatcher(t, rcv))
	r := rcv.requests()[0]
	sig := r.header.Get("Service-Signature")
	if err := webhooksig.Verify(r.body, sig, secret, e.clock.Now(), 0); err != nil {
		t.Errorf("the new secret does not verify: %v", err)
	}
	if err := webhooksig.Verify(r.body, sig, old, e.clock.Now(), 0); !errors.Is(err, webhooksig.ErrMismatch) {
		t.Errorf("got %v verifying with the old secret; want ErrMismatch", err)
	}
	v, err := e.q.Get(testutil.Context(t), e.auth, id)
	if err != nil || v.SecretRotatedAt == nil || v.SecretHint != domain.SecretHint(secret) {
		t.Errorf("got %+v (%v); want secretRotatedAt set and the new hint", v, err)
	}
}

// TestOutboxRebuildMintsNoIDsAndSendsNothingTwice rebuilds the webhooks
// projection from position 0 after deliveries were made: the rebuilt rows
// have the same ids, attempts and outcomes, and a dispatcher finds nothing
// to send.
func TestOutboxRebuildMintsNoIDsAndSendsNothingTwice(t *testing.T) {
	e := newEnv(t)
	failing := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	ok := newReceiver(t, nil)
	good, _ := e.subscribe(t, ok.srv.URL)
	bad, _ := e.subscribe(t, failing.srv.URL)
	for i := 0; i < 4; i++ {
		e.test(t, good)
	}
	e.test(t, bad)
	e.dispatch(t, e.dispatcher(t, ok))
	e.dispatch(t, e.dispatcher(t, failing))

	snapshot := func() map[string]string {
		rows, err := e.pool.Query(testutil.Context(t), `SELECT delivery_id, status || '/' || attempts || '/' || coalesce(response_status::text, '-') || '/' ||
			coalesce(next_attempt_at::text, '-') || '/' || md5(payload) FROM webhook_deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				t.Fatal(err)
			}
			out[id] = state
		}
		return out
	}
	before := snapshot()
	if len(before) != 5 {
		t.Fatalf("got %d delivery rows; want 5", len(before))
	}
	if err := e.runner.Rebuild(testutil.Context(t), projections.WebhooksName, nil); err != nil {
		t.Fatal(err)
	}
	after := snapshot()
	if len(after) != len(before) {
		t.Fatalf("got %d rows after the rebuild; want %d", len(after), len(before))
	}
	for id, state := range before {
		if after[id] != state {
			t.Errorf("delivery %s: got %q after the rebuild; want %q", id, after[id], state)
		}
	}
	sent := len(ok.requests()) + len(failing.requests())
	if got := e.dispatch(t, e.dispatcher(t, ok)); len(got) != 0 {
		t.Errorf("got %d attempts after the rebuild; want none", len(got))
	}
	if now := len(ok.requests()) + len(failing.requests()); now != sent {
		t.Errorf("receivers got %d more requests after the rebuild; want none", now-sent)
	}
}

// TestTwoDispatchersNeverSendOneAttemptTwice runs two dispatchers on one
// database over the same deliveries while the read model lags behind their
// records. The receiver fails each delivery's first attempt; once the clock
// passes the 30 s gap the second attempt delivers it. Every delivery must
// arrive exactly twice: attempt 1 once and attempt 2 once.
func TestTwoDispatchersNeverSendOneAttemptTwice(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]int{}
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Service-Delivery")
		mu.Lock()
		seen[id]++
		first := seen[id] == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	id, _ := e.subscribe(t, rcv.srv.URL)
	const n = 60
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		ids[e.test(t, id)] = true
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	var wg sync.WaitGroup
	for _, name := range []string{"one", "two"} {
		d := e.dispatcher(t, rcv, func(c *workers.WebhookDispatcherConfig, _ *workers.WebhookClientOptions) {
			c.ID, c.Poll = name, 5*time.Millisecond
		})
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(ctx) }()
	}
	count := func(where string) int {
		var c int
		_ = e.pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM webhook_deliveries WHERE `+where).Scan(&c)
		return c
	}
	waitUntil(t, "every first attempt recorded", func() bool { return count(`attempts = 1 AND status = 'pending'`) == n })
	time.Sleep(100 * time.Millisecond) // a duplicate first attempt would arrive now
	e.clock.Advance(30 * time.Second)
	waitUntil(t, "every delivery delivered", func() bool { return count(`status = 'delivered' AND attempts = 2`) == n })
	time.Sleep(200 * time.Millisecond) // let any duplicate that would happen arrive
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("receiver saw %d delivery ids; want %d", len(seen), n)
	}
	for id, c := range seen {
		if !ids[id] {
			t.Errorf("receiver got unknown delivery %s", id)
		}
		if c != 2 {
			t.Errorf("delivery %s arrived %d times; want twice (attempts 1 and 2, once each)", id, c)
		}
	}
	var by []string
	rows, _ := e.pool.Query(testutil.Context(t), `SELECT DISTINCT metadata->>'actorId' FROM events WHERE event_type = 'webhook.delivery_attempted' ORDER BY 1`)
	for rows.Next() {
		var s string
		rows.Scan(&s)
		by = append(by, s)
	}
	rows.Close()
	t.Logf("attempts recorded by %v", by)
}
