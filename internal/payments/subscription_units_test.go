package payments

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSetSubscriptionQuantity reads the subscription's one item and
// updates its quantity with the proration behaviour and the idempotency
// key; the quantity returned is the provider's answer.
func TestSetSubscriptionQuantity(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	q, err := p.SetSubscriptionQuantity(context.Background(), "sub_three", 2, "create_prorations", "key-two")
	if err != nil || q != 2 {
		t.Fatalf("set quantity: %d, %v; want the provider answering 2", q, err)
	}
	got := sent()
	if len(got) != 2 {
		t.Fatalf("sent %+v; want the read and the update", got)
	}
	if r := got[0]; r.method != http.MethodGet || r.path != "/v1/subscriptions/sub_three" {
		t.Errorf("first request %s %s; want GET /v1/subscriptions/sub_three", r.method, r.path)
	}
	if r := got[1]; r.method != http.MethodPost || !strings.HasPrefix(r.path, "/v1/subscription_items/si_") || r.key != "key-two" ||
		r.form.Get("quantity") != "2" || r.form.Get("proration_behavior") != "create_prorations" {
		t.Errorf("update %s %s key %q form %v; want POST quantity=2 proration_behavior=create_prorations with key-two",
			r.method, r.path, r.key, r.form)
	}
	if _, err := p.SetSubscriptionQuantity(context.Background(), "sub_x", 0, "none", "k"); err == nil {
		t.Error("a quantity of 0 was sent")
	}
}

// TestRefundSubscriptionShare reads the subscription's newest paid
// invoice with its charge and refunds the share, capped at what the charge
// has left, with the idempotency key.
func TestRefundSubscriptionShare(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	id, amount, err := p.RefundSubscriptionShare(context.Background(), "sub_pair", 9900, time.Now(), "key-share")
	// stripe-mock's invoice charge is 100 with nothing refunded.
	if err != nil || !strings.HasPrefix(id, "re_") || amount <= 0 {
		t.Fatalf("refund share: %q, %d, %v; want a refund", id, amount, err)
	}
	got := sent()
	if len(got) != 2 || got[0].method != http.MethodGet || got[0].path != "/v1/invoices" {
		t.Fatalf("sent %+v; want the invoice read, then the refund", got)
	}
	if r := got[1]; r.path != "/v1/refunds" || r.key != "key-share" || !strings.HasPrefix(r.form.Get("charge"), "ch_") ||
		r.form.Get("amount") != "100" {
		t.Errorf("refund sent %s key %q form %v; want the charge, amount 100, key-share", r.path, r.key, r.form)
	}
	if _, _, err := p.RefundSubscriptionShare(context.Background(), "sub_x", 0, time.Now(), "k"); err == nil {
		t.Error("a share of 0 was refunded")
	}
}

// TestRefundSubscriptionShareOfThePhonesPeriod (issue 26, found by the
// payments walk): the share refunded is of the invoice that paid the
// period the phone ended in, the newest paid invoice created at or before
// the end, not of a renewal billed after it (a follow-up carried out, or
// retried, after the next renewal). The list asks the provider for those
// (created[lte]) and skips any newer invoice in its answer.
func TestRefundSubscriptionShareOfThePhonesPeriod(t *testing.T) {
	ended := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var listed url.Values
	var refunded url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/invoices":
			listed = r.URL.Query()
			// Newest first, as Stripe lists; a provider that ignored the
			// filter would answer the renewal after the end too.
			_, _ = fmt.Fprintf(w, `{"object":"list","url":"/v1/invoices","has_more":false,"data":[
				{"id":"in_next","object":"invoice","status":"paid","subscription":"sub_pair","created":%d,
				 "charge":{"id":"ch_next","object":"charge","amount":19800,"amount_refunded":0,"currency":"usd"}},
				{"id":"in_paid","object":"invoice","status":"paid","subscription":"sub_pair","created":%d,
				 "charge":{"id":"ch_paid","object":"charge","amount":19800,"amount_refunded":0,"currency":"usd"}}]}`,
				ended.Add(time.Minute).Unix(), ended.Add(-time.Hour).Unix())
		case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
			body, _ := io.ReadAll(r.Body)
			refunded, _ = url.ParseQuery(string(body))
			_, _ = fmt.Fprintf(w, `{"id":"re_share","object":"refund","amount":%s,"charge":%q,"currency":"usd","status":"succeeded"}`,
				refunded.Get("amount"), refunded.Get("charge"))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"unexpected"}}`))
		}
	}))
	t.Cleanup(srv.Close)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL, MaxNetworkRetries: -1})
	id, amount, err := p.RefundSubscriptionShare(context.Background(), "sub_pair", 9900, ended, "key-share")
	if err != nil || id != "re_share" || amount != 9900 {
		t.Fatalf("refund share: %q, %d, %v; want re_share of 9900", id, amount, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := listed.Get("created[lte]"); got != strconv.FormatInt(ended.Unix(), 10) {
		t.Errorf("invoices listed with created[lte]=%q; want the end, %d", got, ended.Unix())
	}
	if refunded.Get("charge") != "ch_paid" || refunded.Get("amount") != "9900" {
		t.Errorf("refunded %v; want 9900 of ch_paid, the invoice of the period the phone ended in", refunded)
	}
}
