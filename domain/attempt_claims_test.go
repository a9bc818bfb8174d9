package domain

import (
	"testing"
	"time"
)

// TestAttemptAbandoned: an attempt with a claim is abandoned exactly when
// its claim is known free, at any age; one whose claim was not read counts
// as alive; one without a claim (recorded before claims) after
// CheckoutAbandonedAfter.
func TestAttemptAbandoned(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	held := ClaimsHeld{"attempt:live": true, "attempt:dead": false}
	for _, c := range []struct {
		name  string
		claim string
		held  ClaimsHeld
		age   time.Duration
		want  bool
	}{
		{"dead process, young attempt", "attempt:dead", held, time.Second, true},
		{"live process, old attempt", "attempt:live", held, time.Hour, false},
		{"claim not read", "attempt:other", held, time.Hour, false},
		{"nothing read", "attempt:dead", nil, time.Hour, false},
		{"no claim, young", "", held, CheckoutAbandonedAfter - time.Second, false},
		{"no claim, old", "", held, CheckoutAbandonedAfter, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := AttemptAbandoned(t0, c.claim, c.held, t0.Add(c.age)); got != c.want {
				t.Errorf("got abandoned %v; want %v", got, c.want)
			}
		})
	}
}

// TestUseKeyTakesOverADeadProcessAttempt: a repeat of a key whose running
// attempt's claim is free takes it over at once (KeyRetake); held, it is
// idempotency_conflict, retryable, however old; StartCheckout and
// PayableAttempts read the attempt the same way.
func TestUseKeyTakesOverADeadProcessAttempt(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var a Account
	a.Apply(CheckoutStarted{OrgID: "org_1", OrderID: "ord_1", IdempotencyKey: "k", RequestDigest: "d", At: t0,
		Claim: AttemptClaim("ord_1")}, 1)
	dead, live := ClaimsHeld{AttemptClaim("ord_1"): false}, ClaimsHeld{AttemptClaim("ord_1"): true}
	if o, use, err := a.UseKey("k", "d", t0.Add(time.Second), dead); err != nil || use != KeyRetake || o.OrderID != "ord_1" {
		t.Errorf("claim free: got %v, %v; want the attempt taken over", use, err)
	}
	if _, _, err := a.UseKey("k", "d", t0.Add(time.Hour), live); ErrorCode(err) != CodeIdempotencyConflict || !retryableOf(err) {
		t.Errorf("claim held: got %v; want idempotency_conflict, retryable", err)
	}
	if _, err := a.StartCheckout(CheckoutStarted{OrderID: "ord_2"}, t0.Add(time.Hour), live); ErrorCode(err) != CodeCheckoutInProgress {
		t.Errorf("new attempt beside a live one: got %v; want checkout_in_progress", err)
	}
	if _, err := a.StartCheckout(CheckoutStarted{OrderID: "ord_2"}, t0.Add(time.Second), dead); err != nil {
		t.Errorf("new attempt beside a dead one: %v", err)
	}
	if got := a.PayableAttempts("ord_2", t0.Add(time.Second), dead); len(got) != 1 || got[0].OrderID != "ord_1" {
		t.Errorf("payable attempts beside a dead one: %v; want ord_1 (its page may exist)", got)
	}
	if got := a.PayableAttempts("ord_2", t0.Add(time.Hour), live); len(got) != 0 {
		t.Errorf("payable attempts beside a live one: %v; want none", got)
	}
}
