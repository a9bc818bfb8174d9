package provisioning_test

import (
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// Issue 26 ("Why", bullet 3): the renewal date is the payment provider's
// period, read from its webhooks, not the monthly anniversary of the
// payment counted here.

// subscriptionInvoice is an invoice.paid object of org's order paying the
// subscription's period [start, end), as Stripe renders one: the
// subscription's metadata under subscription_details, the period on its
// subscription line.
func subscriptionInvoice(org, order, reason string, start, end time.Time) map[string]any {
	meta := map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}
	return map[string]any{"id": "in_" + order + reason, "object": "invoice", "status": "paid", "billing_reason": reason,
		"customer": "cus_" + org, "subscription": "sub_" + order, "subscription_details": map[string]any{"metadata": meta},
		"amount_paid": 2900, "currency": "usd", "period_start": start.Add(-30 * 24 * time.Hour).Unix(), "period_end": start.Unix(),
		"lines": map[string]any{"object": "list", "data": []any{map[string]any{"id": "il_" + order + reason, "object": "line_item",
			"type": "subscription", "subscription": "sub_" + order, "amount": 2900, "currency": "usd", "quantity": 1,
			"metadata": meta, "period": map[string]any{"start": start.Unix(), "end": end.Unix()}}}}}
}

// subscriptionObject is a customer.subscription.* object of org's order in
// its current period [start, end).
func subscriptionObject(org, order string, start, end time.Time) map[string]any {
	return map[string]any{"id": "sub_" + order, "object": "subscription", "status": "active", "customer": "cus_" + org,
		"current_period_start": start.Unix(), "current_period_end": end.Unix(),
		"metadata": map[string]any{payments.MetaOrgID: org, payments.MetaOrderID: order}}
}

// TestRenewalIsTheProvidersPeriod: a subscription phone whose first period
// is not a month (a trial of ten days at the provider) renews when the
// provider's period ends, as its invoice.paid reports it; the billing
// cycle anchor moved at the provider (customer.subscription.updated)
// moves the renewal; a report older than the one recorded, delivered
// late, changes nothing; cancelling the renewal ends the phone at the end
// of the provider's period.
func TestRenewalIsTheProvidersPeriod(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	q := e.app.Provisioning
	id := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	order := e.fulfilment(t, org, id).OrderID
	renewal := func(what string, want time.Time) {
		t.Helper()
		r, err := q.GetFulfilmentRenewal.Handle(ctx, provisioning.GetFulfilmentRenewal{Auth: admin, FulfilmentID: id})
		if err != nil || !r.Renews || !r.NextRenewalAt.Equal(want) {
			t.Fatalf("%s: renewal status %+v, %v; want renews at %s (the anniversary would be %s)", what, r, err, want,
				fulStart.AddDate(0, 1, 0))
		}
	}

	trialEnd := fulStart.Add(10 * 24 * time.Hour)
	e.mustDeliver(t, stripeEvent(t, "evt_inv_create_"+order, payments.EventInvoicePaid,
		subscriptionInvoice(org, order, "subscription_create", fulStart, trialEnd), e.clock.Now()), provisioning.ProviderEventApplied)
	renewal("after the first invoice", trialEnd)

	// The anchor moved at the provider: the period now ends on the 20th.
	e.clock.Advance(time.Hour)
	moved := time.Date(2026, 6, 20, 0, 0, 0, 0, time.UTC)
	e.mustDeliver(t, stripeEvent(t, "evt_sub_moved_"+order, payments.EventSubscriptionUpdated,
		subscriptionObject(org, order, fulStart, moved), e.clock.Now()), provisioning.ProviderEventApplied)
	renewal("after the anchor moved", moved)

	// An update the provider made before the one recorded, delivered late.
	before := e.eventCount(t)
	e.mustDeliver(t, stripeEvent(t, "evt_sub_stale_"+order, payments.EventSubscriptionUpdated,
		subscriptionObject(org, order, fulStart, fulStart.AddDate(0, 1, 0)), fulStart.Add(time.Minute)), provisioning.ProviderEventApplied)
	if n := e.eventCount(t) - before; n != 1 {
		t.Errorf("a stale period recorded %d events; want only the delivery's marker", n)
	}
	renewal("after a stale update", moved)

	// The renewal at the moved anchor: the next period as the provider bills it.
	e.clock.Set(moved.Add(time.Minute))
	next := moved.AddDate(0, 1, 0)
	e.mustDeliver(t, stripeEvent(t, "evt_inv_cycle_"+order, payments.EventInvoicePaid,
		subscriptionInvoice(org, order, "subscription_cycle", moved, next), e.clock.Now()), provisioning.ProviderEventApplied)
	renewal("after the renewal", next)

	r, err := q.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: id})
	if err != nil || r.Renews || !r.EndsAt.Equal(next) {
		t.Fatalf("after cancel-renewal %+v, %v; want it to end at the provider's period end %s", r, err, next)
	}
	if f := e.fulfilment(t, org, id); f.EndsAt == nil || !f.EndsAt.Equal(next) {
		t.Errorf("fulfilment ends at %v; want %s", f.EndsAt, next)
	}
}
