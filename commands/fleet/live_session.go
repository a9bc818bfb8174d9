package fleet

import (
	"context"
	"time"

	"phonefleet/commands/cqrs"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// Live sessions (/v1/devices/{deviceId}/live-session): people join a
// device's session to watch its screen (GET /v1/devices/{deviceId}/stream)
// and at most one of them drives. Driving is holding the device's lease —
// taken, adopted or handed over in the same unit of work that records the
// session's change — so actions, fencing and expiry work for the driver
// exactly as for any lease holder; watching holds nothing. One stream per
// device (domain.LiveSessionStream) holds its successive sessions.
//
// Reads fold that small stream through the cached repository instead of a
// read model: a session is read by its device's id only, the cache makes a
// read one indexed query, and the answer is always the stream's latest.

// liveSessionAggregate folds a device's live session stream (keyed by the
// device id).
var liveSessionAggregate = eventstore.Aggregate[domain.LiveSession, domain.Event]{
	Stream: domain.LiveSessionStream,
	Codec:  domain.Events,
	New:    func(id string) domain.LiveSession { return domain.LiveSession{DeviceID: id} },
	Apply:  func(s *domain.LiveSession, e domain.Event, _ eventstore.Recorded) { s.Apply(e) },
	OrgID:  func(s *domain.LiveSession) string { return s.OrgID },
	Clone:  domain.LiveSession.Clone,
	Keep:   func(s *domain.LiveSession) bool { return s.OrgID != "" },
}

// LiveSessions is the live session capability over a fleet.
type LiveSessions struct {
	f        *Fleet
	sessions *eventstore.Repository[domain.LiveSession, domain.Event]
}

// NewLiveSessions returns the live sessions of f's devices.
func NewLiveSessions(f *Fleet) *LiveSessions {
	return &LiveSessions{f: f, sessions: eventstore.NewRepository(f.store, liveSessionAggregate)}
}

// LiveParticipantView is one participant as a session shows it.
type LiveParticipantView struct {
	Actor domain.Actor
	// Role is driver or watcher.
	Role     string
	JoinedAt time.Time
}

// LiveSessionView is a device's open live session.
type LiveSessionView struct {
	SessionID    string
	DeviceID     string
	StartedAt    time.Time
	StartedBy    domain.Actor
	Participants []LiveParticipantView
	// Driver is who drives now (holds the device's lease the session took);
	// nil when nobody does.
	Driver *domain.Actor
	// Lease is the driver's lease, nil when nobody drives.
	Lease *domain.Lease
}

// liveSessionView shows s as of now on device d.
func liveSessionView(s *domain.LiveSession, d *domain.Device, now time.Time) LiveSessionView {
	v := LiveSessionView{SessionID: s.ID, DeviceID: s.DeviceID, StartedAt: s.StartedAt, StartedBy: s.StartedBy,
		Participants: make([]LiveParticipantView, 0, len(s.Participants))}
	if drv := s.DriverNow(d, now); drv != nil {
		a, l := *drv, *d.Lease
		v.Driver, v.Lease = &a, &l
	}
	for _, p := range s.Participants {
		role := domain.LiveRoleWatcher
		if v.Driver != nil && *v.Driver == p.Actor {
			role = domain.LiveRoleDriver
		}
		v.Participants = append(v.Participants, LiveParticipantView{Actor: p.Actor, Role: role, JoinedAt: p.JoinedAt})
	}
	return v
}

// denyLive refuses OAuth apps (spec 5.2: live video sessions are the
// console's) and credentials without devices:read.
func denyLive(a domain.Auth) error {
	if err := a.DenyApp("live video sessions", "the console"); err != nil {
		return err
	}
	return a.Require(domain.ScopeDevicesRead)
}

// JoinLiveSession joins a device's live session, opening it when none is
// open (POST /v1/devices/{deviceId}/live-session), in a role.
type JoinLiveSession struct {
	Auth     domain.Auth
	DeviceID string
	// Role is watcher ("" means watcher) or driver. A driver who asks to
	// watch gives the lease up.
	Role string
	// TTLSeconds is the lease a new driver takes; 0 means the lease
	// default. The driver renews it as any lease (PATCH .../lease).
	TTLSeconds int
}

// JoinedLiveSession is the session after a join, and whether the join
// opened it.
type JoinedLiveSession struct {
	Session LiveSessionView
	Created bool
}

// JoinLiveSessionHandler handles JoinLiveSession.
type JoinLiveSessionHandler struct{ ls *LiveSessions }

// JoinLiveSession returns the handler of JoinLiveSession.
func (ls *LiveSessions) JoinLiveSession() JoinLiveSessionHandler { return JoinLiveSessionHandler{ls} }

// Handle records the caller joining (live_session.started when it opens
// the session, live_session.joined) and, for a driver, taking the wheel
// (live_session.driver_changed with the lease events on the device's
// stream, in one unit). Watching needs devices:read, driving also
// devices:lease. Errors: permission_denied (an OAuth app, a scope),
// invalid_argument (role, ttl), device_unavailable (not_found; or
// already_leased when someone outside the session holds the device).
func (h JoinLiveSessionHandler) Handle(ctx context.Context, cmd JoinLiveSession) (JoinedLiveSession, error) {
	f := h.ls.f
	if err := denyLive(cmd.Auth); err != nil {
		return JoinedLiveSession{}, err
	}
	role := cmd.Role
	switch role {
	case "":
		role = domain.LiveRoleWatcher
	case domain.LiveRoleWatcher:
	case domain.LiveRoleDriver:
		if err := cmd.Auth.Require(domain.ScopeDevicesLease); err != nil {
			return JoinedLiveSession{}, err
		}
	default:
		return JoinedLiveSession{}, domain.Errorf(domain.CodeInvalidArgument, "role must be watcher or driver")
	}
	ttl, err := domain.CheckLeaseTTL(cmd.TTLSeconds)
	if err != nil {
		return JoinedLiveSession{}, err
	}
	if _, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return JoinedLiveSession{}, err
	}
	actor := domain.HolderOf(cmd.Auth)
	sessionID, leaseID := domain.NewID(domain.PrefixLiveSession), domain.NewID(domain.PrefixLease)
	var created bool
	s, c, err := h.ls.update(ctx, cmd.DeviceID, func(s *domain.LiveSession, d *domain.Device, now time.Time) ([]domain.Event, []domain.Event, error) {
		created = !s.Open()
		evs, err := s.Join(d, now, sessionID, actor)
		if err != nil {
			return nil, nil, err
		}
		after := s.Clone()
		for _, e := range evs {
			after.Apply(e)
		}
		var sev, dev []domain.Event
		if role == domain.LiveRoleDriver {
			sev, dev, err = after.Drive(d, now, actor, leaseID, ttl)
		} else {
			sev, dev = after.StopDriving(d, now, actor)
		}
		return append(evs, sev...), dev, err
	})
	if err != nil {
		return JoinedLiveSession{}, err
	}
	v, err := h.ls.answer(ctx, s, c)
	return JoinedLiveSession{Session: v, Created: created}, err
}

// EndLiveSession ends a device's live session for everyone (DELETE
// /v1/devices/{deviceId}/live-session).
type EndLiveSession struct {
	Auth     domain.Auth
	DeviceID string
}

// EndLiveSessionHandler handles EndLiveSession.
type EndLiveSessionHandler struct{ ls *LiveSessions }

// EndLiveSession returns the handler of EndLiveSession.
func (ls *LiveSessions) EndLiveSession() EndLiveSessionHandler { return EndLiveSessionHandler{ls} }

// Handle records live_session.ended and releases the lease the session
// drives under, if still in force (lease.released on the device's stream,
// in the same unit). A participant may end it; ending someone else's
// driving also needs devices:lease. Errors: permission_denied (an OAuth
// app, a scope, not a participant), not_found (no session open),
// device_unavailable (not_found).
func (h EndLiveSessionHandler) Handle(ctx context.Context, cmd EndLiveSession) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h EndLiveSessionHandler) handle(ctx context.Context, cmd EndLiveSession) error {
	f := h.ls.f
	if err := denyLive(cmd.Auth); err != nil {
		return err
	}
	if _, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return err
	}
	actor := domain.HolderOf(cmd.Auth)
	_, c, err := h.ls.update(ctx, cmd.DeviceID, func(s *domain.LiveSession, d *domain.Device, now time.Time) ([]domain.Event, []domain.Event, error) {
		if drv := s.DriverNow(d, now); drv != nil && *drv != actor {
			if err := cmd.Auth.Require(domain.ScopeDevicesLease); err != nil {
				return nil, nil, err
			}
		}
		return s.End(d, now, actor)
	})
	if err != nil {
		return err
	}
	return f.waitFor(ctx, c.Last(), projections.DevicesName, projections.LeasesName)
}

// GetLiveSession reads a device's open live session (GET
// /v1/devices/{deviceId}/live-session).
type GetLiveSession struct {
	Auth     domain.Auth
	DeviceID string
}

// GetLiveSessionHandler handles GetLiveSession.
type GetLiveSessionHandler struct{ ls *LiveSessions }

// GetLiveSession returns the handler of GetLiveSession.
func (ls *LiveSessions) GetLiveSession() GetLiveSessionHandler { return GetLiveSessionHandler{ls} }

// Handle answers the session open on the device (devices:read). Errors:
// permission_denied (an OAuth app, a scope), not_found (none open),
// device_unavailable (not_found).
func (h GetLiveSessionHandler) Handle(ctx context.Context, q GetLiveSession) (LiveSessionView, error) {
	if err := denyLive(q.Auth); err != nil {
		return LiveSessionView{}, err
	}
	v, ok, err := h.ls.current(ctx, q.Auth, q.DeviceID)
	if err == nil && !ok {
		err = domain.ErrNoLiveSession(q.DeviceID)
	}
	return v, err
}

// WithLiveSession adds the device's open live session to a driving answer
// (GET /v1/devices/{deviceId}/driving): who drives it and who watches. An
// OAuth app, which may read who drives but not live sessions, sees none.
func (ls *LiveSessions) WithLiveSession(ctx context.Context, auth domain.Auth, d Driving) (Driving, error) {
	if auth.IsApp() {
		return d, nil
	}
	v, ok, err := ls.current(ctx, auth, d.DeviceID)
	if err != nil || !ok {
		return d, err
	}
	d.LiveSession = &v
	return d, nil
}

// current loads the device's open session as of now; ok is false when
// none is open.
func (ls *LiveSessions) current(ctx context.Context, auth domain.Auth, deviceID string) (LiveSessionView, bool, error) {
	d, err := ls.f.visibleDevice(ctx, auth, deviceID)
	if err != nil {
		return LiveSessionView{}, false, err
	}
	s, _, err := ls.sessions.Load(ctx, deviceID)
	if err != nil || !s.Open() {
		return LiveSessionView{}, false, err
	}
	return liveSessionView(&s, &d, ls.f.now()), true, nil
}

// update is the one load–decide–append of live sessions: decide sees the
// session and the device's state as loaded for this attempt and returns
// the session's events and the device's; both are appended in one unit at
// the versions seen, so a lease taken meanwhile (or a session changed)
// makes the repository decide again on the new states.
func (ls *LiveSessions) update(ctx context.Context, deviceID string,
	decide func(s *domain.LiveSession, d *domain.Device, now time.Time) (session, device []domain.Event, err error)) (domain.LiveSession, eventstore.Committed, error) {
	return ls.sessions.UpdateWith(ctx, deviceID, func(s *domain.LiveSession, u *eventstore.Unit) ([]domain.Event, error) {
		d, version, err := ls.f.devices.Load(ctx, deviceID)
		if err != nil {
			return nil, err
		}
		sev, dev, err := decide(s, &d, ls.f.now())
		if err != nil || len(dev) == 0 {
			return sev, err
		}
		news, err := eventstore.Encode(domain.Events, d.OrgID, dev...)
		if err != nil {
			return nil, err
		}
		u.Append(domain.DeviceStream(deviceID), version, news...)
		return sev, nil
	})
}

// answer waits for the device read models (so GET .../driving shows the
// lease change) and shows the session as committed.
func (ls *LiveSessions) answer(ctx context.Context, s domain.LiveSession, c eventstore.Committed) (LiveSessionView, error) {
	if err := ls.f.waitFor(ctx, c.Last(), projections.DevicesName, projections.LeasesName); err != nil {
		return LiveSessionView{}, err
	}
	d, _, err := ls.f.devices.Load(ctx, s.DeviceID)
	if err != nil {
		return LiveSessionView{}, err
	}
	return liveSessionView(&s, &d, ls.f.now()), nil
}
