package domain

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// PrefixAPIKey is the type prefix of an API key's id (key_<32 hex>). The
// token of that key is pbk_<the same 32 hex>_<secret>.
const PrefixAPIKey = "key"

// Limits of API keys.
const (
	// MaxAPIKeyNameLen bounds a key's name, in characters.
	MaxAPIKeyNameLen = 100
	// DefaultAPIKeyLifetime is a key's lifetime when the minting or renewing
	// request names none.
	DefaultAPIKeyLifetime = 90 * 24 * time.Hour
	// MaxAPIKeyLifetime bounds how far ahead a key's expiry may be set.
	MaxAPIKeyLifetime = 365 * 24 * time.Hour
	// MaxAPIKeyDevices bounds a key's device subset.
	MaxAPIKeyDevices = 1000
)

// API key states as reported by the key record.
const (
	KeyStateActive  = "active"
	KeyStateExpired = "expired"
	KeyStateRevoked = "revoked"
)

// APIKeyStream returns the event stream of key id.
func APIKeyStream(keyID string) string { return "apikey-" + keyID }

// APIKey is the aggregate of one organisation API key: the state its events
// build, and the command methods that decide the next events. It never sees
// a secret, only HMACs of secrets.
type APIKey struct {
	ID                 string
	OrgID              string
	Name               string
	Scopes             []Scope
	DeviceIDs          []string
	MintedBy           string
	MintedByRole       string
	Instance           string
	SecretHash         []byte
	PreviousHash       []byte
	PreviousValidUntil time.Time
	MintedAt           time.Time
	ExpiresAt          time.Time
	RevokedAt          time.Time
	// Version is the stream version the state was built to.
	Version int64
}

// Apply changes the key's state by one of its events; it is the only place
// the state changes.
func (k *APIKey) Apply(e Event) {
	k.Version++
	switch e := e.(type) {
	case APIKeyMinted:
		*k = APIKey{ID: e.KeyID, OrgID: e.OrgID, Name: e.Name, Scopes: e.Scopes, DeviceIDs: e.DeviceIDs,
			MintedBy: e.MintedBy, MintedByRole: e.MintedByRole, Instance: e.Instance, SecretHash: e.SecretHash,
			MintedAt: e.MintedAt, ExpiresAt: e.ExpiresAt, Version: k.Version}
	case APIKeyRotated:
		k.SecretHash, k.PreviousHash, k.PreviousValidUntil = e.SecretHash, e.PreviousHash, e.PreviousValidUntil
		k.Instance = e.Instance
	case APIKeyRenewed:
		k.ExpiresAt = e.ExpiresAt
	case APIKeyNarrowed:
		k.Scopes, k.DeviceIDs = e.Scopes, e.DeviceIDs
	case APIKeyRevoked:
		k.RevokedAt = e.RevokedAt
	}
}

// Exists reports whether the key was ever minted.
func (k APIKey) Exists() bool { return k.ID != "" }

// State returns active, expired or revoked at now. Revocation wins over expiry.
func (k APIKey) State(now time.Time) string {
	switch {
	case !k.RevokedAt.IsZero():
		return KeyStateRevoked
	case !now.Before(k.ExpiresAt):
		return KeyStateExpired
	}
	return KeyStateActive
}

// ManageableBy reports whether a may read, rotate, renew, narrow and revoke
// the key: an admin any key of the organisation, a member the keys they
// minted (spec 5.3.4). It does not check the kind of credential; see
// Auth.RequireSession.
func (k APIKey) ManageableBy(a Auth) bool {
	return a.OrgID == k.OrgID && (a.Role == RoleAdmin || a.UserID == k.MintedBy)
}

// APIKeyNotFound is the one answer for a key id that is unknown, another
// organisation's, or not the caller's to manage.
func APIKeyNotFound() *Error {
	return NotFound("no API key with this id is yours to manage")
}

// MintAPIKeyInput is what a session asks of a new key.
type MintAPIKeyInput struct {
	KeyID      string
	Name       string
	Scopes     []Scope
	DeviceIDs  []string // nil: every device
	Lifetime   time.Duration
	SecretHash []byte
	// Instance is the organisation's sign-in instance ("" in local mode).
	Instance string
}

// MintAPIKey decides the event minting a key for the session a. The scopes
// must be a subset of a's (spec 5.3.4); the call fails with
// invalid_argument for a malformed request and permission_denied for scopes
// the session does not hold or a caller that is not a session.
func MintAPIKey(a Auth, in MintAPIKeyInput, now time.Time) (APIKeyMinted, error) {
	if err := a.RequireSession("API keys"); err != nil {
		return APIKeyMinted{}, err
	}
	if utf8.RuneCountInString(in.Name) > MaxAPIKeyNameLen || !utf8.ValidString(in.Name) {
		return APIKeyMinted{}, Errorf(CodeInvalidArgument, "name must be valid text of at most %d characters", MaxAPIKeyNameLen).With("field", "name")
	}
	scopes, err := checkScopes(in.Scopes)
	if err != nil {
		return APIKeyMinted{}, err
	}
	for _, s := range scopes {
		if !a.Has(s) {
			return APIKeyMinted{}, Errorf(CodePermissionDenied, "a key never carries more than the session that mints it; this session lacks scope %s", s).With("scope", string(s))
		}
	}
	devices, err := checkDevices(in.DeviceIDs)
	if err != nil {
		return APIKeyMinted{}, err
	}
	expires, err := expiryOf(in.Lifetime, now)
	if err != nil {
		return APIKeyMinted{}, err
	}
	if len(in.SecretHash) == 0 || !HasPrefix(in.KeyID, PrefixAPIKey) {
		return APIKeyMinted{}, fmt.Errorf("mint api key: no key id or secret hash")
	}
	return APIKeyMinted{KeyID: in.KeyID, OrgID: a.OrgID, Name: in.Name, Scopes: scopes, DeviceIDs: devices,
		MintedBy: a.UserID, MintedByRole: a.Role, Instance: in.Instance, SecretHash: in.SecretHash,
		MintedAt: now, ExpiresAt: expires}, nil
}

// Rotate decides the event giving the key a new secret. The current secret
// keeps working for grace after now; a revoked or expired key cannot be
// rotated (400 invalid_argument with state): an expired key is never resurrected. A key
// without a sign-in instance takes the rotating session's.
func (k APIKey) Rotate(a Auth, newHash []byte, grace time.Duration, now time.Time) (APIKeyRotated, error) {
	if err := k.manage(a, now); err != nil {
		return APIKeyRotated{}, err
	}
	instance := k.Instance
	if instance == "" {
		instance = a.Instance
	}
	return APIKeyRotated{KeyID: k.ID, OrgID: k.OrgID, SecretHash: newHash, PreviousHash: k.SecretHash,
		PreviousValidUntil: now.Add(grace), RotatedAt: now, Instance: instance}, nil
}

// Renew decides the event setting the key's expiry to now+lifetime (the
// default lifetime when zero). An expired or revoked key is not renewed.
func (k APIKey) Renew(a Auth, lifetime time.Duration, now time.Time) (APIKeyRenewed, error) {
	if err := k.manage(a, now); err != nil {
		return APIKeyRenewed{}, err
	}
	expires, err := expiryOf(lifetime, now)
	if err != nil {
		return APIKeyRenewed{}, err
	}
	return APIKeyRenewed{KeyID: k.ID, OrgID: k.OrgID, ExpiresAt: expires, RenewedAt: now}, nil
}

// Narrow decides the event reducing the key's scopes and/or device subset.
// A nil argument leaves that part unchanged. Narrowing never widens: new
// scopes must be a non-empty subset of the key's, and a new device subset
// must lie within the current one (any subset narrows a key that had every
// device).
func (k APIKey) Narrow(a Auth, scopes []Scope, devices []string, now time.Time) (APIKeyNarrowed, error) {
	if err := k.manage(a, now); err != nil {
		return APIKeyNarrowed{}, err
	}
	if scopes == nil && devices == nil {
		return APIKeyNarrowed{}, Errorf(CodeInvalidArgument, "name scopes, deviceIds or both to narrow the key to")
	}
	ev := APIKeyNarrowed{KeyID: k.ID, OrgID: k.OrgID, Scopes: k.Scopes, DeviceIDs: k.DeviceIDs, NarrowedAt: now}
	if scopes != nil {
		checked, err := checkScopes(scopes)
		if err != nil {
			return APIKeyNarrowed{}, err
		}
		for _, s := range checked {
			if !slices.Contains(k.Scopes, s) {
				return APIKeyNarrowed{}, Errorf(CodeInvalidArgument, "narrowing cannot add scope %s, which the key does not carry", s).With("field", "scopes")
			}
		}
		ev.Scopes = checked
	}
	if devices != nil {
		checked, err := checkDevices(devices)
		if err != nil {
			return APIKeyNarrowed{}, err
		}
		if len(checked) == 0 {
			return APIKeyNarrowed{}, Errorf(CodeInvalidArgument, "deviceIds must name at least one device; revoke the key to stop it").With("field", "deviceIds")
		}
		if k.DeviceIDs != nil {
			for _, d := range checked {
				if !slices.Contains(k.DeviceIDs, d) {
					return APIKeyNarrowed{}, Errorf(CodeInvalidArgument, "narrowing cannot add device %s, which the key cannot reach", d).With("field", "deviceIds")
				}
			}
		}
		ev.DeviceIDs = checked
	}
	return ev, nil
}

// Revoke decides the event revoking the key. Revoking a revoked key decides
// nothing (ok false) and is not an error, so a repeated DELETE succeeds.
func (k APIKey) Revoke(a Auth, now time.Time) (ev APIKeyRevoked, ok bool, err error) {
	if !k.Exists() || !k.ManageableBy(a) {
		return APIKeyRevoked{}, false, APIKeyNotFound()
	}
	if !k.RevokedAt.IsZero() {
		return APIKeyRevoked{}, false, nil
	}
	return APIKeyRevoked{KeyID: k.ID, OrgID: k.OrgID, RevokedAt: now}, true, nil
}

// manage checks that a may change the key now: the key exists and is a's to
// manage (else not_found), and is neither revoked nor expired (else
// invalid_argument naming the state; wrong_state is the order code of spec
// 7.2).
func (k APIKey) manage(a Auth, now time.Time) error {
	if !k.Exists() || !k.ManageableBy(a) {
		return APIKeyNotFound()
	}
	switch st := k.State(now); st {
	case KeyStateRevoked:
		return Errorf(CodeInvalidArgument, "this key is revoked; mint a new key").With("state", st).WithRetryable(false)
	case KeyStateExpired:
		return Errorf(CodeInvalidArgument, "this key has expired and is never resurrected; mint a new key").With("state", st).WithRetryable(false)
	}
	return nil
}

// checkScopes returns scopes without duplicates, in spec order, refusing an
// empty list and names that are not one of the eight scopes.
func checkScopes(scopes []Scope) ([]Scope, error) {
	if len(scopes) == 0 {
		return nil, Errorf(CodeInvalidArgument, "scopes must name at least one scope").With("field", "scopes")
	}
	var out []Scope
	for _, s := range scopes {
		if !slices.Contains(AllScopes, s) {
			return nil, Errorf(CodeInvalidArgument, "%q is not a scope; scopes are %v", s, AllScopes).With("field", "scopes")
		}
	}
	for _, s := range AllScopes {
		if slices.Contains(scopes, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// checkDevices returns the sorted, de-duplicated device ids, refusing ids
// that are not shaped as device ids. nil stays nil (every device).
func checkDevices(ids []string) ([]string, error) {
	if ids == nil {
		return nil, nil
	}
	if len(ids) > MaxAPIKeyDevices {
		return nil, Errorf(CodeInvalidArgument, "deviceIds may name at most %d devices", MaxAPIKeyDevices).With("field", "deviceIds")
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !HasPrefix(id, PrefixDevice) {
			return nil, Errorf(CodeInvalidArgument, "%q is not a device id", clipText(id, 80)).With("field", "deviceIds")
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func expiryOf(lifetime time.Duration, now time.Time) (time.Time, error) {
	if lifetime == 0 {
		lifetime = DefaultAPIKeyLifetime
	}
	if lifetime < time.Minute || lifetime > MaxAPIKeyLifetime {
		return time.Time{}, Errorf(CodeInvalidArgument, "a key's lifetime must be between 1 minute and %d days", int(MaxAPIKeyLifetime/(24*time.Hour))).With("field", "expiresInDays")
	}
	return now.Add(lifetime), nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// APIKeyRecord is one API key as the key store (the api_keys read model)
// holds it: what verifying a presented key and listing keys read.
type APIKeyRecord struct {
	ID           string
	OrgID        string
	Name         string
	Scopes       []Scope
	DeviceIDs    []string // nil: every device
	MintedBy     string
	MintedByRole string
	Instance     string
	SecretHash   []byte
	PreviousHash []byte
	// PreviousValidUntil is when the secret replaced by the last rotation
	// stops working (zero when never rotated).
	PreviousValidUntil time.Time
	MintedAt           time.Time
	ExpiresAt          time.Time
	RotatedAt          time.Time
	RenewedAt          time.Time
	NarrowedAt         time.Time
	RevokedAt          time.Time
}

// State returns active, expired or revoked at now.
func (k APIKeyRecord) State(now time.Time) string {
	switch {
	case !k.RevokedAt.IsZero():
		return KeyStateRevoked
	case !now.Before(k.ExpiresAt):
		return KeyStateExpired
	}
	return KeyStateActive
}
