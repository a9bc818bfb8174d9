package identity

import (
	"context"
	"crypto/subtle"
	"slices"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/clock"
)

// KeyLookup reads one key of the key store by id (projections.APIKeyReader
// satisfies it).
type KeyLookup interface {
	Lookup(ctx context.Context, keyID string) (domain.APIKeyRecord, bool, error)
}

// KeyVerifier verifies API key tokens against the key store on every
// request, so a revoked or expired key is refused from its next request.
type KeyVerifier struct {
	Lookup KeyLookup
	Hasher *Hasher
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
}

// The answers of key verification. unknownKey is built fresh for each
// refusal but always the same, so an unknown key id and a wrong secret are
// byte-for-byte one answer.
func unknownKey() *domain.Error {
	return domain.Unauthorized(domain.ReasonUnknownKey, "this API key is not known; check that it was copied whole")
}

// Verify resolves token (a bearer value starting pbk_) to the key's
// authorization context. It answers 401 with reason malformed_credentials
// for a token that is not shaped as a key, unknown_key for an unknown key id
// or a wrong secret (the same answer after the same work: the HMAC is
// computed and compared in constant time against a dummy when the id is
// unknown), revoked_key and expired_key (each with a hint) for a key that
// matched but may no longer be used, and 503 service_unavailable when the
// key store cannot be read.
func (v *KeyVerifier) Verify(ctx context.Context, token string) (domain.Auth, error) {
	keyID, secret, err := ParseAPIKey(token)
	if err != nil {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMalformedCredentials,
			"the bearer value starts like an API key but is not one (wrong length, characters or checksum)")
	}
	rec, found, err := v.Lookup.Lookup(ctx, keyID)
	if err != nil {
		return domain.Auth{}, unavailable("the key store cannot be read now", err)
	}
	now := clock.Now()
	if v.Now != nil {
		now = v.Now()
	}
	mac := v.Hasher.Hash(secret)
	current, previous := v.Hasher.dummy, v.Hasher.dummy
	previousValid := false
	if found {
		current = rec.SecretHash
		if len(rec.PreviousHash) > 0 {
			previous = rec.PreviousHash
			previousValid = now.Before(rec.PreviousValidUntil)
		}
	}
	// Both comparisons always run, so the work does not depend on which
	// secret (or whether any) matched.
	matchCurrent := subtle.ConstantTimeCompare(mac, current)
	matchPrevious := subtle.ConstantTimeCompare(mac, previous)
	if !found || matchCurrent|(matchPrevious&boolInt(previousValid)) != 1 {
		return domain.Auth{}, unknownKey()
	}
	switch rec.State(now) {
	case domain.KeyStateRevoked:
		return domain.Auth{}, domain.Unauthorized(domain.ReasonRevokedKey, "this API key was revoked").
			With("hint", "a revoked key never works again; mint a new key in the console")
	case domain.KeyStateExpired:
		return domain.Auth{}, domain.Unauthorized(domain.ReasonExpiredKey, "this API key has expired").
			With("hint", "an expired key is never resurrected; mint a new key in the console")
	}
	return domain.Auth{
		OrgID:    rec.OrgID,
		Kind:     domain.PrincipalAPIKey,
		APIKeyID: rec.ID,
		Role:     rec.MintedByRole,
		Scopes:   slices.Clone(rec.Scopes),
		Devices:  slices.Clone(rec.DeviceIDs),
		Instance: rec.Instance,
	}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unavailable is the 503 of authentication infrastructure that cannot
// answer (spec 5.6.3): never a pass, never a 401, so a client keeps its
// credential and retries.
func unavailable(message string, cause error) *domain.Error {
	return domain.Errorf(domain.CodeServiceUnavailable, "%s; retry shortly", message).WithRetryable(true).Wrap(cause)
}
