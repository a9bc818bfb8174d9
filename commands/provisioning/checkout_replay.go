package provisioning

import (
	"phonefleet/domain"
)

// replayOf is a recorded attempt's answer to a repeat of its key: its page,
// or its final refusal (code and message as first answered, not
// retryable, marked replayed: domain.ReplayRefusal). The one refusal an
// attempt records with an extra field is wrong_state, whose state is
// always provisioned (ErrAlreadyProvisioned).
func replayOf(o domain.Order) (CheckoutAnswer, error) {
	if o.State == domain.OrderFailed {
		refusal := domain.Errorf(o.FailedCode, "%s", o.FailedMessage)
		if o.FailedCode == domain.CodeWrongState {
			refusal = refusal.With("state", domain.FulfilmentProvisionedState)
		}
		return CheckoutAnswer{}, domain.ReplayRefusal(refusal)
	}
	return answerOf(o, true), nil
}
