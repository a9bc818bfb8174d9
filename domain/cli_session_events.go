package domain

import "time"

// cliSessionEvents are the events of CLI sign-in (/v1/cli-sessions): one
// stream per session (CLISessionStream), and one per user code
// (CLICodeStream) whose latest claim says which session a code names, so
// that two live sessions never share a code.
var cliSessionEvents = []EventDef{
	Def[CLISessionStarted](1, nil),
	Def[CLICodeClaimed](1, nil),
	Def[CLISessionApproved](1, nil),
	Def[CLISessionDenied](1, nil),
	Def[CLISessionDelivered](1, nil),
}

// CLISessionStarted records a CLI asking to be signed in. It is the first
// event of the session's stream and belongs to no organisation yet: the
// person who approves or denies it decides which. Only a hash of the poll
// token is recorded; the token itself exists only in the start answer.
type CLISessionStarted struct {
	SessionID string `json:"sessionId"`
	UserCode  string `json:"userCode"`
	// PollTokenHash is SHA-256 of the poll token (a 256-bit random
	// secret, so no pepper is needed to resist guessing).
	PollTokenHash []byte `json:"pollTokenHash"`
	// PublicKey is the CLI's X25519 public key (unpadded base64url): the
	// minted key's token is sealed to it at approval.
	PublicKey  string    `json:"publicKey"`
	ClientName string    `json:"clientName"`
	Host       string    `json:"host"`
	Scopes     []Scope   `json:"scopes"`
	StartedAt  time.Time `json:"startedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// EventName implements Event.
func (CLISessionStarted) EventName() string { return "cli_session.started" }

// CLICodeClaimed records that a user code names a session until ExpiresAt.
// It is appended to the code's stream in the same unit as the session's
// CLISessionStarted, at the version the claim was decided on, so a code is
// claimed by one live session at a time.
type CLICodeClaimed struct {
	UserCode  string    `json:"userCode"`
	SessionID string    `json:"sessionId"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// EventName implements Event.
func (CLICodeClaimed) EventName() string { return "cli_session.code_claimed" }

// CLISessionApproved records that a person approved the session: the API
// key minted for them (by the key commands, on the key's own stream) and
// its token sealed to the CLI's public key, which only the CLI can open.
// From here on the session belongs to OrgID.
type CLISessionApproved struct {
	SessionID string `json:"sessionId"`
	OrgID     string `json:"orgId"`
	// By is the approving person (their subject id), Role their
	// organisation role at the time.
	By    Actor  `json:"by"`
	Role  string `json:"role"`
	KeyID string `json:"keyId"`
	// Scopes are the scopes the minted key carries.
	Scopes     []Scope     `json:"scopes"`
	Sealed     SealedToken `json:"sealed"`
	ApprovedAt time.Time   `json:"approvedAt"`
}

// EventName implements Event.
func (CLISessionApproved) EventName() string { return "cli_session.approved" }

// CLISessionDenied records that a person refused the session. From here on
// the session belongs to OrgID.
type CLISessionDenied struct {
	SessionID string    `json:"sessionId"`
	OrgID     string    `json:"orgId"`
	By        Actor     `json:"by"`
	DeniedAt  time.Time `json:"deniedAt"`
}

// EventName implements Event.
func (CLISessionDenied) EventName() string { return "cli_session.denied" }

// CLISessionDelivered records that the CLI's poll received the sealed
// token: it is handed over once, and the session is consumed.
type CLISessionDelivered struct {
	SessionID   string    `json:"sessionId"`
	OrgID       string    `json:"orgId"`
	DeliveredAt time.Time `json:"deliveredAt"`
}

// EventName implements Event.
func (CLISessionDelivered) EventName() string { return "cli_session.delivered" }
