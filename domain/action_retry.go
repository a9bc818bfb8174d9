package domain

import "strconv"

// MaxActionAttempts bounds how many times one action may be performed
// under its idempotency key when each attempt had no effect (issue 29:
// an agent may retry an `unchanged` action under the same key, never a
// `changed` one).
const MaxActionAttempts = 5

// AttemptKey is the idempotency key attempt n of the action first
// requested under key is recorded under: key itself for the first,
// "key#n" after it. Each attempt is an action of its own with its own
// receipt, so the first receipt is never rewritten.
func AttemptKey(key string, n int) string {
	if n <= 1 {
		return key
	}
	return key + "#" + strconv.Itoa(n)
}

// AttemptKeys lists the keys every possible attempt of key is recorded
// under, first to last.
func AttemptKeys(key string) []string {
	keys := make([]string, 0, MaxActionAttempts)
	for n := 1; n <= MaxActionAttempts; n++ {
		keys = append(keys, AttemptKey(key, n))
	}
	return keys
}

// MayRetry says whether attempt n of an action, whose receipt is r, may
// be followed by another under the same key: it committed and the screen
// shows it had no effect, another attempt is allowed, and its key is a
// valid one. A changed, unknown, failed or unsettled action is never
// performed again.
func MayRetry(r Receipt, key string, n int) bool {
	return r.State == ReceiptCommitted && r.Effect != nil && r.Effect.State == EffectUnchanged &&
		n < MaxActionAttempts && CheckIdempotencyKey(AttemptKey(key, n+1)) == nil
}
