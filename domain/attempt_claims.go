package domain

import "time"

// Attempts that ask the payment provider for a page (a checkout attempt, a
// managed proxy order) run in one process of the service, between
// recording their start and recording their page or their failure. While
// it runs one, the process holds the attempt's claim: a session lock of the
// database named AttemptClaim(orderID), taken before the start is recorded
// and named on it (CheckoutStarted.Claim, ProxyOrderStarted.Claim), on a
// connection of its own. The claim lives as long as that connection, so as
// long as the process: one killed mid-attempt loses it at once. So a repeat
// of the attempt's Idempotency-Key knows whether the attempt is still
// being run (its claim is held: idempotency_conflict, retryable) or was
// abandoned (its claim is free: the repeat takes the claim, then the
// attempt, over), and two live processes never run one attempt. Attempts
// recorded before claims were taken (no Claim) are judged by their age,
// CheckoutAbandonedAfter, as they were.

// AttemptClaim names the claim of the attempt orderID.
func AttemptClaim(orderID string) string { return "attempt:" + orderID }

// ClaimsHeld says which attempt claims were held when it was read (the
// process running each attempt alive). A claim it does not know counts as
// held: an attempt never read about is never taken for dead.
type ClaimsHeld map[string]bool

// Held reports whether claim is held.
func (h ClaimsHeld) Held(claim string) bool {
	held, known := h[claim]
	return held || !known
}

// AttemptAbandoned reports whether a running attempt, started at startedAt
// under claim, was abandoned by its process at now: with a claim, exactly
// when the claim is no longer held, however young the attempt; without one
// (recorded before claims were taken), once it has run
// CheckoutAbandonedAfter. Checkout and managed proxy orders both decide
// with it.
func AttemptAbandoned(startedAt time.Time, claim string, held ClaimsHeld, now time.Time) bool {
	if claim == "" {
		return now.Sub(startedAt) >= CheckoutAbandonedAfter
	}
	return !held.Held(claim)
}

// ErrAttemptRunning is the answer to a repeat of an Idempotency-Key whose
// first attempt is still being run (spec 4.1, rule 3): 409
// idempotency_conflict, retryable.
func ErrAttemptRunning() *Error {
	return Errorf(CodeIdempotencyConflict,
		"the first attempt with this Idempotency-Key is still running; repeat the same request shortly to get its answer").WithRetryable(true)
}

// runningClaims lists the claims of the attempts running tells are still
// running (those recorded with one).
func runningClaims[T any](attempts []T, running func(T) (claim string, ok bool)) []string {
	var claims []string
	for _, a := range attempts {
		if claim, ok := running(a); ok && claim != "" {
			claims = append(claims, claim)
		}
	}
	return claims
}
