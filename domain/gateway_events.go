package domain

import "time"

// gatewayEvents are the events of gateways (issue 14): a one-time
// enrollment code on its own stream (GatewayCodeStream), exchanged once for
// a gateway and its tunnel credential on the gateway's stream
// (GatewayStream), which a revocation ends. The gateway's stream also
// records each of its tunnels: welcomed by an instance of the service, and
// ended. Events carry only hashes of the code's and the credential's
// secrets, never the secrets.
var gatewayEvents = []EventDef{
	Def[GatewayEnrollmentCodeCreated](1, nil),
	Def[GatewayEnrollmentCodeUsed](1, nil),
	Def[GatewayEnrolled](1, nil),
	Def[GatewayRevoked](1, nil),
	Def[GatewayConnected](1, nil),
	Def[GatewayDisconnected](1, nil),
}

// GatewayEnrollmentCodeCreated records a one-time enrollment code an admin
// created. It is the first event of the code's stream.
type GatewayEnrollmentCodeCreated struct {
	CodeID string `json:"codeId"`
	OrgID  string `json:"orgId"`
	// Name is the name the gateway enrolled with it gets unless it names
	// itself.
	Name string `json:"name,omitempty"`
	// SecretHash is the server hasher's HMAC of the code's secret.
	SecretHash []byte    `json:"secretHash"`
	ExpiresAt  time.Time `json:"expiresAt"`
	CreatedBy  Actor     `json:"createdBy"`
	CreatedAt  time.Time `json:"createdAt"`
}

// EventName implements Event.
func (GatewayEnrollmentCodeCreated) EventName() string { return "gateway.enrollment_code_created" }

// GatewayEnrollmentCodeUsed records that a code was exchanged for gateway
// GatewayID; it commits with that gateway's GatewayEnrolled, so a code is
// used at most once.
type GatewayEnrollmentCodeUsed struct {
	CodeID    string    `json:"codeId"`
	GatewayID string    `json:"gatewayId"`
	UsedAt    time.Time `json:"usedAt"`
}

// EventName implements Event.
func (GatewayEnrollmentCodeUsed) EventName() string { return "gateway.enrollment_code_used" }

// GatewayEnrolled records a new gateway and the hash of its tunnel
// credential. It is the first event of the gateway's stream.
type GatewayEnrolled struct {
	GatewayID string `json:"gatewayId"`
	OrgID     string `json:"orgId"`
	Name      string `json:"name"`
	CodeID    string `json:"codeId"`
	// CredentialHash is the server hasher's HMAC of the credential's
	// secret.
	CredentialHash []byte `json:"credentialHash"`
	// Version is the phonefleet version the gateway reported, if any.
	Version    string    `json:"version,omitempty"`
	EnrolledAt time.Time `json:"enrolledAt"`
}

// EventName implements Event.
func (GatewayEnrolled) EventName() string { return "gateway.enrolled" }

// GatewayRevoked records that a gateway's credential no longer works.
type GatewayRevoked struct {
	GatewayID string    `json:"gatewayId"`
	RevokedBy Actor     `json:"revokedBy"`
	At        time.Time `json:"at"`
}

// EventName implements Event.
func (GatewayRevoked) EventName() string { return "gateway.revoked" }

// GatewayConnected records that an instance of the service welcomed a
// tunnel of the gateway: from then on it drives the gateway's devices.
type GatewayConnected struct {
	GatewayID string `json:"gatewayId"`
	// Instance names the serving process (its gateway claims' holder id,
	// as table gateway_hosts shows it).
	Instance string `json:"instance"`
	// Version is the phonefleet version the gateway runs, Channel the
	// release channel it follows, as its hello said (either may be empty).
	Version string `json:"version,omitempty"`
	Channel string `json:"channel,omitempty"`
	// Devices is how many devices the tunnel serves (those the gateway
	// reported, less any retired).
	Devices int       `json:"devices"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (GatewayConnected) EventName() string { return "gateway.connected" }

// GatewayDisconnected records that the tunnel a GatewayConnected recorded
// ended; Reason says why (GatewayReason…).
type GatewayDisconnected struct {
	GatewayID string `json:"gatewayId"`
	// Instance is the instance that served the tunnel (the
	// GatewayConnected's), which is not always the one recording its end.
	Instance string    `json:"instance"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (GatewayDisconnected) EventName() string { return "gateway.disconnected" }
