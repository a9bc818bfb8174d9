package wire

import (
	"slices"
	"time"

	"phonefleet/commands/console"
	"phonefleet/domain"
)

// The shapes of CLI sign-in (/v1/cli-sessions). The service answers them
// and `phonefleet login` reads them (cmd/phonefleet/clisignin), so both sides
// share one definition. Times are written by domain.FormatWebhookTime.

// StartedCLISession is the answer to POST /v1/cli-sessions: what the CLI
// shows the person (the code and where to approve it) and keeps to poll
// with (the session id and its poll token, shown only here).
type StartedCLISession struct {
	SessionID string `json:"sessionId"`
	UserCode  string `json:"userCode"`
	// VerificationURL is the console's approval page for this code.
	VerificationURL string         `json:"verificationUrl"`
	PollToken       string         `json:"pollToken"`
	Scopes          []domain.Scope `json:"scopes"`
	ExpiresAt       string         `json:"expiresAt"`
	// Interval is how many seconds the CLI waits between polls.
	Interval int `json:"interval"`
}

// NewStartedCLISession returns s as the start route answers it, with the
// console's approval page under base ({base_url}).
func NewStartedCLISession(s console.StartedCLISession, base string) StartedCLISession {
	v := s.Session
	return StartedCLISession{SessionID: v.SessionID, UserCode: v.UserCode, VerificationURL: CLIVerificationURL(base, v.UserCode),
		PollToken: s.PollToken, Scopes: scopesOrEmpty(v.Scopes), ExpiresAt: domain.FormatWebhookTime(v.ExpiresAt),
		Interval: int(domain.CLIPollInterval / time.Second)}
}

// CLIVerificationURL is the console page that approves code:
// {base_url}/#/cli?code=BCDF-GHJK.
func CLIVerificationURL(base, code string) string {
	return base + "/#/cli?code=" + code
}

// CLISessionPoll is the answer to a poll (GET /v1/cli-sessions/{id}).
// KeyID, Scopes and SealedToken are present once: on the poll that hands
// the approved key over.
type CLISessionPoll struct {
	SessionID   string              `json:"sessionId"`
	State       string              `json:"state"`
	ExpiresAt   string              `json:"expiresAt"`
	Interval    int                 `json:"interval"`
	KeyID       string              `json:"keyId,omitempty"`
	Scopes      []domain.Scope      `json:"scopes,omitempty"`
	SealedToken *domain.SealedToken `json:"sealedToken,omitempty"`
}

// NewCLISessionPoll returns p as the poll route answers it.
func NewCLISessionPoll(p console.CLISessionPoll) CLISessionPoll {
	return CLISessionPoll{SessionID: p.SessionID, State: p.State, ExpiresAt: domain.FormatWebhookTime(p.ExpiresAt),
		Interval: int(domain.CLIPollInterval / time.Second), KeyID: p.KeyID, Scopes: p.Scopes, SealedToken: p.Sealed}
}

// CLISession is a CLI sign-in as the console shows it to the person
// deciding it (by code, approve, deny).
type CLISession struct {
	SessionID  string `json:"sessionId"`
	UserCode   string `json:"userCode"`
	State      string `json:"state"`
	ClientName string `json:"clientName"`
	Host       string `json:"host"`
	// KeyName is the name the approved key gets.
	KeyName string `json:"keyName"`
	// Scopes are those the CLI asked for; GrantableScopes those of them
	// the caller holds while the session is pending; GrantedScopes those
	// the approved key carries.
	Scopes          []domain.Scope       `json:"scopes"`
	GrantableScopes []domain.Scope       `json:"grantableScopes"`
	GrantedScopes   []domain.Scope       `json:"grantedScopes"`
	KeyID           *string              `json:"keyId"`
	CreatedAt       string               `json:"createdAt"`
	ExpiresAt       string               `json:"expiresAt"`
	DecidedBy       *domain.ReceiptActor `json:"decidedBy"`
	DecidedAt       *string              `json:"decidedAt"`
}

// NewCLISession returns v as the console's routes answer it.
func NewCLISession(v console.CLISessionView) CLISession {
	out := CLISession{SessionID: v.SessionID, UserCode: v.UserCode, State: v.State, ClientName: v.ClientName, Host: v.Host,
		KeyName: v.KeyName, Scopes: scopesOrEmpty(v.Scopes), GrantableScopes: scopesOrEmpty(v.Grantable),
		GrantedScopes: scopesOrEmpty(v.Granted), KeyID: scheduleOptional(v.KeyID), CreatedAt: domain.FormatWebhookTime(v.StartedAt),
		ExpiresAt: domain.FormatWebhookTime(v.ExpiresAt), DecidedAt: optionalTime(v.DecidedAt)}
	if v.DecidedBy != nil {
		by := v.DecidedBy.ForReceipt()
		out.DecidedBy = &by
	}
	return out
}

// scopesOrEmpty returns a copy of scopes, never nil, so a list is always
// a JSON array.
func scopesOrEmpty(scopes []domain.Scope) []domain.Scope {
	if scopes == nil {
		return []domain.Scope{}
	}
	return slices.Clone(scopes)
}
