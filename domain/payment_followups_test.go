package domain

import (
	"testing"
	"time"
)

func TestPlanPaymentFollowup(t *testing.T) {
	cancelled, renewal := FulfilmentCancelled{}.EventName(), FulfilmentRenewalCancelled{}.EventName()
	sub := FollowupTrigger{Event: cancelled, Billing: BillingSubscription, SubscriptionID: "sub_1", UnitAmount: 2900}
	day := FollowupTrigger{Event: cancelled, Billing: BillingDay, PaymentIntentID: "pi_1", UnitAmount: 400}
	with := func(t FollowupTrigger, f func(*FollowupTrigger)) FollowupTrigger { f(&t); return t }
	for _, tc := range []struct {
		name string
		in   FollowupTrigger
		owed bool
		want FollowupPlan
	}{
		{"cancel subscription", with(sub, func(t *FollowupTrigger) { t.Reason = EndCustomerCancel }), true, FollowupPlan{Action: FollowupCancelSubscription}},
		{"return subscription", with(sub, func(t *FollowupTrigger) { t.Reason = EndCustomerReturn }), true,
			FollowupPlan{Action: FollowupCancelSubscription, RefundShare: true}},
		{"shared, two others renew", with(sub, func(t *FollowupTrigger) { t.Reason = EndCustomerCancel; t.OthersLive, t.OthersRenewing = 2, 2 }), true,
			FollowupPlan{Action: FollowupSetQuantity, Quantity: 2, Proration: ProrationCreate}},
		{"shared, renewal cancelled", with(sub, func(t *FollowupTrigger) { t.Event = renewal; t.OthersLive, t.OthersRenewing = 1, 1 }), true,
			FollowupPlan{Action: FollowupSetQuantity, Quantity: 1, Proration: ProrationNone}},
		{"shared, the other stops renewing", with(sub, func(t *FollowupTrigger) { t.Reason = EndOwnerRefund; t.OthersLive = 1 }), true,
			FollowupPlan{Action: FollowupCancelAtPeriodEnd, RefundShare: true}},
		{"shared, returned while another renews", with(sub, func(t *FollowupTrigger) { t.Reason = EndCustomerReturn; t.OthersLive, t.OthersRenewing = 1, 1 }), true,
			FollowupPlan{Action: FollowupSetQuantity, Quantity: 1, Proration: ProrationNone, RefundShare: true}},
		{"renewal cancelled", with(sub, func(t *FollowupTrigger) { t.Event = renewal }), true, FollowupPlan{Action: FollowupCancelAtPeriodEnd}},
		{"undelivered subscription", with(sub, func(t *FollowupTrigger) { t.Reason = EndUndelivered }), true, FollowupPlan{Action: FollowupCancelSubscription}},
		{"provider ended", with(sub, func(t *FollowupTrigger) { t.Reason = EndSubscriptionEnded }), false, FollowupPlan{}},
		// A refund or dispute the provider started on a subscription's
		// invoice ends the order's phones; the subscription itself goes on
		// renewing unless told: its last phone to end cancels it, now.
		{"subscription refunded by the provider, last phone", with(sub, func(t *FollowupTrigger) { t.Reason = EndRefunded }), true,
			FollowupPlan{Action: FollowupCancelSubscription}},
		{"subscription disputed, last phone", with(sub, func(t *FollowupTrigger) { t.Reason = EndDisputed; t.OthersRenewing = 0 }), true,
			FollowupPlan{Action: FollowupCancelSubscription}},
		{"subscription refunded by the provider, another phone ends after it", with(sub, func(t *FollowupTrigger) {
			t.Reason = EndRefunded
			t.OthersLive, t.OthersRenewing = 1, 1
		}), false, FollowupPlan{}},
		{"subscription disputed, none recorded", with(sub, func(t *FollowupTrigger) { t.Reason = EndDisputed; t.SubscriptionID = "" }), false,
			FollowupPlan{}},
		{"provider refunded", with(day, func(t *FollowupTrigger) { t.Reason = EndRefunded }), false, FollowupPlan{}},
		{"disputed", with(day, func(t *FollowupTrigger) { t.Reason = EndDisputed }), false, FollowupPlan{}},
		{"day pass ran out", with(day, func(t *FollowupTrigger) { t.Reason = EndDayPassExpired }), false, FollowupPlan{}},
		{"day pass cancelled", with(day, func(t *FollowupTrigger) { t.Reason = EndCustomerCancel }), false, FollowupPlan{}},
		{"day returned", with(day, func(t *FollowupTrigger) { t.Reason = EndCustomerReturn }), true, FollowupPlan{Action: FollowupRefund}},
		{"cloud undelivered", with(day, func(t *FollowupTrigger) { t.Reason = EndCloudUndelivered }), true, FollowupPlan{Action: FollowupRefund}},
		{"no payment", with(day, func(t *FollowupTrigger) { t.Reason = EndOwnerRefund; t.PaymentIntentID = "" }), true,
			FollowupPlan{Action: FollowupNone, Note: FollowupNoteNoPayment}},
	} {
		got, owed := PlanPaymentFollowup(tc.in)
		if owed != tc.owed || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tc.name, got, owed, tc.want, tc.owed)
		}
	}
}

func TestDecidePaymentFollowup(t *testing.T) {
	at := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	f := PaymentFollowup{FollowupID: "pfu_1", Action: FollowupRefund}
	if e := DecidePaymentFollowup(f, 1, at, FollowupResult{Unavailable: true}); e.Outcome != FollowupRetrying ||
		!e.NextAttemptAt.Equal(at.Add(FollowupRetryGaps[0])) || e.IdempotencyKey != PaymentFollowupKey("pfu_1") {
		t.Errorf("first unavailable: %+v", e)
	}
	if e := DecidePaymentFollowup(f, FollowupMaxAttempts, at, FollowupResult{Unavailable: true}); e.Outcome != FollowupGaveUp || e.NextAttemptAt != nil {
		t.Errorf("last unavailable: %+v", e)
	}
	if e := DecidePaymentFollowup(f, 1, at, FollowupResult{Refused: true}); e.Outcome != FollowupRefused || e.NextAttemptAt != nil {
		t.Errorf("refused: %+v", e)
	}
	if e := DecidePaymentFollowup(PaymentFollowup{Action: FollowupNone}, 1, at, FollowupResult{}); e.Outcome != FollowupSkipped {
		t.Errorf("none: %+v", e)
	}
	var total time.Duration
	for _, g := range FollowupRetryGaps {
		total += g
	}
	if total >= 24*time.Hour {
		t.Errorf("retries span %s; want within Stripe's 24 h idempotency window", total)
	}
}
