package httpapi

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// coRefusing is stripe-mock's provider refusing to open pages while refuse
// is set (a 4xx: retrying unchanged does not help).
type coRefusing struct {
	payments.Provider
	mu     sync.Mutex
	refuse bool
}

func (c *coRefusing) CreateCheckoutSession(ctx context.Context, r payments.CheckoutRequest) (payments.CheckoutSession, error) {
	c.mu.Lock()
	refuse := c.refuse
	c.mu.Unlock()
	if refuse {
		return payments.CheckoutSession{}, &payments.RefusedError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "no payments on this account"}
	}
	return c.Provider.CreateCheckoutSession(ctx, r)
}

// TestCheckoutReplaysARefusal: a first attempt's final refusal is its
// key's answer: the repeat gets the same status and body with
// Idempotent-Replayed: true (the first answer has none), each checked
// against the served document; 503 (the provider refused) and 409 (an
// earlier page that could not be closed) alike.
func TestCheckoutReplaysARefusal(t *testing.T) {
	refusing := &coRefusing{refuse: true,
		Provider: payments.New(payments.Config{SecretKey: "sk_test_checkout", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1})}
	e := newCOEnv(t, newCODB(t), coOptions{provider: refusing})

	first := e.checkout("admin", coDay, "Idempotency-Key", "k-503")
	first.want(t, http.StatusServiceUnavailable, "checkout_unavailable", "no")
	refusing.mu.Lock()
	refusing.refuse = false
	refusing.mu.Unlock()
	again := e.checkout("admin", coDay, "Idempotency-Key", "k-503")
	again.want(t, http.StatusServiceUnavailable, "checkout_unavailable", "no")
	if first.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("503: got %s %v after %s %v; want the first refusal, replayed", again.body, again.header, first.body, first.header)
	}

	e.clock.Advance(time.Hour)
	e.checkout("admin", coDay).want(t, http.StatusOK, "", "") // an open page
	e.provider.notExpirable = true
	first = e.checkout("admin", coDay, "Idempotency-Key", "k-409")
	first.want(t, http.StatusConflict, "checkout_in_progress", "no")
	e.provider.notExpirable = false
	again = e.checkout("admin", coDay, "Idempotency-Key", "k-409")
	again.want(t, http.StatusConflict, "checkout_in_progress", "no")
	if first.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("409: got %s %v after %s %v; want the first refusal, replayed", again.body, again.header, first.body, first.header)
	}
	if e.provider.creates != 2 {
		t.Errorf("got %d page requests; want 2 (the refused one, the open page): the replays asked for none", e.provider.creates)
	}
}
