package gateways

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/internal/identity"
	"phonefleet/internal/releases"
	"phonefleet/projections"
)

// Gateways (issue 14): an organisation admin creates a one-time enrollment
// code (POST /v1/gateways/enrollment-codes), a gateway exchanges it,
// unauthenticated, for its tunnel credential (POST /gateway/v1/enroll),
// and the credential then authenticates the gateway (GET
// /gateway/v1/releases/current) until an admin revokes it (DELETE
// /v1/gateways/{gatewayId}). Codes and credentials exist in clear only in
// the answer that creates them; the streams hold the server hasher's HMAC
// of their secrets. Checking a credential reads the gateway's stream, not
// a read model, so a revocation takes effect at its commit.

// Config is what the gateway capability needs.
type Config struct {
	Store *eventstore.Store
	// Hasher hashes codes' and credentials' secrets (the API keys' hasher,
	// keyed by the server pepper).
	Hasher *identity.Hasher
	// Releases is the releases manifest (SERVICE_RELEASES_FILE); nil: none
	// configured, and every channel answers not_found.
	Releases *releases.File
	// Logger receives a warning when a changed releases manifest cannot be
	// taken; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means clock.Now. Tests inject one (expiry).
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the gateways
	// read model.
	ReadModels cqrs.ReadModels
}

// Gateways is the gateway capability. Each handler embeds it.
type Gateways struct {
	cfg      Config
	pool     *pgxpool.Pool
	codes    *eventstore.Repository[domain.GatewayEnrollmentCode, domain.Event]
	gateways *eventstore.Repository[domain.Gateway, domain.Event]
}

// gatewayCodeAggregate folds an enrollment code's stream.
var gatewayCodeAggregate = eventstore.Aggregate[domain.GatewayEnrollmentCode, domain.Event]{
	Stream: domain.GatewayCodeStream,
	Codec:  domain.Events,
	New:    func(string) domain.GatewayEnrollmentCode { return domain.GatewayEnrollmentCode{} },
	Apply:  func(c *domain.GatewayEnrollmentCode, e domain.Event, _ eventstore.Recorded) { c.Apply(e) },
	OrgID:  func(c *domain.GatewayEnrollmentCode) string { return c.OrgID },
}

// gatewayAggregate folds a gateway's stream.
var gatewayAggregate = eventstore.Aggregate[domain.Gateway, domain.Event]{
	Stream: domain.GatewayStream,
	Codec:  domain.Events,
	New:    func(string) domain.Gateway { return domain.Gateway{} },
	Apply:  func(g *domain.Gateway, e domain.Event, _ eventstore.Recorded) { g.Apply(e) },
	OrgID:  func(g *domain.Gateway) string { return g.OrgID },
}

// New returns the gateway capability.
func New(cfg Config) *Gateways {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Gateways{cfg: cfg, pool: cfg.Store.Pool(),
		codes:    eventstore.NewRepository(cfg.Store, gatewayCodeAggregate),
		gateways: eventstore.NewRepository(cfg.Store, gatewayAggregate)}
}

func (g *Gateways) now() time.Time { return g.cfg.Now().UTC().Truncate(time.Microsecond) }

func (g *Gateways) wait(ctx context.Context, c eventstore.Committed) error {
	return cqrs.Await(ctx, g.cfg.ReadModels, c.Last(), projections.GatewaysName)
}

// Handlers are the gateway capability's entry points of the
// application object.
type Handlers struct {
	// An admin's one-time enrollment code, its exchange for a gateway's
	// credential, and revocation.
	CreateGatewayEnrollmentCode cqrs.Handler[CreateGatewayEnrollmentCode, CreatedGatewayEnrollmentCode]
	EnrollGateway               cqrs.Handler[EnrollGateway, EnrolledGateway]
	RevokeGateway               cqrs.Handler[RevokeGateway, cqrs.Done]
	// RecordGatewayConnection is sent by the gateway hub and the orphaned
	// gateway sweep.
	RecordGatewayConnection cqrs.Handler[RecordGatewayConnection, bool]
	// GatewayRevoked is asked by the gateway hub of each tunnel it
	// serves, ListGatewaysRecordedServed by the orphaned-gateway sweep.
	GatewayRevoked             cqrs.Handler[GatewayRevoked, bool]
	ListGatewaysRecordedServed cqrs.Handler[ListGatewaysRecordedServed, []string]
	// The organisation's gateways (GET /v1/gateways), a gateway
	// credential's check, and the current release of a channel (GET
	// /gateway/v1/releases/current).
	ListGateways        cqrs.Handler[ListGateways, []projections.GatewayView]
	AuthenticateGateway cqrs.Handler[AuthenticateGateway, GatewayPrincipal]
	CurrentRelease      cqrs.Handler[CurrentRelease, releases.Release]
}

// Handlers returns the gateway capability's entry points, each behind d.
func (g *Gateways) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		CreateGatewayEnrollmentCode: cqrs.Serve(d, CreateGatewayEnrollmentCodeHandler{g}),
		EnrollGateway:               cqrs.Serve(d, EnrollGatewayHandler{g}),
		RevokeGateway:               cqrs.Serve(d, RevokeGatewayHandler{g}),
		RecordGatewayConnection:     cqrs.Serve(d, RecordGatewayConnectionHandler{g}),
		GatewayRevoked:              cqrs.Serve(d, GatewayRevokedHandler{g}),
		ListGatewaysRecordedServed:  cqrs.Serve(d, ListGatewaysRecordedServedHandler{g}),
		ListGateways:                cqrs.Serve(d, ListGatewaysHandler{g}),
		AuthenticateGateway:         cqrs.Serve(d, AuthenticateGatewayHandler{g}),
		CurrentRelease:              cqrs.Serve(d, CurrentReleaseHandler{g}),
	}
}

// requireGatewayAdmin lets only an organisation admin's signed-in session
// manage gateways: a member, an API key and an OAuth app answer
// permission_denied.
func requireGatewayAdmin(a domain.Auth) error {
	if err := a.RequireSession("gateways"); err != nil {
		return err
	}
	if a.Role != domain.RoleAdmin {
		return domain.Errorf(domain.CodePermissionDenied, "only an organisation admin may manage gateways")
	}
	return nil
}

// ---- List.

// ListGateways lists the organisation's gateways (GET /v1/gateways).
type ListGateways struct {
	Auth domain.Auth
}

// ListGatewaysHandler handles ListGateways.
type ListGatewaysHandler struct{ *Gateways }

// Handle answers ListGateways (admins only).
func (g ListGatewaysHandler) Handle(ctx context.Context, q ListGateways) ([]projections.GatewayView, error) {
	if err := requireGatewayAdmin(q.Auth); err != nil {
		return nil, err
	}
	return projections.ListGateways(ctx, g.pool, q.Auth.OrgID)
}

// ---- Authenticate.

// AuthenticateGateway checks a gateway credential (the bearer value a
// gateway sends on /gateway/v1).
type AuthenticateGateway struct {
	// Credential is the bearer value; empty when none was sent.
	Credential string
}

// GatewayPrincipal is the gateway a credential names.
type GatewayPrincipal struct {
	GatewayID string
	OrgID     string
	Name      string
}

// AuthenticateGatewayHandler handles AuthenticateGateway.
type AuthenticateGatewayHandler struct{ *Gateways }

// Handle answers AuthenticateGateway. No credential answers 401
// missing_credentials; one not shaped as a gateway credential,
// malformed_credentials; an unknown gateway or a wrong secret (one answer
// after the same work), invalid_token; a revoked gateway whose secret
// matched, revoked_key.
func (g AuthenticateGatewayHandler) Handle(ctx context.Context, q AuthenticateGateway) (GatewayPrincipal, error) {
	if q.Credential == "" {
		return GatewayPrincipal{}, domain.Unauthorized(domain.ReasonMissingCredentials,
			"send the gateway credential as Authorization: Bearer pfg_…")
	}
	id, secret, err := identity.ParseGatewayCredential(q.Credential)
	if err != nil {
		return GatewayPrincipal{}, domain.Unauthorized(domain.ReasonMalformedCredentials,
			"the bearer value is not a gateway credential (wrong prefix, length, characters or checksum)")
	}
	gw, _, err := g.gateways.Load(ctx, id)
	if err != nil {
		return GatewayPrincipal{}, err
	}
	want := g.cfg.Hasher.GatewayDummyHash()
	if gw.ID != "" {
		want = gw.CredentialHash
	}
	if subtle.ConstantTimeCompare(g.cfg.Hasher.Hash(secret), want) != 1 || gw.ID == "" {
		return GatewayPrincipal{}, domain.Unauthorized(domain.ReasonInvalidToken, "this gateway credential is not known")
	}
	if gw.State() == domain.GatewayStateRevoked {
		return GatewayPrincipal{}, domain.Unauthorized(domain.ReasonRevokedKey, "this gateway was revoked").
			With("hint", "a revoked gateway never works again; enroll it anew with a new enrollment code")
	}
	return GatewayPrincipal{GatewayID: gw.ID, OrgID: gw.OrgID, Name: gw.Name}, nil
}

// ---- Releases.

// CurrentRelease asks for the current release of a channel (GET
// /gateway/v1/releases/current).
type CurrentRelease struct {
	// Credential is the gateway's bearer value.
	Credential string
	// Channel is the channel asked for; empty means stable.
	Channel string
}

// DefaultReleaseChannel is the channel asked for when none is named.
const DefaultReleaseChannel = "stable"

// CurrentReleaseHandler handles CurrentRelease.
type CurrentReleaseHandler struct{ *Gateways }

// Handle answers the highest release of the channel in the
// manifest. It needs a gateway credential (401 as Authenticate); a
// malformed channel is invalid_argument; no manifest, or no release on the
// channel, is not_found.
func (g CurrentReleaseHandler) Handle(ctx context.Context, q CurrentRelease) (releases.Release, error) {
	if _, err := (AuthenticateGatewayHandler{g.Gateways}).Handle(ctx, AuthenticateGateway{Credential: q.Credential}); err != nil {
		return releases.Release{}, err
	}
	channel := q.Channel
	if channel == "" {
		channel = DefaultReleaseChannel
	}
	if !releases.ValidChannel(channel) {
		return releases.Release{}, domain.Errorf(domain.CodeInvalidArgument, "channel must match ^[a-z0-9-]{1,32}$").
			With("field", "channel")
	}
	if g.cfg.Releases == nil {
		return releases.Release{}, domain.NotFound("this deployment publishes no releases")
	}
	r, ok, err := g.cfg.Releases.Current(channel)
	if err != nil {
		g.cfg.Logger.Warn("releases manifest changed but is not valid; serving the previous one", "err", err)
	}
	if !ok {
		return releases.Release{}, domain.Errorf(domain.CodeNotFound, "no release on channel %s", channel).With("channel", channel)
	}
	return r, nil
}

// errGatewayNotFound is the answer for a gateway id that names none of
// the caller's gateways (unknown and another organisation's are one).
func errGatewayNotFound(id string) error {
	return domain.NotFound("no gateway " + id)
}
