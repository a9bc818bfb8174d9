package gateways

import (
	"context"
	"phonefleet/commands/cqrs"
	"strings"
	"time"
	"unicode/utf8"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
)

// ---- Create an enrollment code.

// CreateGatewayEnrollmentCode creates a one-time enrollment code (POST
// /v1/gateways/enrollment-codes).
type CreateGatewayEnrollmentCode struct {
	Auth domain.Auth
	// Name names the gateway enrolled with the code unless it names
	// itself; optional.
	Name string
	// TTL is how long the code works; zero means
	// domain.GatewayCodeDefaultTTL.
	TTL time.Duration
}

// CreatedGatewayEnrollmentCode is a new code: Code exists only here.
type CreatedGatewayEnrollmentCode struct {
	CodeID    string
	Code      string
	ExpiresAt time.Time
}

// CreateGatewayEnrollmentCodeHandler handles CreateGatewayEnrollmentCode.
type CreateGatewayEnrollmentCodeHandler struct {
	*Gateways
}

// maxGatewayName bounds a gateway's name, in characters.
const maxGatewayName = 100

func gatewayName(name, field string) (string, error) {
	name = strings.TrimSpace(name)
	if utf8.RuneCountInString(name) > maxGatewayName || !utf8.ValidString(name) {
		return "", domain.Errorf(domain.CodeInvalidArgument, "%s must be at most %d characters", field, maxGatewayName).With("field", field)
	}
	return name, nil
}

// Handle records gateway.enrollment_code_created (admins only). A TTL
// outside one minute to a day, or a name over 100 characters, is
// invalid_argument naming the field.
func (h CreateGatewayEnrollmentCodeHandler) Handle(ctx context.Context, cmd CreateGatewayEnrollmentCode) (CreatedGatewayEnrollmentCode, error) {
	if err := requireGatewayAdmin(cmd.Auth); err != nil {
		return CreatedGatewayEnrollmentCode{}, err
	}
	ttl := cmd.TTL
	if ttl == 0 {
		ttl = domain.GatewayCodeDefaultTTL
	}
	if ttl < domain.GatewayCodeMinTTL || ttl > domain.GatewayCodeMaxTTL {
		return CreatedGatewayEnrollmentCode{}, domain.Errorf(domain.CodeInvalidArgument,
			"ttlSeconds must be between %d and %d", int(domain.GatewayCodeMinTTL.Seconds()), int(domain.GatewayCodeMaxTTL.Seconds())).
			With("field", "ttlSeconds")
	}
	name, err := gatewayName(cmd.Name, "name")
	if err != nil {
		return CreatedGatewayEnrollmentCode{}, err
	}
	tok, err := identity.NewGatewayCode()
	if err != nil {
		return CreatedGatewayEnrollmentCode{}, err
	}
	now := h.now()
	created := domain.GatewayEnrollmentCodeCreated{CodeID: tok.ID, OrgID: cmd.Auth.OrgID, Name: name,
		SecretHash: h.cfg.Hasher.Hash(tok.Secret), ExpiresAt: now.Add(ttl), CreatedBy: domain.ActorOf(cmd.Auth), CreatedAt: now}
	evs, err := eventstore.Encode(domain.Events, cmd.Auth.OrgID, domain.Event(created))
	if err != nil {
		return CreatedGatewayEnrollmentCode{}, err
	}
	u := &eventstore.Unit{}
	if _, err := h.cfg.Store.Commit(ctx, u.Append(domain.GatewayCodeStream(tok.ID), eventstore.NoStream, evs...)); err != nil {
		return CreatedGatewayEnrollmentCode{}, err
	}
	return CreatedGatewayEnrollmentCode{CodeID: tok.ID, Code: tok.Token, ExpiresAt: created.ExpiresAt}, nil
}

// ---- Enroll.

// EnrollGateway exchanges an enrollment code for a gateway and its tunnel
// credential (POST /gateway/v1/enroll, unauthenticated).
type EnrollGateway struct {
	Code string
	// Name names the gateway; empty takes the code's name, else
	// "gateway".
	Name string
	// Version is the phonefleet version the gateway runs; optional.
	Version string
}

// EnrolledGateway is a new gateway: Credential exists only here.
type EnrolledGateway struct {
	GatewayID  string
	OrgID      string
	Name       string
	Credential string
}

// EnrollGatewayHandler handles EnrollGateway.
type EnrollGatewayHandler struct {
	*Gateways
}

// maxGatewayVersion bounds the version a gateway reports.
const maxGatewayVersion = 64

// Handle records gateway.enrollment_code_used on the code's stream and
// gateway.enrolled on the new gateway's in one unit, at the code's version:
// of two exchanges of one code, one commits and the other finds it used. A
// malformed, forged, unknown, used or expired code is one answer, 401
// unauthorized (domain.ErrGatewayCodeRefused).
func (h EnrollGatewayHandler) Handle(ctx context.Context, cmd EnrollGateway) (EnrolledGateway, error) {
	codeID, secret, err := identity.ParseGatewayCode(strings.TrimSpace(cmd.Code))
	if err != nil {
		h.cfg.Hasher.Hash(cmd.Code) // the same work as a well-formed code
		return EnrolledGateway{}, domain.ErrGatewayCodeRefused()
	}
	name, err := gatewayName(cmd.Name, "name")
	if err != nil {
		return EnrolledGateway{}, err
	}
	if len(cmd.Version) > maxGatewayVersion {
		return EnrolledGateway{}, domain.Errorf(domain.CodeInvalidArgument, "version must be at most %d bytes", maxGatewayVersion).
			With("field", "version")
	}
	cred, err := h.cfg.Hasher.GatewayCredentialFor(domain.NewID(domain.PrefixGateway), secret)
	if err != nil {
		return EnrolledGateway{}, err
	}
	mac := h.cfg.Hasher.Hash(secret)
	var enrolled domain.GatewayEnrolled
	var againFor string
	_, c, err := h.codes.UpdateWith(ctx, codeID, func(code *domain.GatewayEnrollmentCode, u *eventstore.Unit) ([]domain.Event, error) {
		now := h.now()
		used, again, err := code.Redeem(mac, h.cfg.Hasher.GatewayDummyHash(), cred.ID, now)
		if err != nil || again {
			againFor = code.GatewayID
			return nil, err
		}
		n := name
		if n == "" {
			n = code.Name
		}
		if n == "" {
			n = "gateway"
		}
		enrolled = domain.GatewayEnrolled{GatewayID: cred.ID, OrgID: code.OrgID, Name: n, CodeID: code.ID,
			CredentialHash: h.cfg.Hasher.Hash(cred.Secret), Version: cmd.Version, EnrolledAt: now}
		first, err := eventstore.Encode(domain.Events, code.OrgID, domain.Event(enrolled))
		if err != nil {
			return nil, err
		}
		u.Append(domain.GatewayStream(cred.ID), eventstore.NoStream, first...)
		return []domain.Event{used}, nil
	})
	if err != nil {
		return EnrolledGateway{}, err
	}
	if againFor != "" {
		return h.again(ctx, againFor, secret)
	}
	if err := h.wait(ctx, c); err != nil {
		return EnrolledGateway{}, err
	}
	return EnrolledGateway{GatewayID: cred.ID, OrgID: enrolled.OrgID, Name: enrolled.Name, Credential: cred.Token}, nil
}

// again answers an exchange of a code already used, within
// domain.GatewayEnrollAgainWindow: the gateway it enrolled with the same
// credential, since the first answer may never have arrived — unless that
// gateway has connected since (the answer did arrive) or was revoked, which
// is refused like any used code.
func (h EnrollGatewayHandler) again(ctx context.Context, gatewayID, codeSecret string) (EnrolledGateway, error) {
	g, _, err := h.gateways.Load(ctx, gatewayID)
	if err != nil {
		return EnrolledGateway{}, err
	}
	if g.ID == "" || g.EverConnected || !g.RevokedAt.IsZero() {
		return EnrolledGateway{}, domain.ErrGatewayCodeRefused()
	}
	cred, err := h.cfg.Hasher.GatewayCredentialFor(g.ID, codeSecret)
	if err != nil {
		return EnrolledGateway{}, err
	}
	// The credential is checked on the gateway's stream
	// (AuthenticateGateway), which holds it already: nothing to wait for.
	return EnrolledGateway{GatewayID: g.ID, OrgID: g.OrgID, Name: g.Name, Credential: cred.Token}, nil
}

// ---- Revoke.

// RevokeGateway revokes a gateway's credential (DELETE
// /v1/gateways/{gatewayId}).
type RevokeGateway struct {
	Auth      domain.Auth
	GatewayID string
}

// RevokeGatewayHandler handles RevokeGateway.
type RevokeGatewayHandler struct {
	*Gateways
}

// Handle records gateway.revoked (admins only) and waits for the gateways
// read model. Another organisation's gateway answers like a missing one,
// not_found; revoking a revoked gateway records nothing and succeeds.
func (h RevokeGatewayHandler) Handle(ctx context.Context, cmd RevokeGateway) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h RevokeGatewayHandler) handle(ctx context.Context, cmd RevokeGateway) error {
	if err := requireGatewayAdmin(cmd.Auth); err != nil {
		return err
	}
	if !domain.HasPrefix(cmd.GatewayID, domain.PrefixGateway) {
		return errGatewayNotFound(cmd.GatewayID)
	}
	_, c, err := h.gateways.Update(ctx, cmd.GatewayID, func(g *domain.Gateway) ([]domain.Event, error) {
		if g.ID == "" || g.OrgID != cmd.Auth.OrgID {
			return nil, errGatewayNotFound(cmd.GatewayID)
		}
		return g.Revoke(domain.ActorOf(cmd.Auth), h.now()), nil
	})
	if err != nil {
		return err
	}
	return h.wait(ctx, c)
}
