package domain

// UnauthorizedReason says why a credential was refused (spec 2.3): the
// required `reason` of every 401.
type UnauthorizedReason string

// The ten reasons of a 401.
const (
	ReasonMissingCredentials   UnauthorizedReason = "missing_credentials"
	ReasonMalformedCredentials UnauthorizedReason = "malformed_credentials"
	ReasonInvalidToken         UnauthorizedReason = "invalid_token"
	ReasonTokenExpired         UnauthorizedReason = "token_expired"
	ReasonWrongAudience        UnauthorizedReason = "wrong_audience"
	ReasonMissingOrg           UnauthorizedReason = "missing_org"
	ReasonMissingOrgRole       UnauthorizedReason = "missing_org_role"
	ReasonUnknownKey           UnauthorizedReason = "unknown_key"
	ReasonRevokedKey           UnauthorizedReason = "revoked_key"
	ReasonExpiredKey           UnauthorizedReason = "expired_key"
)

// Unauthorized returns the 401 answer with its reason. Every reason but
// missing_credentials means a credential was presented and refused, which
// the bearer challenge reports as error="invalid_token".
func Unauthorized(reason UnauthorizedReason, message string) *Error {
	return (&Error{Code: CodeUnauthorized, Message: message}).With("reason", string(reason))
}

// CredentialPresented reports whether e refuses a credential that was
// presented (any unauthorized reason but missing_credentials).
func (e *Error) CredentialPresented() bool {
	if e == nil || e.Code != CodeUnauthorized {
		return false
	}
	r, _ := e.Extra["reason"].(string)
	return r != string(ReasonMissingCredentials)
}
