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

// TestRefundSubscriptionShare reads the subscription's newest paid
// invoice with its charge and refunds the share, capped at what the charge
// has left, with the idempotency key.
func TestRefundSubscriptionShare(t *testing.T) {
	base, sent := recordingMock(t)
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	id, amount, err := p.RefundSubscriptionShare(context.Background(), "sub_pair", 9900, "key-share")
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
	if _, _, err := p.RefundSubscriptionShare(context.Background(), "sub_x", 0, "k"); err == nil {
		t.Error("a share of 0 was refunded")
	}
}
