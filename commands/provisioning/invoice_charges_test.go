package provisioning_test

import (
	"context"
	"testing"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestInvoiceChargeRefundAndDisputeReachTheirOrder: a refund or a dispute
// of a subscription's invoice (the first or a renewal) carries none of our
// metadata and its payment intent is no order's; the provider is asked
// which subscription the charge's invoice paid, and the event applies to
// the order whose phones that subscription pays: a partial refund is
// recorded on the charge for that order, a dispute ends the order
// disputed. (Before, both were ignored: a renewal disputed at the bank
// left its phone live, and reconcile could not match either.)
func TestInvoiceChargeRefundAndDisputeReachTheirOrder(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	refunded, _ := e.openOrder(t, org, emulatorMonthly, 1)
	disputed, dids := e.openOrder(t, org, emulatorMonthly, 1)
	charge := func(id, sub string) string {
		return `{"id":"` + id + `","object":"charge","amount":2900,"currency":"usd","status":"succeeded",
			"invoice":{"id":"in_` + id + `","object":"invoice","subscription":"` + sub + `"}}`
	}
	provider := testutil.StripeRecordedObjects(t, testutil.StripeMock(t), map[string]string{
		"/v1/charges/ch_renewal_r": charge("ch_renewal_r", "sub_"+refunded),
		"/v1/charges/ch_renewal_d": charge("ch_renewal_d", "sub_"+disputed),
	})
	catalog, err := domain.ParseCatalog([]byte(fulCatalog))
	if err != nil {
		t.Fatal(err)
	}
	p := provisioning.New(provisioning.Config{Store: e.Store, Catalog: catalog, Devices: e.Fleet, WebhookSecret: fulSecret, Now: e.clock.Now,
		Payments: payments.New(payments.Config{SecretKey: "sk_test_invoice_charges", APIBase: provider, MaxNetworkRetries: -1}),
		ReadModels: testutil.ReadModels{RM: e.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: e.fr}}})
	e.p, e.app = p, commands.NewApplication(commands.Capabilities{Fleet: e.Fleet, Provisioning: p})
	for _, o := range []string{refunded, disputed} {
		e.mustDeliver(t, stripeEvent(t, "evt_paid_"+o, payments.EventCheckoutCompleted,
			session(org, o, "subscription", "paid", map[string]any{"subscription": "sub_" + o}), e.clock.Now()), provisioning.ProviderEventApplied)
	}

	// 1000 of the renewal invoice refunded: recorded for the order.
	e.mustDeliver(t, stripeEvent(t, "evt_renewal_refund", payments.EventChargeRefunded, map[string]any{"id": "ch_renewal_r",
		"object": "charge", "amount": 2900, "amount_refunded": 1000, "refunded": false, "currency": "usd", "status": "succeeded",
		"payment_intent": "pi_renewal_r", "invoice": "in_ch_renewal_r", "metadata": map[string]any{}, "created": e.clock.Now().Unix()},
		e.clock.Now()), provisioning.ProviderEventApplied)
	var got []domain.ChargeRefunded
	e.streamEvents(t, domain.ChargeRefundStream("ch_renewal_r"), func(ev domain.Event, _ int64) {
		if r, ok := ev.(domain.ChargeRefunded); ok {
			got = append(got, r)
		}
	})
	if len(got) != 1 || got[0].OrgID != org || got[0].OrderID != refunded || got[0].AmountRefunded != 1000 ||
		got[0].InvoiceID != "in_ch_renewal_r" {
		t.Errorf("the renewal's partial refund recorded %+v; want one payment.charge_refunded of 1000 for order %s", got, refunded)
	}

	// The renewal invoice disputed at the bank: the order ends disputed.
	e.mustDeliver(t, stripeEvent(t, "evt_renewal_dispute", payments.EventDisputeCreated, map[string]any{"id": "dp_renewal",
		"object": "dispute", "amount": 2900, "currency": "usd", "charge": "ch_renewal_d", "payment_intent": "pi_renewal_d",
		"status": "needs_response", "reason": "fraudulent", "metadata": map[string]any{}, "created": e.clock.Now().Unix()},
		e.clock.Now()), provisioning.ProviderEventApplied)
	if c := e.cancelled(t, dids[0]); c.Reason != domain.EndDisputed {
		t.Errorf("the disputed renewal's phone: %+v; want cancelled disputed", c)
	}
	if state := e.orderState(t, org, disputed); state != domain.OrderEndedState {
		t.Errorf("the disputed renewal's order is %s; want ended", state)
	}
	acc := e.account(t, org)
	if o, _ := acc.Order(disputed); o.EndedReason != domain.EndDisputed {
		t.Errorf("the disputed renewal's order ended %q; want disputed", o.EndedReason)
	}
}
