package identity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"phonefleet/internal/identity"
	"phonefleet/internal/identity/identitytest"
)

func TestStepUp(t *testing.T) {
	p := identitytest.New(t)
	v := newVerifier(t, p, nil)
	ctx := context.Background()
	authTime := time.Now().Add(-3 * time.Minute).Truncate(time.Second)
	claims := func(sub string) map[string]any {
		c := p.Claims(audience, sub, "org_a", time.Now())
		c["azp"], c["auth_time"] = "console", authTime.Unix()
		return c
	}
	good := p.Sign(t, claims("user_1"))
	at, err := v.StepUp(ctx, good, "user_1")
	if err != nil || !at.Equal(authTime) {
		t.Fatalf("got %v, %v; want the token's auth_time %v", at, err, authTime)
	}

	noAuthTime := claims("user_1")
	delete(noAuthTime, "auth_time")
	otherAudience := claims("user_1")
	otherAudience["aud"] = "https://elsewhere.example/mcp"
	expired := claims("user_1")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	foreign := identitytest.New(t)
	for name, tok := range map[string]string{
		"another person":       good,
		"no auth_time":         p.Sign(t, noAuthTime),
		"another resource":     p.Sign(t, otherAudience),
		"expired":              p.Sign(t, expired),
		"another server's key": foreign.Sign(t, claims("user_1")),
		"not a token":          "step-up",
		"empty":                "",
	} {
		subject := "user_1"
		if name == "another person" {
			subject = "user_2"
		}
		if _, err := v.StepUp(ctx, tok, subject); !errors.Is(err, identity.ErrStepUpRefused) {
			t.Errorf("%s: got %v; want the token refused", name, err)
		}
	}

	// The wiring: an authenticator with OAuth gives its verifier's check;
	// one without gives none.
	if identity.StepUpVerifier(&identity.Authenticator{OAuth: v}) == nil {
		t.Error("an OAuth authenticator gave no step-up check")
	}
	if identity.StepUpVerifier(&identity.Authenticator{Mode: "local"}) != nil || identity.StepUpVerifier(nil) != nil {
		t.Error("an authenticator without OAuth gave a step-up check")
	}
}
