package domain

import (
	"context"
	"slices"
)

// Scope is one of the eight permissions a credential may hold (spec 5.4).
type Scope string

// The eight scopes.
const (
	ScopeDevicesRead  Scope = "devices:read"
	ScopeDevicesAct   Scope = "devices:act"
	ScopeDevicesLease Scope = "devices:lease"
	ScopeRunsStart    Scope = "runs:start"
	ScopeOrdersPlace  Scope = "orders:place"
	ScopeAppsRead     Scope = "apps:read"
	ScopeAppsWrite    Scope = "apps:write"
	ScopeAppsDelete   Scope = "apps:delete"
)

// AllScopes lists the eight scopes in spec order.
var AllScopes = []Scope{ScopeDevicesRead, ScopeDevicesAct, ScopeDevicesLease, ScopeRunsStart,
	ScopeOrdersPlace, ScopeAppsRead, ScopeAppsWrite, ScopeAppsDelete}

// PrincipalKind says what kind of caller an authorization context is for.
type PrincipalKind string

// Principal kinds.
const (
	// PrincipalConsole is a person signed in through the console (or a
	// first-party OAuth client): the console's surface.
	PrincipalConsole PrincipalKind = "console"
	// PrincipalApp is a person acting through a third-party OAuth app: the
	// narrower app surface of spec 5.2.
	PrincipalApp PrincipalKind = "app"
	// PrincipalAPIKey is an organisation API key.
	PrincipalAPIKey PrincipalKind = "api_key"
	// PrincipalLocalOperator is local mode's single operator (spec 5.7).
	PrincipalLocalOperator PrincipalKind = "local_operator"
)

// Roles of a person in an organisation.
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Auth is the one authorization context every request to /v1 and /mcp
// resolves to. Nothing downstream branches on how it was obtained, except
// key management (which needs an OAuth session).
type Auth struct {
	OrgID string
	Kind  PrincipalKind
	// UserID is the person's subject id (console, app and local operator).
	UserID string
	// APIKeyID is set for API keys only; a key's actions are attributed to it.
	APIKeyID string
	// ClientID is the OAuth app's client id (apps only).
	ClientID string
	// Role is admin or member (the local operator is admin).
	Role   string
	Scopes []Scope
	// Devices, when not nil, narrows the credential to these device ids; a
	// device outside it is answered exactly as a missing one.
	Devices []string
	// Instance is the sign-in instance the credential belongs to: the
	// issuer of an OAuth token, the instance recorded on an API key; empty
	// in local mode.
	Instance string
	// RunID is set for a run acting on its device (the device surface and
	// the built-in executor): the run holds the lease, its starter is the
	// actor of its actions.
	RunID string
}

// Has reports whether a holds scope s.
func (a Auth) Has(s Scope) bool { return slices.Contains(a.Scopes, s) }

// Require returns permission_denied naming the first missing scope.
func (a Auth) Require(scopes ...Scope) error {
	for _, s := range scopes {
		if !a.Has(s) {
			return Errorf(CodePermissionDenied, "this credential lacks scope %s", s).With("scope", string(s))
		}
	}
	return nil
}

// CanSeeDevice reports whether the credential's device subset admits id.
func (a Auth) CanSeeDevice(id string) bool {
	return a.Devices == nil || slices.Contains(a.Devices, id)
}

// Actor returns the (kind, id) recorded in event metadata and receipts: a
// key's id for API keys, the person's id otherwise.
func (a Auth) Actor() (kind, id string) {
	if a.Kind == PrincipalAPIKey {
		return "api_key", a.APIKeyID
	}
	return "user", a.UserID
}

type authKey struct{}

// WithAuth returns ctx carrying a.
func WithAuth(ctx context.Context, a Auth) context.Context {
	return context.WithValue(ctx, authKey{}, a)
}

// AuthFrom returns the authorization context of ctx.
func AuthFrom(ctx context.Context) (Auth, bool) {
	a, ok := ctx.Value(authKey{}).(Auth)
	return a, ok
}

// LocalOperator is local mode's unauthenticated operator: admin, every scope.
func LocalOperator(orgID string) Auth {
	return Auth{OrgID: orgID, Kind: PrincipalLocalOperator, UserID: "local-operator", Role: RoleAdmin,
		Scopes: slices.Clone(AllScopes)}
}
