package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"phonefleet/domain"
)

// Reverification (ARCHITECTURE.md, "Provisioning"): where a deployment
// requires it, checkout asks for header x-service-step-up holding a token
// from the same authorization server, for the same subject, whose
// auth_time is at most 10 minutes old. The token is verified exactly as an
// access token is (signature against the published keys, allowed
// algorithms, issuer, this resource's audience, expiry), so a token minted
// for another resource or by another server never counts; the caller
// compares the time it returns with its own clock.

// stepUpClaims are the claims a step-up token is read for.
type stepUpClaims struct {
	jwt.RegisteredClaims
	// AuthTime is when the person last authenticated (OpenID Connect
	// Core 1.0, 2), in seconds since the epoch.
	AuthTime *jwt.NumericDate `json:"auth_time"`
}

// ErrStepUpRefused is wrapped by every refusal of a step-up token that is
// the token's fault (not verifiable, another subject, no auth_time).
var ErrStepUpRefused = errors.New("identity: step-up token refused")

// StepUp verifies a step-up token for subject and returns when the person
// authenticated (its auth_time). A token that does not verify, names
// another subject or carries no auth_time wraps ErrStepUpRefused; the
// authorization server's keys never fetched yet is 503
// service_unavailable (not the person's doing).
func (v *OAuthVerifier) StepUp(ctx context.Context, token, subject string) (time.Time, error) {
	var c stepUpClaims
	if _, err := v.parser.ParseWithClaims(token, &c, v.kf.KeyfuncCtx(ctx)); err != nil {
		if errors.Is(err, jwt.ErrTokenUnverifiable) && !v.loaded.Load() {
			return time.Time{}, unavailable("the authorization server's keys cannot be fetched", err)
		}
		return time.Time{}, fmt.Errorf("%w: %w", ErrStepUpRefused, err)
	}
	switch {
	case subject == "" || c.Subject != subject:
		return time.Time{}, fmt.Errorf("%w: it names another person", ErrStepUpRefused)
	case c.AuthTime == nil:
		return time.Time{}, fmt.Errorf("%w: it carries no auth_time", ErrStepUpRefused)
	}
	return c.AuthTime.UTC(), nil
}

// authenticator is what the wiring holds as its authenticator
// (httpapi.Authenticator, which this package cannot name).
type authenticator interface {
	Authenticate(r *http.Request) (domain.Auth, error)
}

// StepUpVerifier returns the reverification check of the deployment's
// authenticator (commands.ProvisioningConfig.StepUp): its OAuth verifier's
// StepUp, or nil when it verifies no OAuth tokens (then a deployment
// requiring reverification refuses every checkout of a person with
// reverification_required, and keys are never asked).
func StepUpVerifier(a authenticator) func(ctx context.Context, token, subject string) (time.Time, error) {
	auth, ok := a.(*Authenticator)
	if !ok || auth == nil || auth.OAuth == nil {
		return nil
	}
	return auth.OAuth.StepUp
}
