package domain

// This file holds the access rules every capability shares: tenancy (another
// organisation's resource answers exactly as a missing one), the kinds of
// credential a route admits, and the OAuth-app restrictions of spec 5.2.

// RunScopes are the scopes the run routes and run tools require together
// (spec 5.4): Require(RunScopes...).
var RunScopes = []Scope{ScopeRunsStart, ScopeDevicesAct}

// NotFound returns the one not_found answer. Tenancy depends on every
// refusal of a foreign id being built the same way as that of a missing id,
// so build both with the same call and the same message.
func NotFound(message string) *Error {
	return &Error{Code: CodeNotFound, Message: message}
}

// Owned is the tenancy guard every read of a single resource goes through.
// Give it what the load returned: the resource's organisation id and whether
// the load found anything. It returns nil only when the resource exists and
// belongs to a's organisation; otherwise it returns missing(), the very
// answer the caller gives for an id that names nothing, so the two cannot
// be told apart (spec 1, 7.2 not_found).
//
// Queries should filter by organisation themselves as well (WHERE org_id =
// $1 AND id = $2, with a.OrgID): then found is false for a foreign id and
// Owned is a second, independent check. Aggregates loaded from their event
// stream cannot filter and must use Owned.
func (a Auth) Owned(orgID string, found bool, missing func() *Error) error {
	if !found || orgID == "" || orgID != a.OrgID {
		return missing()
	}
	return nil
}

// OwnedDevice is Owned for device-scoped resources: the device must also lie
// within the credential's device subset (CanSeeDevice); a device outside it
// is answered exactly as a missing one (spec 5.1).
func (a Auth) OwnedDevice(orgID, deviceID string, found bool, missing func() *Error) error {
	if err := a.Owned(orgID, found, missing); err != nil {
		return err
	}
	if !a.CanSeeDevice(deviceID) {
		return missing()
	}
	return nil
}

// IsApp reports whether a is a third-party OAuth app's token (spec 5.2),
// whose surface is narrower than the console's.
func (a Auth) IsApp() bool { return a.Kind == PrincipalApp }

// IsSession reports whether a is a signed-in person's session: a console
// token (or a first-party client's), or local mode's operator, which stands
// for the one person of a local deployment.
func (a Auth) IsSession() bool {
	return a.Kind == PrincipalConsole || a.Kind == PrincipalLocalOperator
}

// RequireSession refuses every credential but a signed-in session with
// permission_denied naming what needs one. what names the capability
// ("API keys"). An OAuth app is told to use the console; an API key that
// keys are not managed with keys (spec 5.3.4).
func (a Auth) RequireSession(what string) error {
	switch {
	case a.IsSession():
		return nil
	case a.IsApp():
		return a.DenyApp(what, "the console")
	case a.Kind == PrincipalAPIKey:
		return Errorf(CodePermissionDenied, "%s need a signed-in session; an API key cannot use them", what)
	}
	return Errorf(CodePermissionDenied, "%s need a signed-in session", what)
}

// DenyApp returns permission_denied for an OAuth app's token, naming where
// to do it instead (spec 5.2), and nil for every other credential. Use it
// in a handler for a restriction finer than a route, e.g. a pay-as-you-go
// order on the checkout route: `if err := a.DenyApp("pay-as-you-go
// purchases", "the console"); err != nil { return err }`. Whole routes are
// restricted at the edge (httpapi's app gate), which refuses apps every
// route not on the spec 5.2 list.
func (a Auth) DenyApp(what, where string) error {
	if !a.IsApp() {
		return nil
	}
	return Errorf(CodePermissionDenied, "an OAuth app cannot use %s; do it in %s", what, where).With("where", where)
}
