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
	// GatewayID is the gateway it enrolled, once used, and UsedAt when.
	GatewayID string
	UsedAt    time.Time
}

// GatewayEnrollAgainWindow is how long after an enrollment code was used
// the same code may be exchanged again for the same credential, while the
// gateway has never connected: the first answer may have been lost.
const GatewayEnrollAgainWindow = 10 * time.Minute

// Apply folds one event of the code's stream.
func (c *GatewayEnrollmentCode) Apply(e Event) {
	switch e := e.(type) {
	case GatewayEnrollmentCodeCreated:
		c.ID, c.OrgID, c.Name, c.SecretHash, c.ExpiresAt = e.CodeID, e.OrgID, e.Name, e.SecretHash, e.ExpiresAt
	case GatewayEnrollmentCodeUsed:
		c.GatewayID, c.UsedAt = e.GatewayID, e.UsedAt
	}
}

// Redeem decides an exchange of the code whose secret hashes to mac at
// now: a code that does not exist, does not match, or has expired is
// refused with ErrGatewayCodeRefused; so is a used one, except within
// GatewayEnrollAgainWindow of its use, when again is true and the caller
// answers the gateway it enrolled (if that gateway never connected and
// was not revoked). The hash comparison runs in constant time and runs
// also when the code does not exist (against dummy), so the work does not
// tell the cases apart.
func (c *GatewayEnrollmentCode) Redeem(mac, dummy []byte, gatewayID string, now time.Time) (used GatewayEnrollmentCodeUsed, again bool, err error) {
	want := dummy
	if c.ID != "" {
		want = c.SecretHash
	}
	match := subtle.ConstantTimeCompare(mac, want) == 1
	switch {
	case c.ID == "" || !match:
		return GatewayEnrollmentCodeUsed{}, false, ErrGatewayCodeRefused()
	case c.GatewayID != "":
		if now.Before(c.UsedAt.Add(GatewayEnrollAgainWindow)) {
			return GatewayEnrollmentCodeUsed{}, true, nil
		}
		return GatewayEnrollmentCodeUsed{}, false, ErrGatewayCodeRefused()
	case !now.Before(c.ExpiresAt):
		return GatewayEnrollmentCodeUsed{}, false, ErrGatewayCodeRefused()
	}
	return GatewayEnrollmentCodeUsed{CodeID: c.ID, GatewayID: gatewayID, UsedAt: now}, false, nil
}

// Why a gateway's tunnel ended (GatewayDisconnected.Reason).
const (
	// GatewayReasonClosedByGateway: the gateway closed the tunnel.
	GatewayReasonClosedByGateway = "closed_by_gateway"
	// GatewayReasonHeartbeatLost: the gateway answered no ping twice.
	GatewayReasonHeartbeatLost = "heartbeat_lost"
	// GatewayReasonConnectionLost: the connection broke without a close
	// from either end, or the gateway broke the protocol.
	GatewayReasonConnectionLost = "connection_lost"
	// GatewayReasonRevoked: the gateway was revoked.
	GatewayReasonRevoked = "revoked"
	// GatewayReasonReplaced: the gateway opened a new tunnel to the same
	// instance, which closed this one.
	GatewayReasonReplaced = "replaced"
	// GatewayReasonShuttingDown: the serving instance shut down.
	GatewayReasonShuttingDown = "shutting_down"
	// GatewayReasonClaimLost: the serving instance lost the gateway's
	// claim (its database connection).
	GatewayReasonClaimLost = "claim_lost"
	// GatewayReasonInstanceLost: the serving instance is gone; another one
	// found the gateway unserved and recorded the end.
	GatewayReasonInstanceLost = "instance_lost"
	// GatewayReasonSuperseded: a new tunnel was recorded while the end of
	// an earlier one was not (its instance could not record it).
	GatewayReasonSuperseded = "superseded"
)

// Gateway is an enrolled gateway's state.
type Gateway struct {
	ID             string
	OrgID          string
	Name           string
	CredentialHash []byte
	// Version is the version the gateway reported when it enrolled, then
	// the one it reported on its latest connection.
	Version    string
	EnrolledAt time.Time
	RevokedAt  time.Time
	// Instance is the instance serving the gateway's tunnel, as recorded:
	// empty while none is (ConnectedAt is zero then).
	Instance    string
	ConnectedAt time.Time
	// EverConnected: a tunnel of the gateway was recorded once.
	EverConnected bool
}

// Apply folds one event of the gateway's stream.
func (g *Gateway) Apply(e Event) {
	switch e := e.(type) {
	case GatewayEnrolled:
		g.ID, g.OrgID, g.Name, g.CredentialHash, g.Version, g.EnrolledAt = e.GatewayID, e.OrgID, e.Name, e.CredentialHash, e.Version, e.EnrolledAt
	case GatewayRevoked:
		g.RevokedAt = e.At
	case GatewayConnected:
		g.Instance, g.ConnectedAt, g.EverConnected = e.Instance, e.At, true
		if e.Version != "" {
			g.Version = e.Version
		}
	case GatewayDisconnected:
		g.Instance, g.ConnectedAt = "", time.Time{}
	}
}

// Connected reports whether the stream records a tunnel of the gateway
// that has not ended.
func (g *Gateway) Connected() bool { return g.Instance != "" }

// Connect decides recording c, a tunnel of the enrolled gateway that
// c.Instance welcomed, at now. A tunnel recorded as open is ended first
// (GatewayReasonSuperseded): whoever welcomes a tunnel holds the
// gateway's claim, so the earlier one is no longer served.
func (g *Gateway) Connect(c GatewayConnected, now time.Time) []Event {
	var evs []Event
	if g.Connected() {
		evs = append(evs, GatewayDisconnected{GatewayID: g.ID, Instance: g.Instance, Reason: GatewayReasonSuperseded, At: now})
	}
	c.GatewayID, c.At = g.ID, now
	return append(evs, c)
}

// Disconnect decides recording the end of the enrolled gateway's tunnel
// served by instance, for reason, at now; an empty instance ends
// whichever tunnel is recorded. It records nothing when no tunnel is
// recorded as open, or when the open one is another instance's (a newer
// tunnel, recorded since).
func (g *Gateway) Disconnect(instance, reason string, now time.Time) []Event {
	if !g.Connected() || (instance != "" && instance != g.Instance) {
		return nil
	}
	return []Event{GatewayDisconnected{GatewayID: g.ID, Instance: g.Instance, Reason: reason, At: now}}
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
