package payments

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"phonefleet/testutil"
)

// sentRequest is one request as it went to stripe-mock.
type sentRequest struct {
	method, path, key string
	form              url.Values
}

// recordingMock is stripe-mock behind a proxy that records every request.
func recordingMock(t *testing.T) (string, func() []sentRequest) {
	t.Helper()
	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []sentRequest
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		form, _ := url.ParseQuery(string(body))
		mu.Lock()
		sent = append(sent, sentRequest{method: r.Method, path: r.URL.Path, key: r.Header.Get("Idempotency-Key"), form: form})
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []sentRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]sentRequest(nil), sent...)
	}
}

func TestCancelSubscription(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	ctx := context.Background()
	if err := p.CancelSubscription(ctx, "sub_now", false, "key-now"); err != nil {
		t.Fatalf("cancel now: %v", err)
	}
	if err := p.CancelSubscription(ctx, "sub_later", true, "key-later"); err != nil {
		t.Fatalf("cancel at period end: %v", err)
	}
	got := sent()
	if len(got) != 2 {
		t.Fatalf("sent %d requests; want 2: %+v", len(got), got)
	}
	if r := got[0]; r.method != http.MethodDelete || r.path != "/v1/subscriptions/sub_now" || r.key != "key-now" {
		t.Errorf("cancel now sent %s %s key %q; want DELETE /v1/subscriptions/sub_now with key-now", r.method, r.path, r.key)
	}
	if r := got[1]; r.method != http.MethodPost || r.path != "/v1/subscriptions/sub_later" || r.key != "key-later" ||
		r.form.Get("cancel_at_period_end") != "true" {
		t.Errorf("cancel at period end sent %s %s key %q form %v; want POST cancel_at_period_end=true with key-later",
			r.method, r.path, r.key, r.form)
	}
}

// TestResumeSubscription withdraws a cancellation at the period's end:
// cancel_at_period_end=false, with the idempotency key.
func TestResumeSubscription(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	if err := p.ResumeSubscription(context.Background(), "sub_back", "key-back"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	got := sent()
	if len(got) != 1 || got[0].method != http.MethodPost || got[0].path != "/v1/subscriptions/sub_back" || got[0].key != "key-back" ||
		got[0].form.Get("cancel_at_period_end") != "false" {
		t.Fatalf("resume sent %+v; want POST cancel_at_period_end=false with key-back", got)
	}
	if err := p.ResumeSubscription(context.Background(), "", "k"); err == nil {
		t.Fatal("a resume without a subscription id was sent")
	}
}

func TestRefund(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	ctx := context.Background()
	id, err := p.Refund(ctx, "pi_part", 1500, "key-part")
	if err != nil || !strings.HasPrefix(id, "re_") {
		t.Fatalf("partial refund: %q, %v; want a refund id", id, err)
	}
	if _, err := p.Refund(ctx, "pi_all", 0, "key-all"); err != nil {
		t.Fatalf("full refund: %v", err)
	}
	got := sent()
	if len(got) != 2 {
		t.Fatalf("sent %d requests; want 2", len(got))
	}
	if r := got[0]; r.path != "/v1/refunds" || r.key != "key-part" || r.form.Get("payment_intent") != "pi_part" || r.form.Get("amount") != "1500" {
		t.Errorf("partial refund sent %s key %q form %v", r.path, r.key, r.form)
	}
	if r := got[1]; r.key != "key-all" || r.form.Get("payment_intent") != "pi_all" || r.form.Has("amount") {
		t.Errorf("full refund sent key %q form %v; want no amount", r.key, r.form)
	}
	if _, err := p.Refund(ctx, "pi_x", -1, "k"); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("negative amount: got %v; want a plain error", err)
	}
}

func TestFollowupErrors(t *testing.T) {
	ctx := context.Background()
	down := New(Config{SecretKey: "sk_test_phonefleet", APIBase: answering(t, http.StatusServiceUnavailable,
		`{"error":{"type":"api_error","message":"down"}}`).URL, MaxNetworkRetries: -1})
	if err := down.CancelSubscription(ctx, "sub_1", false, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("cancel against a 503: got %v; want ErrUnavailable", err)
	}
	if _, err := down.Refund(ctx, "pi_1", 100, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("refund against a 503: got %v; want ErrUnavailable", err)
	}
	missing := New(Config{SecretKey: "sk_test_phonefleet", APIBase: answering(t, http.StatusNotFound,
		`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such subscription"}}`).URL})
	var refused *RefusedError
	if err := missing.CancelSubscription(ctx, "sub_1", true, "k"); !errors.As(err, &refused) || refused.Code != "resource_missing" {
		t.Errorf("cancel of a missing subscription: got %v; want a RefusedError", err)
	}
	if _, err := missing.Refund(ctx, "pi_1", 0, "k"); !errors.As(err, &refused) || errors.Is(err, ErrUnavailable) {
		t.Errorf("refund refused: got %v; want a RefusedError", err)
	}
	if err := New(Config{APIBase: "http://127.0.0.1:1"}).CancelSubscription(ctx, "sub_1", false, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no key: got %v; want ErrUnavailable", err)
	}
}
