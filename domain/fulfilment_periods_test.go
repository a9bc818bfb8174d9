package domain

import (
	"testing"
	"time"
)

// TestRecordPeriod: a live subscription phone records the provider's
// period when it is news (not older than the one recorded, not the same);
// its renewal is then the provider's period end, stepping on by months
// from it once passed unreported; a cancelled renewal ends with the
// period recorded; other phones record nothing.
func TestRecordPeriod(t *testing.T) {
	f := fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingSubscription)
	trialEnd := fulT0.Add(10 * 24 * time.Hour)
	first := FulfilmentPeriodRecorded{SubscriptionID: "sub_1", PeriodStart: fulT0, PeriodEnd: trialEnd, AsOf: fulT0}
	evs := f.RecordPeriod(first)
	if len(evs) != 1 || evs[0].(FulfilmentPeriodRecorded).FulfilmentID != "ful_1" {
		t.Fatalf("first period: got %v; want it recorded on ful_1", evs)
	}
	f.Apply(evs[0], 3)
	if got := f.PeriodEnd(fulT0.Add(time.Hour)); !got.Equal(trialEnd) {
		t.Errorf("renews at %s; want the provider's %s", got, trialEnd)
	}
	if got, want := f.PeriodEnd(trialEnd.Add(time.Hour)), trialEnd.AddDate(0, 1, 0); !got.Equal(want) {
		t.Errorf("past an unreported renewal: renews at %s; want %s", got, want)
	}
	if evs := f.RecordPeriod(first); len(evs) != 0 {
		t.Errorf("the same period again: got %v; want nothing", evs)
	}
	stale := FulfilmentPeriodRecorded{SubscriptionID: "sub_1", PeriodStart: fulT0, PeriodEnd: fulT0.AddDate(0, 1, 0), AsOf: fulT0.Add(-time.Minute)}
	if evs := f.RecordPeriod(stale); len(evs) != 0 {
		t.Errorf("an older report: got %v; want nothing", evs)
	}
	if evs := f.RecordPeriod(FulfilmentPeriodRecorded{PeriodStart: trialEnd, PeriodEnd: trialEnd, AsOf: fulT0.Add(time.Hour)}); len(evs) != 0 {
		t.Errorf("an empty period: got %v; want nothing", evs)
	}
	cancel, err := f.CancelRenewal(Actor{Kind: ActorUser, ID: "u"}, fulT0.Add(time.Hour))
	if err != nil || len(cancel) != 1 || !cancel[0].(FulfilmentRenewalCancelled).EndsAt.Equal(trialEnd) {
		t.Fatalf("cancel renewal: %v, %v; want it to end at %s", cancel, err, trialEnd)
	}
	f.Apply(cancel[0], 4)
	next := FulfilmentPeriodRecorded{SubscriptionID: "sub_1", PeriodStart: trialEnd, PeriodEnd: trialEnd.AddDate(0, 1, 0), AsOf: trialEnd}
	evs = f.RecordPeriod(next)
	if len(evs) != 1 {
		t.Fatalf("a renewal the provider billed anyway: got %v", evs)
	}
	f.Apply(evs[0], 5)
	if !f.EndsAt.Equal(next.PeriodEnd) {
		t.Errorf("ends at %s; want the period paid, %s", f.EndsAt, next.PeriodEnd)
	}

	for _, other := range []Fulfilment{fulfilmentIn(FulfilmentProvisionedState, SkuEmulator, BillingDay),
		fulfilmentIn(FulfilmentCancelledState, SkuEmulator, BillingSubscription)} {
		if evs := other.RecordPeriod(first); len(evs) != 0 {
			t.Errorf("%s %s: got %v; want nothing", other.Choice.Billing, other.State, evs)
		}
	}
}
