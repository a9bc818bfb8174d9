package domain

import (
	"crypto/subtle"
	"time"
)

// Gateway identifiers (issue 14): a gateway is gw_<32 hex>, an enrollment
// code's id gwc_<32 hex>.
const (
	PrefixGateway     = "gw"
	PrefixGatewayCode = "gwc"
)

// Enrollment code lifetimes: TTLs outside these bounds are refused.
const (
	GatewayCodeMinTTL     = time.Minute
	GatewayCodeMaxTTL     = 24 * time.Hour
	GatewayCodeDefaultTTL = time.Hour
)

// GatewayCodeStream returns the stream of enrollment code id.
func GatewayCodeStream(id string) string { return "gwcode-" + id }

// GatewayStream returns the stream of gateway id.
func GatewayStream(id string) string { return "gateway-" + id }

// GatewayState is a gateway's lifecycle state.
const (
	GatewayStateActive  = "active"
	GatewayStateRevoked = "revoked"
)

// ErrGatewayCodeRefused is the one answer to an enrollment code that is
// malformed, forged, unknown, already used or expired: the answers do not
// tell these apart, so a caller learns nothing about which codes exist.
func ErrGatewayCodeRefused() *Error {
	return Unauthorized(ReasonInvalidToken, "this enrollment code is not valid; it may be mistyped, used or expired").
		With("hint", "an enrollment code works once and expires; ask an organisation admin for a new one")
}

// GatewayEnrollmentCode is a one-time enrollment code's state.
type GatewayEnrollmentCode struct {
	ID         string
	OrgID      string
	Name       string
	SecretHash []byte
	ExpiresAt  time.Time
	// GatewayID is the gateway it enrolled, once used.
	GatewayID string
}

// Apply folds one event of the code's stream.
func (c *GatewayEnrollmentCode) Apply(e Event) {
	switch e := e.(type) {
	case GatewayEnrollmentCodeCreated:
		c.ID, c.OrgID, c.Name, c.SecretHash, c.ExpiresAt = e.CodeID, e.OrgID, e.Name, e.SecretHash, e.ExpiresAt
	case GatewayEnrollmentCodeUsed:
		c.GatewayID = e.GatewayID
	}
}

// Redeem decides an exchange of the code whose secret hashes to mac at
// now: a code that does not exist, does not match, was used or has expired
// is refused with ErrGatewayCodeRefused. The hash comparison runs in
// constant time and runs also when the code does not exist (against
// dummy), so the work does not tell the cases apart.
func (c *GatewayEnrollmentCode) Redeem(mac, dummy []byte, gatewayID string, now time.Time) (GatewayEnrollmentCodeUsed, error) {
	want := dummy
	if c.ID != "" {
		want = c.SecretHash
	}
	match := subtle.ConstantTimeCompare(mac, want) == 1
	if c.ID == "" || !match || c.GatewayID != "" || !now.Before(c.ExpiresAt) {
		return GatewayEnrollmentCodeUsed{}, ErrGatewayCodeRefused()
	}
	return GatewayEnrollmentCodeUsed{CodeID: c.ID, GatewayID: gatewayID, UsedAt: now}, nil
}

// Gateway is an enrolled gateway's state.
type Gateway struct {
	ID             string
	OrgID          string
	Name           string
	CredentialHash []byte
	Version        string
	EnrolledAt     time.Time
	RevokedAt      time.Time
}

// Apply folds one event of the gateway's stream.
func (g *Gateway) Apply(e Event) {
	switch e := e.(type) {
	case GatewayEnrolled:
		g.ID, g.OrgID, g.Name, g.CredentialHash, g.Version, g.EnrolledAt = e.GatewayID, e.OrgID, e.Name, e.CredentialHash, e.Version, e.EnrolledAt
	case GatewayRevoked:
		g.RevokedAt = e.At
	}
}

// State is the gateway's lifecycle state.
func (g *Gateway) State() string {
	if !g.RevokedAt.IsZero() {
		return GatewayStateRevoked
	}
	return GatewayStateActive
}

// Revoke decides a revocation by by at now. Revoking a revoked gateway
// records nothing (the answer is the same).
func (g *Gateway) Revoke(by Actor, now time.Time) []Event {
	if g.State() == GatewayStateRevoked {
		return nil
	}
	return []Event{GatewayRevoked{GatewayID: g.ID, RevokedBy: by, At: now}}
}
