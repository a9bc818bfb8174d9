package domain

import (
	"slices"
	"time"
)

// PrefixLiveSession is the id prefix of live sessions.
const PrefixLiveSession = "lvs"

// Roles of a live session's participants.
const (
	LiveRoleDriver  = "driver"
	LiveRoleWatcher = "watcher"
)

// LiveSessionStream names the stream of a device's live sessions.
func LiveSessionStream(deviceID string) string { return "live-session-" + deviceID }

// LiveParticipant is one person (or key) in a live session.
type LiveParticipant struct {
	Actor    Actor
	JoinedAt time.Time
}

// LiveSession is a device's live session stream folded: the session open
// now, if any (ID empty when none). People join it to watch the device's
// screen; at most one of them drives, and driving is holding the device's
// lease (LeaseID), so every rule of leases (fencing, expiry, one holder)
// applies to the driver unchanged. Watching holds nothing.
type LiveSession struct {
	DeviceID     string
	OrgID        string
	ID           string
	StartedAt    time.Time
	StartedBy    Actor
	Participants []LiveParticipant
	// Driver is who last took the wheel, under LeaseID; see DriverNow for
	// whether that lease is still in force.
	Driver       *Actor
	LeaseID      string
	DrivingSince time.Time
}

// Open reports whether a session is open.
func (s *LiveSession) Open() bool { return s.ID != "" }

// Apply folds one event of the stream.
func (s *LiveSession) Apply(e Event) {
	switch e := e.(type) {
	case LiveSessionStarted:
		*s = LiveSession{DeviceID: e.DeviceID, OrgID: e.OrgID, ID: e.SessionID, StartedAt: e.StartedAt, StartedBy: e.StartedBy}
	case LiveSessionJoined:
		s.Participants = append(s.Participants, LiveParticipant{Actor: e.Participant, JoinedAt: e.JoinedAt})
	case LiveSessionDriverChanged:
		s.Driver, s.LeaseID, s.DrivingSince = nil, e.LeaseID, e.ChangedAt
		if e.Driver != nil {
			d := *e.Driver
			s.Driver = &d
		}
	case LiveSessionEnded:
		*s = LiveSession{DeviceID: s.DeviceID, OrgID: s.OrgID}
	}
}

// Clone returns a copy sharing nothing with s.
func (s LiveSession) Clone() LiveSession {
	s.Participants = slices.Clone(s.Participants)
	if s.Driver != nil {
		d := *s.Driver
		s.Driver = &d
	}
	return s
}

// Participant reports whether a takes part in the session.
func (s *LiveSession) Participant(a Actor) bool {
	return slices.ContainsFunc(s.Participants, func(p LiveParticipant) bool { return p.Actor == a })
}

// DriverNow returns who drives the session at now: its driver while the
// lease the driver took is the device's lease in force; nobody once that
// lease was released or ran out, whoever ended it.
func (s *LiveSession) DriverNow(d *Device, now time.Time) *Actor {
	if s.Driver == nil || s.LeaseID == "" {
		return nil
	}
	if l := d.ActiveLease(now); l == nil || l.ID != s.LeaseID || l.Holder != *s.Driver {
		return nil
	}
	return s.Driver
}

// Join adds a to the session, opening one under sessionID on device d when
// none is open. Joining twice changes nothing.
func (s *LiveSession) Join(d *Device, now time.Time, sessionID string, a Actor) ([]Event, error) {
	if !d.Registered() {
		return nil, ErrDeviceNotFound(d.ID)
	}
	var evs []Event
	id := s.ID
	if !s.Open() {
		id = sessionID
		evs = append(evs, LiveSessionStarted{SessionID: id, DeviceID: d.ID, OrgID: d.OrgID, StartedBy: a, StartedAt: now})
	} else if s.Participant(a) {
		return nil, nil
	}
	return append(evs, LiveSessionJoined{SessionID: id, DeviceID: d.ID, Participant: a, JoinedAt: now}), nil
}

// Drive makes participant a the session's driver, holding device d's lease:
// the lease a already holds is adopted; a free device is leased to a under
// leaseID for ttl; a device leased by the session's driver is handed to a
// (the driver's lease released and a's acquired in one append, so nobody
// can take the device in between). A device leased by anyone outside the
// session answers device_unavailable (already_leased), as acquiring would.
// It returns the session's events and the device's, which the caller
// appends together.
func (s *LiveSession) Drive(d *Device, now time.Time, a Actor, leaseID string, ttl time.Duration) (session, device []Event, err error) {
	if !s.Open() || !s.Participant(a) {
		return nil, nil, Errorf(CodeInvalidArgument, "join the live session before driving")
	}
	if cur := s.DriverNow(d, now); cur != nil && *cur == a {
		return nil, nil, nil
	}
	l := d.ActiveLease(now)
	switch {
	case l != nil && l.Holder == a:
		leaseID = l.ID
	case l != nil && l.ID == s.LeaseID && s.DriverNow(d, now) != nil:
		if device, err = d.HandLease(now, *s.Driver, a, leaseID, ttl); err != nil {
			return nil, nil, err
		}
	default:
		if device, err = d.AcquireLease(now, a, leaseID, ttl); err != nil {
			return nil, nil, err
		}
	}
	driver := a
	return []Event{LiveSessionDriverChanged{SessionID: s.ID, DeviceID: d.ID, Driver: &driver, LeaseID: leaseID, ChangedAt: now}}, device, nil
}

// StopDriving makes a watch again if a drives: the lease a drove under is
// given up. Anyone else asking changes nothing.
func (s *LiveSession) StopDriving(d *Device, now time.Time, a Actor) (session, device []Event) {
	if !s.Open() || s.Driver == nil || *s.Driver != a {
		return nil, nil
	}
	return []Event{LiveSessionDriverChanged{SessionID: s.ID, DeviceID: d.ID, ChangedAt: now}}, d.GiveUpLease(now, s.LeaseID)
}

// End closes the session for everyone; a must take part in it. The lease
// it drives under, if still in force, is released. Errors: not_found (no
// session is open), permission_denied (a does not take part).
func (s *LiveSession) End(d *Device, now time.Time, a Actor) (session, device []Event, err error) {
	if !s.Open() {
		return nil, nil, ErrNoLiveSession(d.ID)
	}
	if !s.Participant(a) {
		return nil, nil, Errorf(CodePermissionDenied, "only a participant can end the live session of device %s", d.ID)
	}
	if s.DriverNow(d, now) != nil {
		device = d.GiveUpLease(now, s.LeaseID)
	}
	return []Event{LiveSessionEnded{SessionID: s.ID, DeviceID: d.ID, EndedBy: a, EndedAt: now}}, device, nil
}

// ErrNoLiveSession is not_found for a device with no live session open.
func ErrNoLiveSession(deviceID string) *Error {
	return Errorf(CodeNotFound, "device %s has no live session; create one with POST", deviceID).With("deviceId", deviceID)
}
