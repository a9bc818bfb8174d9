package domain

import "time"

// identityEvents are the events of API keys and sign-in.
var identityEvents = []EventDef{
	Def[APIKeyMinted](1, nil),
	Def[APIKeyRotated](1, nil),
	Def[APIKeyRenewed](1, nil),
	Def[APIKeyNarrowed](1, nil),
	Def[APIKeyRevoked](1, nil),
	Def[OrganisationInstanceBound](1, nil),
}

// APIKeyMinted records a new organisation API key. Only an HMAC of its secret
// is recorded; the token itself exists only in the creation response.
type APIKeyMinted struct {
	KeyID string `json:"keyId"`
	OrgID string `json:"orgId"`
	Name  string `json:"name"`
	// Scopes are exactly the scopes the key carries.
	Scopes []Scope `json:"scopes"`
	// DeviceIDs narrows the key to these devices; null means every device
	// of the organisation.
	DeviceIDs []string `json:"deviceIds"`
	// MintedBy is the subject id of the person whose session minted the key,
	// and MintedByRole that person's organisation role at the time.
	MintedBy     string `json:"mintedBy"`
	MintedByRole string `json:"mintedByRole"`
	// Instance is the sign-in instance (token issuer) the organisation was
	// bound to when the key was minted; empty for keys minted in local mode.
	Instance   string    `json:"instance"`
	SecretHash []byte    `json:"secretHash"`
	MintedAt   time.Time `json:"mintedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// EventName implements Event.
func (APIKeyMinted) EventName() string { return "api_key.minted" }

// APIKeyRotated records a new secret for a key. The previous secret keeps
// working until PreviousValidUntil (the rotation grace window); a secret
// replaced earlier than that stops at once.
type APIKeyRotated struct {
	KeyID              string    `json:"keyId"`
	OrgID              string    `json:"orgId"`
	SecretHash         []byte    `json:"secretHash"`
	PreviousHash       []byte    `json:"previousHash"`
	PreviousValidUntil time.Time `json:"previousValidUntil"`
	RotatedAt          time.Time `json:"rotatedAt"`
	// Instance is the key's sign-in instance after the rotation: a key
	// minted before its organisation's instance was recorded takes the
	// rotating session's (spec 7.2 key_predates_instance_attribution).
	Instance string `json:"instance"`
}

// EventName implements Event.
func (APIKeyRotated) EventName() string { return "api_key.rotated" }

// APIKeyRenewed records a key's new expiry.
type APIKeyRenewed struct {
	KeyID     string    `json:"keyId"`
	OrgID     string    `json:"orgId"`
	ExpiresAt time.Time `json:"expiresAt"`
	RenewedAt time.Time `json:"renewedAt"`
}

// EventName implements Event.
func (APIKeyRenewed) EventName() string { return "api_key.renewed" }

// APIKeyNarrowed records a key's reduced scopes or device subset. Both
// fields carry the full resulting sets (DeviceIDs null: every device).
type APIKeyNarrowed struct {
	KeyID      string    `json:"keyId"`
	OrgID      string    `json:"orgId"`
	Scopes     []Scope   `json:"scopes"`
	DeviceIDs  []string  `json:"deviceIds"`
	NarrowedAt time.Time `json:"narrowedAt"`
}

// EventName implements Event.
func (APIKeyNarrowed) EventName() string { return "api_key.narrowed" }

// APIKeyRevoked records that a key is refused from its next request on.
type APIKeyRevoked struct {
	KeyID     string    `json:"keyId"`
	OrgID     string    `json:"orgId"`
	RevokedAt time.Time `json:"revokedAt"`
}

// EventName implements Event.
func (APIKeyRevoked) EventName() string { return "api_key.revoked" }

// OrganisationInstanceBound records the sign-in instance (the issuer of the
// OAuth tokens) an organisation belongs to. It is recorded once, by the
// organisation's first signed-in request, and never changes.
type OrganisationInstanceBound struct {
	OrgID   string    `json:"orgId"`
	Issuer  string    `json:"issuer"`
	BoundAt time.Time `json:"boundAt"`
}

// EventName implements Event.
func (OrganisationInstanceBound) EventName() string { return "organisation.instance_bound" }
