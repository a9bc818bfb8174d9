package provisioning_test

import (
	"context"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestRefundAndDisputeBeforeTheirPayment: the provider does not order its
// deliveries, so a refund or a dispute of a day pass (whose charge carries
// no metadata of ours) can arrive before the checkout.session.completed
// that records its payment. It answers not_settled (retryable, nothing
// recorded) and applies once the payment is recorded, ending the phone.
// What stays ignored: a refund of an invoice's charge, a dispute of a
// subscription's charge (the provider's charge names its subscription),
// and an event about an unknown payment created more than a day ago.
// (The payments walk found it: issue 26 item 4.)
func TestRefundAndDisputeBeforeTheirPayment(t *testing.T) {
	e := newFulEnv(t)
	catalog, err := domain.ParseCatalog([]byte(fulCatalog))
	if err != nil {
		t.Fatal(err)
	}
	stripeMock := testutil.StripeMock(t)
	provider := testutil.StripeRecordedObjects(t, stripeMock, map[string]string{
		"/v1/charges/ch_renewal": `{"id":"ch_renewal","object":"charge","amount":2900,"currency":"usd","status":"succeeded",
			"invoice":{"id":"in_renewal","object":"invoice","subscription":"sub_renewal"}}`,
	})
	p := provisioning.New(provisioning.Config{Store: e.Store, Catalog: catalog, Devices: e.Fleet, WebhookSecret: fulSecret, Now: e.clock.Now,
		Payments: payments.New(payments.Config{SecretKey: "sk_test_unrecorded", APIBase: provider}),
		ReadModels: testutil.ReadModels{RM: e.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: e.fr}}})
	e.p, e.app = p, commands.NewApplication(commands.Capabilities{Fleet: e.Fleet, Provisioning: p})
	org := domain.NewID(domain.PrefixOrganisation)

	notSettled := func(what string, payload []byte) {
		t.Helper()
		before := e.eventCount(t)
		_, err := e.deliver(t, payload)
		if de := domain.AsError(err); de == nil || de.Code != domain.CodeNotSettled || de.Retryable == nil || !*de.Retryable {
			t.Fatalf("%s before its payment: got %v; want not_settled, retryable", what, err)
		}
		if after := e.eventCount(t); after != before {
			t.Errorf("%s: a not_settled event recorded %d events", what, after-before)
		}
	}
	refundOf := func(pi, invoice string) map[string]any {
		c := map[string]any{"id": "ch_" + pi, "object": "charge", "amount": 400, "amount_refunded": 400, "refunded": true,
			"payment_intent": pi, "status": "succeeded", "created": e.clock.Now().Unix()}
		if invoice != "" {
			c["invoice"] = invoice
		}
		return c
	}
	disputeOf := func(charge, pi string) map[string]any {
		return map[string]any{"id": "dp_" + pi, "object": "dispute", "amount": 400, "charge": charge, "payment_intent": pi,
			"status": "needs_response", "reason": "fraudulent"}
	}

	// A refund, then the payment it refunds.
	refunded, rids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	refund := stripeEvent(t, "evt_early_refund", payments.EventChargeRefunded, refundOf("pi_early_r", ""), e.clock.Now())
	notSettled("a refund", refund)
	e.mustDeliver(t, stripeEvent(t, "evt_pay_early_r", payments.EventCheckoutCompleted,
		session(org, refunded, "payment", "paid", map[string]any{"payment_intent": "pi_early_r"}), e.clock.Now()), provisioning.ProviderEventApplied)
	e.mustDeliver(t, refund, provisioning.ProviderEventApplied)
	if c := e.cancelled(t, rids[0]); c.Reason != domain.EndRefunded {
		t.Errorf("refunded before its payment was recorded: %+v; want cancelled refunded", c)
	}

	// A dispute, then the payment it disputes (stripe-mock's charge names
	// no subscription).
	disputed, dids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay}, 1)
	dispute := stripeEvent(t, "evt_early_dispute", payments.EventDisputeCreated, disputeOf("ch_early_d", "pi_early_d"), e.clock.Now())
	notSettled("a dispute", dispute)
	e.mustDeliver(t, stripeEvent(t, "evt_pay_early_d", payments.EventCheckoutCompleted,
		session(org, disputed, "payment", "paid", map[string]any{"payment_intent": "pi_early_d"}), e.clock.Now()), provisioning.ProviderEventApplied)
	e.mustDeliver(t, dispute, provisioning.ProviderEventApplied)
	if c := e.cancelled(t, dids[0]); c.Reason != domain.EndDisputed {
		t.Errorf("disputed before its payment was recorded: %+v; want cancelled disputed", c)
	}

	// Ignored as before: an invoice's charge, a subscription's dispute, and
	// an unknown payment's refund created more than a day ago.
	e.mustDeliver(t, stripeEvent(t, "evt_invoice_refund", payments.EventChargeRefunded, refundOf("pi_invoice", "in_1"), e.clock.Now()),
		provisioning.ProviderEventIgnored)
	e.mustDeliver(t, stripeEvent(t, "evt_renewal_dispute", payments.EventDisputeCreated, disputeOf("ch_renewal", "pi_renewal"), e.clock.Now()),
		provisioning.ProviderEventIgnored)
	e.mustDeliver(t, stripeEvent(t, "evt_old_refund", payments.EventChargeRefunded, refundOf("pi_old", ""), e.clock.Now().Add(-25*time.Hour)),
		provisioning.ProviderEventIgnored)
}
