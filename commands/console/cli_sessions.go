package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
)

// CLI sign-in (/v1/cli-sessions; domain/cli_session.go tells the flow).
// Every read is by session id or user code, answered from the session's
// and the code's streams, so a session needs no read model and a poll or
// a lookup always sees the latest decision.

// CLISessionConfig is what CLI sign-in needs.
type CLISessionConfig struct {
	Store *eventstore.Store
	// Now is the clock; nil means clock.Now. Tests inject one (expiry).
	Now func() time.Time
}

// CLISessions is the CLI sign-in capability. Each handler embeds it.
type CLISessions struct {
	cfg      CLISessionConfig
	sessions *eventstore.Repository[domain.CLISession, domain.Event]
	codes    *eventstore.Repository[domain.CLICodeClaim, domain.Event]
}

// cliSessionAggregate folds a CLI sign-in's stream. Its organisation is
// empty until a person decides it.
var cliSessionAggregate = eventstore.Aggregate[domain.CLISession, domain.Event]{
	Stream: domain.CLISessionStream,
	Codec:  domain.Events,
	New:    func(string) domain.CLISession { return domain.CLISession{} },
	Apply:  func(s *domain.CLISession, e domain.Event, _ eventstore.Recorded) { s.Apply(e) },
	OrgID:  func(s *domain.CLISession) string { return s.OrgID },
}

// cliCodeAggregate folds a user code's claims (they belong to no
// organisation: a code is claimed before anyone decides its session).
var cliCodeAggregate = eventstore.Aggregate[domain.CLICodeClaim, domain.Event]{
	Stream: domain.CLICodeStream,
	Codec:  domain.Events,
	New:    func(string) domain.CLICodeClaim { return domain.CLICodeClaim{} },
	Apply:  func(c *domain.CLICodeClaim, e domain.Event, _ eventstore.Recorded) { c.Apply(e) },
	OrgID:  func(*domain.CLICodeClaim) string { return "" },
}

// NewCLISessions returns the CLI sign-in capability.
func NewCLISessions(cfg CLISessionConfig) *CLISessions {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	return &CLISessions{cfg: cfg,
		sessions: eventstore.NewRepository(cfg.Store, cliSessionAggregate),
		codes:    eventstore.NewRepository(cfg.Store, cliCodeAggregate)}
}

func (c *CLISessions) now() time.Time { return c.cfg.Now().UTC().Truncate(time.Microsecond) }

// CLISessionView is a CLI sign-in as the console shows it to the person
// deciding it.
type CLISessionView struct {
	SessionID  string
	UserCode   string
	State      string
	ClientName string
	Host       string
	// KeyName is the name of the key approval mints.
	KeyName string
	// Scopes are the scopes the CLI asked for; Grantable, while the
	// session is pending, those of them the viewer holds (what approving
	// without naming scopes grants).
	Scopes    []domain.Scope
	Grantable []domain.Scope
	StartedAt time.Time
	ExpiresAt time.Time
	// DecidedBy and DecidedAt are set once a person decided.
	DecidedBy *domain.Actor
	DecidedAt *time.Time
	// KeyID and Granted describe the key approval minted.
	KeyID   string
	Granted []domain.Scope
}

func cliSessionView(s domain.CLISession, viewer domain.Auth, now time.Time) CLISessionView {
	v := CLISessionView{SessionID: s.ID, UserCode: s.UserCode, State: s.State(now), ClientName: s.ClientName, Host: s.Host,
		KeyName: s.KeyName(), Scopes: slices.Clone(s.Scopes), Grantable: []domain.Scope{}, StartedAt: s.StartedAt,
		ExpiresAt: s.ExpiresAt, KeyID: s.KeyID, Granted: slices.Clone(s.Granted)}
	if g, err := s.Grant(viewer, nil); err == nil && v.State == domain.CLIStatePending {
		v.Grantable = g
	}
	if s.Decision != "" {
		by, at := s.DecidedBy, s.DecidedAt
		v.DecidedBy, v.DecidedAt = &by, &at
	}
	return v
}

// ---- Start.

// StartCLISession starts a CLI sign-in (POST /v1/cli-sessions). It needs
// no credential: the CLI has none yet.
type StartCLISession struct {
	domain.CLISessionRequest
}

// StartedCLISession is a new session and its poll token, which exists
// only here (the store keeps its hash).
type StartedCLISession struct {
	Session   CLISessionView
	PollToken string
}

// StartCLISessionHandler handles StartCLISession.
type StartCLISessionHandler struct {
	*CLISessions
}

// cliCodeDraws bounds the user codes drawn for one session: with 20^8
// codes, a draw meets a live one about never; eight in a row mean
// something is wrong.
const cliCodeDraws = 8

// Handle records the session and its user code's claim in one unit. It
// fails with invalid_argument naming the field for a malformed request.
func (h StartCLISessionHandler) Handle(ctx context.Context, cmd StartCLISession) (StartedCLISession, error) {
	id, token, now := domain.NewID(domain.PrefixCLISession), domain.NewPollToken(), h.now()
	for range cliCodeDraws {
		started, err := domain.StartCLISession(id, domain.NewUserCode(), domain.HashPollToken(token), cmd.CLISessionRequest, now)
		if err != nil {
			return StartedCLISession{}, err
		}
		first, err := eventstore.Encode(domain.Events, "", domain.Event(started))
		if err != nil {
			return StartedCLISession{}, err
		}
		_, _, err = h.codes.UpdateWith(ctx, started.UserCode, func(c *domain.CLICodeClaim, u *eventstore.Unit) ([]domain.Event, error) {
			evs, err := c.Claim(started, now)
			if err != nil {
				return nil, err
			}
			u.Append(domain.CLISessionStream(id), eventstore.NoStream, first...)
			return evs, nil
		})
		if errors.Is(err, domain.ErrCLICodeTaken) {
			continue
		}
		if err != nil {
			return StartedCLISession{}, err
		}
		var s domain.CLISession
		s.Apply(started)
		return StartedCLISession{Session: cliSessionView(s, domain.Auth{}, now), PollToken: token}, nil
	}
	return StartedCLISession{}, fmt.Errorf("start cli session: %d user codes drawn were all held by live sessions", cliCodeDraws)
}

// ---- Poll.

// PollCLISession is the CLI asking what became of its session (GET
// /v1/cli-sessions/{sessionId} with its poll token).
type PollCLISession struct {
	SessionID string
	PollToken string
}

// CLISessionPoll answers a poll. KeyID, Scopes and Sealed are set once,
// on the poll that hands the approved key over.
type CLISessionPoll struct {
	SessionID string
	State     string
	ExpiresAt time.Time
	KeyID     string
	Scopes    []domain.Scope
	Sealed    *domain.SealedToken
}

// PollCLISessionHandler handles PollCLISession.
type PollCLISessionHandler struct {
	*CLISessions
}

// Handle answers the session's state. The first poll after approval
// receives the key's token sealed to the CLI and consumes the session;
// every later poll answers consumed. A session id that names nothing and
// a poll token that does not match are one answer, not_found.
func (h PollCLISessionHandler) Handle(ctx context.Context, cmd PollCLISession) (CLISessionPoll, error) {
	hash, ok := domain.ParsePollToken(cmd.PollToken)
	if !ok || !domain.HasPrefix(cmd.SessionID, domain.PrefixCLISession) {
		return CLISessionPoll{}, domain.ErrCLISessionNotFound()
	}
	now := h.now()
	var state string
	s, _, err := h.sessions.Update(ctx, cmd.SessionID, func(s *domain.CLISession) ([]domain.Event, error) {
		st, evs, err := s.Poll(hash, now)
		state = st
		return evs, err
	})
	if err != nil {
		return CLISessionPoll{}, err
	}
	out := CLISessionPoll{SessionID: s.ID, State: state, ExpiresAt: s.ExpiresAt}
	if state == domain.CLIStateApproved {
		sealed := s.Sealed
		out.KeyID, out.Scopes, out.Sealed = s.KeyID, slices.Clone(s.Granted), &sealed
	}
	return out, nil
}

// ---- Look up by code.

// GetCLISessionByCode shows a signed-in person the session a user code
// names (GET /v1/cli-sessions/by-code/{userCode}).
type GetCLISessionByCode struct {
	Auth     domain.Auth
	UserCode string
}

// GetCLISessionByCodeHandler handles GetCLISessionByCode.
type GetCLISessionByCodeHandler struct{ *CLISessions }

// Handle answers GetCLISessionByCode. It needs a signed-in session
// (permission_denied otherwise); a code that names nothing, or a session
// another organisation decided, is not_found.
func (c GetCLISessionByCodeHandler) Handle(ctx context.Context, q GetCLISessionByCode) (CLISessionView, error) {
	if err := q.Auth.RequireSession("CLI sign-in"); err != nil {
		return CLISessionView{}, err
	}
	code, ok := domain.ParseUserCode(q.UserCode)
	if !ok {
		return CLISessionView{}, domain.ErrCLISessionNotFound()
	}
	claim, _, err := c.codes.Load(ctx, code)
	if err != nil {
		return CLISessionView{}, err
	}
	if claim.SessionID == "" {
		return CLISessionView{}, domain.ErrCLISessionNotFound()
	}
	s, _, err := c.sessions.Load(ctx, claim.SessionID)
	if err != nil {
		return CLISessionView{}, err
	}
	if !s.VisibleTo(q.Auth, code) {
		return CLISessionView{}, domain.ErrCLISessionNotFound()
	}
	return cliSessionView(s, q.Auth, c.now()), nil
}

// cliDecision reads the session a decision names: the user code the
// person was shown is required with the id (so an id seen elsewhere, in a
// log, is not enough to decide a session), and a code that cannot be one
// names nothing.
func cliDecision(sessionID, userCode string) (string, error) {
	if userCode == "" {
		return "", domain.Errorf(domain.CodeInvalidArgument, "userCode is required: the code the CLI shows").With("field", "userCode")
	}
	code, ok := domain.ParseUserCode(userCode)
	if !ok || !domain.HasPrefix(sessionID, domain.PrefixCLISession) {
		return "", domain.ErrCLISessionNotFound()
	}
	return code, nil
}

// ---- Approve.

// ApproveCLISession approves a session for the signed-in person (POST
// /v1/cli-sessions/{sessionId}/approve).
type ApproveCLISession struct {
	Auth      domain.Auth
	SessionID string
	UserCode  string
	// Scopes narrow the key further; nil grants every scope the CLI asked
	// for that the person holds.
	Scopes []domain.Scope
}

// ApproveCLISessionHandler handles ApproveCLISession.
type ApproveCLISessionHandler struct {
	*CLISessions
	// Mint is the application's key command, so every key rule holds for
	// a key minted here.
	Mint cqrs.Handles[keys.MintAPIKey, keys.MintedAPIKey]
}

// Handle mints an API key for the approving person, named "CLI on
// <host>", with the granted scopes (those asked ∩ those the person
// holds, or the narrower set named), seals its token to the CLI and
// records the approval. It needs a signed-in session, never a key or an
// app (permission_denied); an unknown session, a wrong code and another
// organisation's session are not_found; a session no longer pending is
// invalid_argument naming its state. When the approval cannot be recorded
// (another person decided it at the same moment) no key is minted: the
// key and the approval commit together or not at all.
func (h ApproveCLISessionHandler) Handle(ctx context.Context, cmd ApproveCLISession) (CLISessionView, error) {
	if err := cmd.Auth.RequireSession("CLI sign-in"); err != nil {
		return CLISessionView{}, err
	}
	code, err := cliDecision(cmd.SessionID, cmd.UserCode)
	if err != nil {
		return CLISessionView{}, err
	}
	s, _, err := h.sessions.Load(ctx, cmd.SessionID)
	if err != nil {
		return CLISessionView{}, err
	}
	if err := s.CheckDecidable(cmd.Auth, code, h.now()); err != nil {
		return CLISessionView{}, err
	}
	granted, err := s.Grant(cmd.Auth, cmd.Scopes)
	if err != nil {
		return CLISessionView{}, err
	}
	now := h.now()
	// The approval, with the key's token sealed to the CLI, commits in the
	// key's own unit: a key exists only with its approval recorded, whatever
	// fails or crashes between the two (issue 27). The session is read
	// afresh on each attempt of the unit, so a decision recorded meanwhile
	// refuses it and nothing is minted.
	_, err = h.Mint.Handle(ctx, keys.MintAPIKey{Auth: cmd.Auth, Name: s.KeyName(), Scopes: granted, DeviceIDs: cmd.Auth.Devices,
		Also: func(m keys.MintedAPIKey, u *eventstore.Unit) error {
			cur, version, err := h.sessions.Load(ctx, cmd.SessionID)
			if err != nil {
				return err
			}
			sealed, err := domain.SealCLIToken(cur.PublicKey, cur.ID, m.Token)
			if err != nil {
				return err
			}
			evs, err := cur.Approve(cmd.Auth, code, m.KeyID, granted, sealed, now)
			if err != nil {
				return err
			}
			for _, e := range evs {
				cur.Apply(e)
			}
			s = cur // the session as this approval leaves it (a poll may consume it at once)
			news, err := eventstore.Encode(domain.Events, cmd.Auth.OrgID, evs...)
			if err != nil {
				return err
			}
			u.Append(domain.CLISessionStream(cur.ID), version, news...)
			return nil
		}})
	if err != nil {
		return CLISessionView{}, err
	}
	return cliSessionView(s, cmd.Auth, now), nil
}

// ---- Deny.

// DenyCLISession refuses a session (POST
// /v1/cli-sessions/{sessionId}/deny).
type DenyCLISession struct {
	Auth      domain.Auth
	SessionID string
	UserCode  string
}

// DenyCLISessionHandler handles DenyCLISession.
type DenyCLISessionHandler struct {
	*CLISessions
}

// Handle records the refusal; the CLI's next poll answers denied. Its
// refusals are Approve's.
func (h DenyCLISessionHandler) Handle(ctx context.Context, cmd DenyCLISession) (CLISessionView, error) {
	if err := cmd.Auth.RequireSession("CLI sign-in"); err != nil {
		return CLISessionView{}, err
	}
	code, err := cliDecision(cmd.SessionID, cmd.UserCode)
	if err != nil {
		return CLISessionView{}, err
	}
	now := h.now()
	s, _, err := h.sessions.Update(ctx, cmd.SessionID, func(s *domain.CLISession) ([]domain.Event, error) {
		return s.Deny(cmd.Auth, code, now)
	})
	if err != nil {
		return CLISessionView{}, err
	}
	return cliSessionView(s, cmd.Auth, now), nil
}
