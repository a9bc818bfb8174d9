package identity_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/identity"
)

func TestKeyVerification(t *testing.T) {
	e := newKeyEnv(t)
	ctx := context.Background()
	dev := domain.NewID(domain.PrefixDevice)
	tok := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, 24*time.Hour)
	narrow := e.mint(t, []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct}, []string{dev}, 24*time.Hour)

	t.Run("valid key", func(t *testing.T) {
		a, err := e.verifier.Verify(ctx, tok.Token)
		if err != nil {
			t.Fatal(err)
		}
		want := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: tok.KeyID, Role: domain.RoleAdmin,
			Scopes: []domain.Scope{domain.ScopeDevicesRead}, Instance: "https://issuer.example"}
		if !reflect.DeepEqual(a, want) {
			t.Fatalf("got %+v; want %+v", a, want)
		}
		if a.Devices != nil || !a.CanSeeDevice(dev) {
			t.Fatalf("got devices %v; want nil (every device)", a.Devices)
		}
	})
	t.Run("device subset", func(t *testing.T) {
		a, err := e.verifier.Verify(ctx, narrow.Token)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Devices, []string{dev}) || a.CanSeeDevice(domain.NewID(domain.PrefixDevice)) {
			t.Fatalf("got devices %v; want only %s", a.Devices, dev)
		}
	})

	wrongSecret, err := identity.NewSecretFor(tok.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := identity.NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("unknown id and wrong secret are one answer", func(t *testing.T) {
		_, errWrong := e.verifier.Verify(ctx, wrongSecret.Token)
		_, errUnknown := e.verifier.Verify(ctx, unknown.Token)
		w := wantRefusal(t, errWrong, domain.CodeUnauthorized, domain.ReasonUnknownKey)
		u := wantRefusal(t, errUnknown, domain.CodeUnauthorized, domain.ReasonUnknownKey)
		if w.Message != u.Message || !reflect.DeepEqual(w.Extra, u.Extra) || w.Retryable != u.Retryable {
			t.Fatalf("got %+v and %+v; want identical answers", w, u)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		for _, s := range []string{"pbk_", "pbk_a_b_c", "pbk_" + strings.Repeat("é", 40), "pbk_" + strings.Repeat("a", 10<<10)} {
			_, err := e.verifier.Verify(ctx, s)
			wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonMalformedCredentials)
		}
	})
}

func TestKeyRotationGraceBoundary(t *testing.T) {
	e := newKeyEnv(t)
	ctx := context.Background()
	old := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, 30*24*time.Hour)
	fresh, err := identity.NewSecretFor(old.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	grace := 24 * time.Hour
	rotatedAt := e.clock.Now()
	e.record(t, old.KeyID, domain.APIKeyRotated{KeyID: old.KeyID, OrgID: "org_a", SecretHash: e.hasher.Hash(fresh.Secret),
		PreviousHash: e.hasher.Hash(old.Secret), PreviousValidUntil: rotatedAt.Add(grace), RotatedAt: rotatedAt,
		Instance: "https://issuer.example"})
	tests := []struct {
		name    string
		at      time.Duration // after the rotation
		oldOK   bool
		freshOK bool
	}{
		{"just rotated", 0, true, true},
		{"one nanosecond before the end of grace", grace - time.Nanosecond, true, true},
		{"at the end of grace", grace, false, true},
		{"after grace", grace + time.Hour, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.clock.Set(rotatedAt.Add(tt.at))
			_, errOld := e.verifier.Verify(ctx, old.Token)
			_, errFresh := e.verifier.Verify(ctx, fresh.Token)
			if (errOld == nil) != tt.oldOK {
				t.Fatalf("old secret: got %v; want accepted=%v", errOld, tt.oldOK)
			}
			if !tt.oldOK {
				wantRefusal(t, errOld, domain.CodeUnauthorized, domain.ReasonUnknownKey)
			}
			if (errFresh == nil) != tt.freshOK {
				t.Fatalf("new secret: got %v; want accepted=%v", errFresh, tt.freshOK)
			}
		})
	}
}

func TestKeyRevokedAndExpired(t *testing.T) {
	e := newKeyEnv(t)
	ctx := context.Background()
	tok := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, time.Hour)
	if _, err := e.verifier.Verify(ctx, tok.Token); err != nil {
		t.Fatal(err)
	}
	t.Run("expired", func(t *testing.T) {
		e.clock.Advance(time.Hour)
		defer e.clock.Advance(-time.Hour)
		_, err := e.verifier.Verify(ctx, tok.Token)
		if de := wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonExpiredKey); de.Extra["hint"] == nil {
			t.Fatal("got no hint; want one")
		}
	})
	t.Run("revoked is refused from its next request", func(t *testing.T) {
		e.record(t, tok.KeyID, domain.APIKeyRevoked{KeyID: tok.KeyID, OrgID: "org_a", RevokedAt: e.clock.Now()})
		_, err := e.verifier.Verify(ctx, tok.Token)
		if de := wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonRevokedKey); de.Extra["hint"] == nil {
			t.Fatal("got no hint; want one")
		}
	})
	t.Run("a wrong secret of a revoked key reveals nothing", func(t *testing.T) {
		wrong, _ := identity.NewSecretFor(tok.KeyID)
		_, err := e.verifier.Verify(ctx, wrong.Token)
		wantRefusal(t, err, domain.CodeUnauthorized, domain.ReasonUnknownKey)
	})
}

func TestKeyStoreDownIs503(t *testing.T) {
	e := newKeyEnv(t)
	tok := e.mint(t, []domain.Scope{domain.ScopeDevicesRead}, nil, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.verifier.Verify(ctx, tok.Token)
	wantRefusal(t, err, domain.CodeServiceUnavailable, "")
}
