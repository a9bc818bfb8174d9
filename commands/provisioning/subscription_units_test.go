package provisioning_test

import (
	"net/http"
	"strings"
	"testing"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// quantityUpdates returns the quantity changes the provider was sent, in
// order: the subscription item updates.
func (e *followupEnv) quantityUpdates(t *testing.T) []followupRequest {
	t.Helper()
	sent, _ := e.mock.requests()
	var out []followupRequest
	for _, r := range sent {
		if r.method == http.MethodPost && strings.HasPrefix(r.path, "/v1/subscription_items/") {
			out = append(out, r)
		}
	}
	return out
}

// TestSubscriptionQuantityLoweredPerPhone (issue 26 item 1): a phone of a
// three-phone subscription that ends sets the subscription's quantity to
// the phones still renewing, prorated by the provider (the customer's
// Cancel) or not (a cancelled renewal: its paid period runs out); the
// provider's answer is recorded. Two phones stopping before the reactor
// runs are carried out in the log's order, so the later, lower quantity
// is the one the provider keeps. The last renewing phone cancels the
// subscription at its period's end, the renewal-cancelled phone being
// still live.
func TestSubscriptionQuantityLoweredPerPhone(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c := e.app.Provisioning

	phones := e.paidOrder(t, org, pixelMonthly, 3)
	sub := "sub_" + e.orderOf(t, org, phones[0])
	if _, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: phones[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: phones[1]}); err != nil {
		t.Fatal(err)
	}

	// The first phone's change goes first; the second waits for it.
	as := e.once(t)
	if len(as) != 1 || as[0].Event.FulfilmentID != phones[0] || as[0].Event.Outcome != domain.FollowupDone {
		t.Fatalf("first round: %+v; want the first phone's change only, done", as)
	}
	as = e.once(t)
	if len(as) != 1 || as[0].Event.FulfilmentID != phones[1] || as[0].Event.Outcome != domain.FollowupDone {
		t.Fatalf("second round: %+v; want the second phone's change, done", as)
	}

	for i, want := range []struct {
		quantity  int64
		proration string
	}{{2, domain.ProrationCreate}, {1, domain.ProrationNone}} {
		f := e.only(t, phones[i])
		if f.Action != domain.FollowupSetQuantity || f.Quantity != want.quantity || f.Proration != want.proration ||
			f.SubscriptionID != sub || f.Status != projections.FollowupDone || f.ProviderQuantity != want.quantity {
			t.Errorf("follow-up of phone %d: %+v; want quantity %d (%s) done, the provider answering it", i, f, want.quantity, want.proration)
		}
	}
	ups := e.quantityUpdates(t)
	if len(ups) != 2 {
		t.Fatalf("quantity updates %+v; want two", ups)
	}
	for i, want := range []struct{ quantity, proration string }{{"2", domain.ProrationCreate}, {"1", domain.ProrationNone}} {
		key := domain.PaymentFollowupKey(e.only(t, phones[i]).FollowupID)
		if got := ups[i]; got.form.Get("quantity") != want.quantity || got.form.Get("proration_behavior") != want.proration || got.key != key {
			t.Errorf("update %d: %v key %s; want quantity %s, proration_behavior %s, key %s", i, got.form, got.key,
				want.quantity, want.proration, key)
		}
	}

	// The last renewing phone: the subscription stops at its period's end.
	if _, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: phones[2]}); err != nil {
		t.Fatal(err)
	}
	if as := e.once(t); len(as) != 1 || as[0].Event.Outcome != domain.FollowupDone {
		t.Fatalf("last phone: %+v; want one attempt, done", as)
	}
	if f := e.only(t, phones[2]); f.Action != domain.FollowupCancelAtPeriodEnd || f.SubscriptionID != sub {
		t.Errorf("last phone's follow-up %+v; want the subscription cancelled at its period's end", f)
	}
	if ups := e.quantityUpdates(t); len(ups) != 2 {
		t.Errorf("quantity updates after the last phone: %d; want still two", len(ups))
	}

	rows := followupRowsText(t, e)
	if err := e.runner.Rebuild(ctx, projections.PaymentFollowupsName, nil); err != nil {
		t.Fatal(err)
	}
	if again := followupRowsText(t, e); again != rows {
		t.Errorf("rebuild changed the follow-up rows:\nbefore\n%s\nafter\n%s", rows, again)
	}
}

// TestSubscriptionPhoneReturnRefundsItsShare (issue 26 item 2): a
// returned phone of a two-phone subscription lowers its quantity without
// proration and refunds the phone's share of the latest paid invoice (its
// price, capped by what the invoice's charge has left); the owner's refund
// of the last phone cancels the subscription and refunds its share too.
// Each refund carries a key of its own, derived from the follow-up.
func TestSubscriptionPhoneReturnRefundsItsShare(t *testing.T) {
	e := newFollowupEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c := e.app.Provisioning

	pair := e.paidOrder(t, org, pixelMonthly, 2)
	sub := "sub_" + e.orderOf(t, org, pair[0])
	if _, err := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: pair[0]}); err != nil {
		t.Fatal(err)
	}
	if as := e.once(t); len(as) != 1 || as[0].Event.Outcome != domain.FollowupDone {
		t.Fatalf("return: %+v; want one attempt, done", as)
	}
	if _, err := c.RefundFulfilment.Handle(ctx, provisioning.RefundFulfilment{FulfilmentID: pair[1]}); err != nil {
		t.Fatal(err)
	}
	if as := e.once(t); len(as) != 1 || as[0].Event.Outcome != domain.FollowupDone {
		t.Fatalf("owner refund: %+v; want one attempt, done", as)
	}

	sent, _ := e.mock.requests()
	var refunds, reads []followupRequest
	for _, r := range sent {
		switch {
		case r.method == http.MethodPost && r.path == "/v1/refunds":
			refunds = append(refunds, r)
		case r.method == http.MethodGet && r.path == "/v1/invoices":
			reads = append(reads, r)
		}
	}
	if len(refunds) != 2 || len(reads) != 2 {
		t.Fatalf("refunds %+v after invoice reads %+v; want two of each", refunds, reads)
	}
	for i, id := range pair {
		f := e.only(t, id)
		if !f.RefundShare || f.Amount != 9900 || f.Status != projections.FollowupDone || !strings.HasPrefix(f.RefundID, "re_") ||
			f.RefundedAmount <= 0 || f.RefundedAmount > 9900 || f.Note != "" {
			t.Errorf("follow-up of phone %d: %+v; want its share (at most 9900) refunded and recorded", i, f)
		}
		if r := reads[i]; r.form.Get("subscription") != sub || r.form.Get("status") != "paid" {
			t.Errorf("invoice read %d: %v; want the subscription's paid invoices", i, r.form)
		}
		// stripe-mock's paid invoice has a charge of 100 with nothing
		// refunded: the share is capped at it.
		r := refunds[i]
		if r.key != domain.PaymentFollowupRefundKey(f.FollowupID) || !strings.HasPrefix(r.form.Get("charge"), "ch_") ||
			r.form.Get("amount") != "100" {
			t.Errorf("refund %d: %v key %s; want the invoice's charge, amount 100, key %s", i, r.form, r.key,
				domain.PaymentFollowupRefundKey(f.FollowupID))
		}
	}
	if f := e.only(t, pair[0]); f.Action != domain.FollowupSetQuantity || f.Quantity != 1 || f.Proration != domain.ProrationNone {
		t.Errorf("returned phone's follow-up %+v; want quantity 1 without proration", f)
	}
	if f := e.only(t, pair[1]); f.Action != domain.FollowupCancelSubscription {
		t.Errorf("last phone's follow-up %+v; want the subscription cancelled", f)
	}
}

// TestPartialRefundRecorded (issue 26 item 3): a charge.refunded that
// refunds part of an order's charge is applied, not ignored: the charge's
// stream records the cumulative amount refunded, while the order's phone
// stays live.
func TestPartialRefundRecorded(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	id := e.paidOrder(t, org, cloudDay, 1)[0]
	order := e.fulfilment(t, org, id).OrderID
	e.mustDeliver(t, stripeEvent(t, "evt_part_"+order, payments.EventChargeRefunded, map[string]any{"id": "ch_" + order,
		"object": "charge", "amount": 1200, "amount_refunded": 300, "refunded": false, "payment_intent": "pi_" + order,
		"currency": "usd", "status": "succeeded", "metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}},
		e.clock.Now()), provisioning.ProviderEventApplied)
	var got []domain.ChargeRefunded
	e.streamEvents(t, domain.ChargeRefundStream("ch_"+order), func(ev domain.Event, _ int64) {
		if r, ok := ev.(domain.ChargeRefunded); ok {
			got = append(got, r)
		}
	})
	if len(got) != 1 || got[0].OrderID != order || got[0].OrgID != org || got[0].AmountRefunded != 300 || got[0].Amount != 1200 ||
		got[0].Full || got[0].Currency != "usd" || got[0].PaymentIntentID != "pi_"+order {
		t.Errorf("charge refunds recorded %+v; want 300 of 1200 usd of the order", got)
	}
	if f := e.fulfilment(t, org, id); f.State == domain.FulfilmentCancelledState {
		t.Errorf("a partly refunded order's phone %+v; want it live", f)
	}
}
