package domain

import (
	"errors"
	"time"
)

// Checkout's Idempotency-Key rules (spec 4.1), for every paid order that
// opens a hosted payment page: checkout's attempts (Account.UseKey) and
// managed proxy orders (ProxyAccount.UseOrderKey) decide and answer a key
// through what follows, so the two cannot drift apart.

// KeyAttempt is what the rules read of one earlier attempt made under an
// Idempotency-Key.
type KeyAttempt struct {
	// Key and Request are the digests of the key (DigestKey) and of the
	// request the attempt was made for.
	Key, Request string
	// At is when the attempt started.
	At time.Time
	// Running: the attempt has no outcome recorded yet; Abandoned: its
	// process is known gone (AttemptAbandoned), so it is taken over.
	Running, Abandoned bool
	// Freed: the attempt failed in a way a retry may cure (a refusal that
	// is not final): its key is free again.
	Freed bool
}

// Answers reports whether the attempt's recorded outcome is its key's
// answer: a page, or a final refusal.
func (k KeyAttempt) Answers() bool { return !k.Running && !k.Freed }

// HeldKey finds, among attempts (oldest first, n of them, read through
// attempt), the one holding key for a new request at now, and what it asks
// of the request: the newest attempt with the key started within
// CheckoutKeyWindow and not Freed. A different request under the key is
// idempotency_conflict, not retryable (what names the request: "purchase",
// "proxy order"); a repeat while the attempt runs is idempotency_conflict,
// retryable (repeating shortly gets the answer); an attempt Abandoned by
// its process is taken over (KeyRetake);
// any other is replayed (KeyReplay). i is -1 when no attempt holds the key.
func HeldKey(n int, attempt func(i int) KeyAttempt, key, request, what string, now time.Time) (i int, use KeyUse, err error) {
	if key == "" {
		return -1, KeyUnused, nil
	}
	for i := n - 1; i >= 0; i-- {
		k := attempt(i)
		if k.Key != key || k.Freed || now.Sub(k.At) >= CheckoutKeyWindow {
			continue
		}
		switch {
		case k.Request != request:
			return -1, KeyUnused, Errorf(CodeIdempotencyConflict,
				"this Idempotency-Key was used for a different %s in the last 24 hours; use a new key for a new %s", what, what).WithRetryable(false)
		case k.Running && !k.Abandoned:
			return -1, KeyUnused, ErrAttemptRunning()
		case k.Running:
			return i, KeyRetake, nil
		default:
			return i, KeyReplay, nil
		}
	}
	return -1, KeyUnused, nil
}

// IsFinal reports whether a refusal is final: not retryable, so an
// attempt failed with it keeps its key and answers it again for the key's
// window, as it would a page. A retryable one (the provider did not
// answer) frees the key: replaying it would make "retryable" untrue.
func IsFinal(refusal *Error) bool {
	return refusal.Retryable != nil && !*refusal.Retryable
}

// ErrKeyFreed answers a request taking an attempt over (KeyRetake) when
// another request taking it over failed it meanwhile in a way that freed
// its key: repeating the request starts another attempt.
func ErrKeyFreed() *Error {
	return Errorf(CodeIdempotencyConflict,
		"the first attempt ended without a payment page; repeat the request to start another").WithRetryable(true)
}

// replayedRefusal is an attempt's final refusal answered again to a repeat
// of its Idempotency-Key (spec 4.1, rule 1: a repeat returns the first
// attempt's answer, with Idempotent-Replayed). It renders as the refusal
// it wraps.
type replayedRefusal struct{ refusal *Error }

func (r replayedRefusal) Error() string { return r.refusal.Error() }
func (r replayedRefusal) Unwrap() error { return r.refusal }

// ReplayRefusal is a recorded final refusal answered again for its key:
// refusal (code, message and any field as first answered), not
// retryable, marked replayed (Replayed).
func ReplayRefusal(refusal *Error) error {
	return replayedRefusal{refusal.WithRetryable(false)}
}

// Replayed reports whether err is a refusal answered again for its
// Idempotency-Key (ReplayRefusal): the edge marks it Idempotent-Replayed,
// as it does a replayed page.
func Replayed(err error) bool {
	var r replayedRefusal
	return errors.As(err, &r)
}
