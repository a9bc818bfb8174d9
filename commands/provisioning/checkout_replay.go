package provisioning

import (
	"errors"

	"phonefleet/domain"
)

// replayedRefusal is a checkout attempt's final refusal answered again to a
// repeat of its Idempotency-Key (spec 4.1, rule 1: a repeat returns the
// first attempt's answer, with Idempotent-Replayed). It renders as the
// refusal it wraps.
type replayedRefusal struct{ refusal *domain.Error }

func (r replayedRefusal) Error() string { return r.refusal.Error() }
func (r replayedRefusal) Unwrap() error { return r.refusal }

// Replayed reports whether err is a refusal a checkout answered again for
// its Idempotency-Key: the edge marks it Idempotent-Replayed, as it does a
// replayed page (CheckoutAnswer.Replayed).
func Replayed(err error) bool {
	var r replayedRefusal
	return errors.As(err, &r)
}

// replayOf is a recorded attempt's answer to a repeat of its key: its page,
// or its final refusal (code and message as first answered, not
// retryable). The one refusal an attempt records with an extra field is
// wrong_state, whose state is always provisioned (ErrAlreadyProvisioned).
func replayOf(o domain.Order) (CheckoutAnswer, error) {
	if o.State == domain.OrderFailed {
		refusal := domain.Errorf(o.FailedCode, "%s", o.FailedMessage).WithRetryable(false)
		if o.FailedCode == domain.CodeWrongState {
			refusal = refusal.With("state", domain.FulfilmentProvisionedState)
		}
		return CheckoutAnswer{}, replayedRefusal{refusal}
	}
	return answerOf(o, true), nil
}
