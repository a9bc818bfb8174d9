package domain

import (
	"testing"
	"time"
)

// TestFailedAttemptKeyUse: a final (not retryable) failure is its key's
// answer, replayed like a page and in conflict with another request; a
// retryable one frees the key; an event recorded before Final existed
// frees it too.
func TestFailedAttemptKeyUse(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		refusal *Error
		want    KeyUse
	}{
		{"final", Errorf(CodeCheckoutUnavailable, "the provider refused").WithRetryable(false), KeyReplay},
		{"retryable", Errorf(CodeCheckoutUnavailable, "the provider did not answer").WithRetryable(true), KeyUnused},
		{"no retryability", Errorf(CodeCheckoutUnavailable, "unknown"), KeyUnused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var a Account
			a.Apply(CheckoutStarted{OrgID: "org_1", OrderID: "ord_1", IdempotencyKey: "k", RequestDigest: "d", At: t0}, 1)
			evs := a.FailCheckout("ord_1", tt.refusal, "", t0)
			for i, e := range evs {
				a.Apply(e, int64(2+i))
			}
			o, use, err := a.UseKey("k", "d", t0.Add(time.Hour), nil)
			if err != nil || use != tt.want {
				t.Fatalf("got %v, %v; want %v", use, err, tt.want)
			}
			if use == KeyReplay {
				if o.FailedCode != CodeCheckoutUnavailable || o.FailedMessage != "the provider refused" {
					t.Errorf("got %+v; want the refusal recorded", o)
				}
				if _, _, err := a.UseKey("k", "other", t0.Add(time.Hour), nil); AsError(err).Code != CodeIdempotencyConflict {
					t.Errorf("another request: got %v; want idempotency_conflict", err)
				}
				if _, use, _ := a.UseKey("k", "d", t0.Add(CheckoutKeyWindow), nil); use != KeyUnused {
					t.Errorf("after 24 h: got %v; want the key free", use)
				}
			}
		})
	}
}
