package domain

import "time"

// liveSessionEvents are the events of live sessions: one stream per device
// (LiveSessionStream) holding its successive sessions.
var liveSessionEvents = []EventDef{
	Def[LiveSessionStarted](1, nil),
	Def[LiveSessionJoined](1, nil),
	Def[LiveSessionDriverChanged](1, nil),
	Def[LiveSessionEnded](1, nil),
}

// LiveSessionStarted records a live session opened on a device by its
// first participant (whose joining is recorded next, as
// LiveSessionJoined).
type LiveSessionStarted struct {
	SessionID string    `json:"sessionId"`
	DeviceID  string    `json:"deviceId"`
	OrgID     string    `json:"orgId"`
	StartedBy Actor     `json:"startedBy"`
	StartedAt time.Time `json:"startedAt"`
}

// EventName implements Event.
func (LiveSessionStarted) EventName() string { return "live_session.started" }

// LiveSessionJoined records a participant joining a live session (to
// watch; driving is LiveSessionDriverChanged).
type LiveSessionJoined struct {
	SessionID   string    `json:"sessionId"`
	DeviceID    string    `json:"deviceId"`
	Participant Actor     `json:"participant"`
	JoinedAt    time.Time `json:"joinedAt"`
}

// EventName implements Event.
func (LiveSessionJoined) EventName() string { return "live_session.joined" }

// LiveSessionDriverChanged records who drives the session now: Driver
// holds the device's lease LeaseID (recorded on the device's stream in the
// same unit of work), or nobody drives (Driver nil, LeaseID empty).
type LiveSessionDriverChanged struct {
	SessionID string    `json:"sessionId"`
	DeviceID  string    `json:"deviceId"`
	Driver    *Actor    `json:"driver,omitempty"`
	LeaseID   string    `json:"leaseId,omitempty"`
	ChangedAt time.Time `json:"changedAt"`
}

// EventName implements Event.
func (LiveSessionDriverChanged) EventName() string { return "live_session.driver_changed" }

// LiveSessionEnded records the end of a live session; the lease it drove
// under, if still in force, is released in the same unit of work.
type LiveSessionEnded struct {
	SessionID string    `json:"sessionId"`
	DeviceID  string    `json:"deviceId"`
	EndedBy   Actor     `json:"endedBy"`
	EndedAt   time.Time `json:"endedAt"`
}

// EventName implements Event.
func (LiveSessionEnded) EventName() string { return "live_session.ended" }
