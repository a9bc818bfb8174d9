package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"phonefleet/domain"
	"phonefleet/internal/clock"
)

// AllowedAlgorithms are the JWS algorithms an access token may be signed
// with: asymmetric only, so a public key can never be used as an HMAC
// secret, and never "none".
var AllowedAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// OAuthConfig configures the OAuth 2.1 resource server.
type OAuthConfig struct {
	// Issuer is the authorization server; tokens' iss must equal it.
	Issuer string
	// JWKSURL is where the authorization server publishes its keys.
	JWKSURL string
	// Audience is the /mcp resource address ({base_url}/mcp); tokens' aud
	// must contain it.
	Audience string
	// FirstPartyClients lists client_id@issuer pairs whose tokens get the
	// console's surface (SERVICE_FIRST_PARTY_OAUTH_CLIENTS).
	FirstPartyClients []string
	// Roles answers app tokens' role questions; nil means the deployment
	// cannot ask (app tokens then get missing_org_role).
	Roles *RoleClient
	// HTTP fetches the key set; nil means a client with a 10 s timeout.
	HTTP *http.Client
	// RefreshInterval is how often the key set is fetched again; zero
	// means 15 minutes.
	RefreshInterval time.Duration
	// UnknownKIDRefresh is the least time between two fetches caused by
	// tokens naming a key id not in the set (so a flood of made-up key ids
	// costs the authorization server one request, not one per token); zero
	// means one minute.
	UnknownKIDRefresh time.Duration
	// Leeway tolerates clock skew on exp, nbf and iat; zero means 30 s.
	Leeway time.Duration
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
}

// OAuthVerifier verifies OAuth access tokens offline against the
// authorization server's published keys (JWKS, cached and refreshed) and
// resolves them to an authorization context (spec 5.2).
type OAuthVerifier struct {
	cfg    OAuthConfig
	kf     keyfunc.Keyfunc
	store  jwkset.Storage
	parser *jwt.Parser
	// loaded is set once a key set has been fetched; until then a token
	// cannot be checked, and the answer is 503, not 401.
	loaded atomic.Bool
}

// NewOAuthVerifier fetches the key set once (a failure is not fatal: the
// verifier answers 503 until a fetch succeeds) and keeps it fresh until ctx
// ends.
func NewOAuthVerifier(ctx context.Context, cfg OAuthConfig) (*OAuthVerifier, error) {
	if cfg.Issuer == "" || cfg.JWKSURL == "" || cfg.Audience == "" {
		return nil, errors.New("identity: OAuth needs an issuer, a JWKS URL and an audience")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 15 * time.Minute
	}
	if cfg.UnknownKIDRefresh <= 0 {
		cfg.UnknownKIDRefresh = time.Minute
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	v := &OAuthVerifier{cfg: cfg}
	remote, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    cfg.HTTP,
		Ctx:                       ctx,
		HTTPTimeout:               cfg.HTTP.Timeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           cfg.RefreshInterval,
		RefreshErrorHandler:       func(context.Context, error) {}, // the 503s report it
		Storage:                   &loadTracker{Storage: jwkset.NewMemoryStorage(), loaded: &v.loaded},
	})
	if err != nil {
		return nil, fmt.Errorf("identity: JWKS %s: %w", cfg.JWKSURL, err)
	}
	v.store, err = jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{cfg.JWKSURL: remote},
		// A token naming an unknown key id may refresh the set at most once
		// per UnknownKIDRefresh; the tiny wait makes every other such token
		// fail at once instead of queueing behind the limiter.
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDRefresh), 1),
		RateLimitWaitMax:  time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("identity: JWKS %s: %w", cfg.JWKSURL, err)
	}
	v.kf, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: v.store})
	if err != nil {
		return nil, err
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(AllowedAlgorithms),
		jwt.WithAudience(cfg.Audience),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
	)
	return v, nil
}

// loadTracker is the key set's storage; it notes the first successful fetch.
type loadTracker struct {
	jwkset.Storage
	loaded *atomic.Bool
}

// KeyReplaceAll stores a freshly fetched key set and notes that one was
// fetched.
func (l *loadTracker) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	err := l.Storage.KeyReplaceAll(ctx, given)
	if err == nil && len(given) > 0 {
		l.loaded.Store(true)
	}
	return err
}

// Issuer returns the authorization server tokens must come from.
func (v *OAuthVerifier) Issuer() string { return v.cfg.Issuer }

// Claims are the claims phonefleet reads from an access token
// (ARCHITECTURE.md, "Token claims").
type Claims struct {
	jwt.RegisteredClaims
	OrgID    string `json:"org_id"`
	OrgRole  string `json:"org_role"`
	AZP      string `json:"azp"`
	ClientID string `json:"client_id"`
	Scope    string `json:"scope"`
}

// Verify resolves an access token to its authorization context. Refusals
// are 401 with reason malformed_credentials (not a compact JWS),
// invalid_token (bad signature, algorithm, issuer, missing exp or sub,
// unknown key, no client, not a member), token_expired, wrong_audience,
// missing_org, missing_org_role; 503 service_unavailable when the key set
// has never been fetched or the identity provider cannot say an app
// token's role.
func (v *OAuthVerifier) Verify(ctx context.Context, token string) (domain.Auth, error) {
	if strings.Count(token, ".") != 2 {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMalformedCredentials,
			"the bearer value is neither an API key (pbk_…) nor a JWT access token")
	}
	var c Claims
	_, err := v.parser.ParseWithClaims(token, &c, v.kf.KeyfuncCtx(ctx))
	if err != nil {
		return domain.Auth{}, v.refusal(err, token)
	}
	if c.Subject == "" {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonInvalidToken, "the access token names no subject (sub)")
	}
	if c.OrgID == "" {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMissingOrg, "the access token names no organisation (org_id); sign in to an organisation")
	}
	a := domain.Auth{OrgID: c.OrgID, UserID: c.Subject, Instance: c.Issuer}
	switch {
	case c.AZP != "":
		a.Kind = domain.PrincipalConsole
		a.Role = c.OrgRole
		if !validRole(a.Role) {
			return domain.Auth{}, domain.Unauthorized(domain.ReasonMissingOrgRole, "the console token carries no organisation role (org_role)").
				With("hint", "sign in again so the token carries your role in the organisation")
		}
	case c.ClientID != "":
		a.ClientID = c.ClientID
		a.Kind = domain.PrincipalApp
		if slices.Contains(v.cfg.FirstPartyClients, c.ClientID+"@"+c.Issuer) {
			a.Kind = domain.PrincipalConsole
			a.Role = c.OrgRole
		}
		if !validRole(a.Role) {
			role, err := v.lookupRole(ctx, token, c)
			if err != nil {
				return domain.Auth{}, err
			}
			a.Role = role
		}
	default:
		return domain.Auth{}, domain.Unauthorized(domain.ReasonInvalidToken, "the access token names no client (azp or client_id)")
	}
	a.Scopes = scopesFor(a.Kind, a.Role, c.Scope)
	return a, nil
}

func validRole(r string) bool { return r == domain.RoleAdmin || r == domain.RoleMember }

// lookupRole asks the identity provider for the role of an OAuth-app
// token's person (spec 5.2.6–7).
func (v *OAuthVerifier) lookupRole(ctx context.Context, token string, c Claims) (string, error) {
	if v.cfg.Roles == nil || v.cfg.Roles.URL == "" {
		return "", domain.Unauthorized(domain.ReasonMissingOrgRole, "this token was issued to an OAuth app and carries no organisation role").
			With("hint", "this deployment cannot ask the identity provider for an OAuth app's role (SERVICE_OAUTH_ROLE_URL is not set); retrying does not help")
	}
	role, err := v.cfg.Roles.Role(ctx, token, c.Issuer, c.Subject, c.OrgID)
	if err != nil {
		return "", unavailable("the identity provider did not say this account's role in the organisation", err)
	}
	if role == "" {
		return "", domain.Unauthorized(domain.ReasonInvalidToken, "this account is not a member of the organisation the token names").
			With("hint", "the account is not a member of organisation "+c.OrgID+"; sign in again, choosing an organisation you belong to")
	}
	return role, nil
}

// refusal maps a parse or validation failure of token to its answer.
func (v *OAuthVerifier) refusal(err error, token string) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return domain.Unauthorized(domain.ReasonMalformedCredentials, "the access token is not a well-formed JWT")
	case errors.Is(err, jwt.ErrTokenUnverifiable) && !v.loaded.Load():
		return unavailable("the authorization server's keys cannot be fetched", err)
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return domain.Unauthorized(domain.ReasonInvalidToken, "the access token's signature cannot be verified with the authorization server's keys")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return domain.Unauthorized(domain.ReasonWrongAudience, "the access token is not meant for this resource; request a token with resource "+v.cfg.Audience)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return domain.Unauthorized(domain.ReasonInvalidToken, "the access token was issued by another authorization server")
	case errors.Is(err, jwt.ErrTokenExpired):
		return domain.Unauthorized(domain.ReasonTokenExpired, "the access token has expired; refresh it")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		// The signature verified; say which required claim is absent.
		var c jwt.MapClaims
		if _, _, perr := jwt.NewParser().ParseUnverified(token, &c); perr == nil {
			if _, ok := c["aud"]; !ok {
				return domain.Unauthorized(domain.ReasonWrongAudience, "the access token names no audience; request a token with resource "+v.cfg.Audience)
			}
			if _, ok := c["exp"]; !ok {
				return domain.Unauthorized(domain.ReasonInvalidToken, "the access token has no expiry (exp)")
			}
		}
	}
	return domain.Unauthorized(domain.ReasonInvalidToken, "the access token is not valid")
}

// Scope sets by kind of credential and role (spec 5.4).
var (
	sessionScopes = []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct, domain.ScopeDevicesLease,
		domain.ScopeRunsStart, domain.ScopeAppsRead, domain.ScopeAppsWrite}
	sessionAdminScopes = []domain.Scope{domain.ScopeOrdersPlace, domain.ScopeAppsDelete}
	appScopes          = []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct, domain.ScopeDevicesLease,
		domain.ScopeRunsStart}
	appAdminScopes = []domain.Scope{domain.ScopeOrdersPlace}
)

// scopesFor returns the scopes of a credential kind and role, narrowed by
// the token's scope claim when that claim names any of the eight scopes
// (the authorization server's own scopes, openid and the like, are
// ignored), in spec order.
func scopesFor(kind domain.PrincipalKind, role, claim string) []domain.Scope {
	base, admin := sessionScopes, sessionAdminScopes
	if kind == domain.PrincipalApp {
		base, admin = appScopes, appAdminScopes
	}
	held := slices.Clone(base)
	if role == domain.RoleAdmin {
		held = append(held, admin...)
	}
	var named []domain.Scope
	for _, s := range strings.Fields(claim) {
		if slices.Contains(domain.AllScopes, domain.Scope(s)) {
			named = append(named, domain.Scope(s))
		}
	}
	out := make([]domain.Scope, 0, len(held))
	for _, s := range domain.AllScopes {
		if slices.Contains(held, s) && (len(named) == 0 || slices.Contains(named, s)) {
			out = append(out, s)
		}
	}
	return out
}
