package payments

import (
	"context"
	"net/http"
	"strings"
	"testing"
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
