package domain

import (
	"context"
	"errors"
	"time"
)

// StepUp verifies an x-service-step-up token for a subject and returns
// when the person proved their identity. An error with code
// service_unavailable means the check cannot be made now.
type StepUp func(ctx context.Context, token, subject string) (time.Time, error)

// Reverify asks a person for an identity check within the last
// ReverificationMaxAge where the deployment requires one (spec 4.1.3, 7.2,
// 8: purchases and managed-proxy financial actions); API keys are never
// asked. what names the action in the refusal ("this purchase"). A check
// that cannot be made now is, like every reason the deployment cannot sell
// now, checkout_unavailable (retryable): not the person's doing.
func Reverify(ctx context.Context, required bool, check StepUp, a Auth, token, what string, now time.Time) error {
	if !required || a.Kind == PrincipalAPIKey {
		return nil
	}
	if token == "" || check == nil {
		return ErrReverificationRequired(what + " needs an identity check within the last 10 minutes: sign in again and send the token as x-service-step-up")
	}
	at, err := check(ctx, token, a.UserID)
	if err != nil {
		var de *Error
		if errors.As(err, &de) && de.Code == CodeServiceUnavailable {
			return Errorf(CodeCheckoutUnavailable, "the identity check cannot be verified now; nothing was charged, try again").
				WithRetryable(true).Wrap(err)
		}
		return ErrReverificationRequired("the x-service-step-up token is not a valid identity check for this person; sign in again").Wrap(err)
	}
	if now.Sub(at) > ReverificationMaxAge || at.Sub(now) > time.Minute {
		return ErrReverificationRequired("the identity check is older than 10 minutes; sign in again and send the new token as x-service-step-up")
	}
	return nil
}
