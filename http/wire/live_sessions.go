package wire

import (
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
)

// LiveSession is a device's open live session: who is in it, in what
// role, and the lease its driver holds.
type LiveSession struct {
	SessionID    string               `json:"sessionId"`
	DeviceID     string               `json:"deviceId"`
	StartedAt    time.Time            `json:"startedAt"`
	StartedBy    domain.ReceiptActor  `json:"startedBy"`
	Driver       *domain.ReceiptActor `json:"driver,omitempty"`
	Lease        *LiveSessionLease    `json:"lease,omitempty"`
	Participants []LiveParticipant    `json:"participants"`
	// StreamURL is where the screen is watched (GET, MJPEG), relative to
	// the service's address.
	StreamURL string `json:"streamUrl"`
}

// LiveSessionLease is the lease a live session's driver holds.
type LiveSessionLease struct {
	LeaseID      string    `json:"leaseId"`
	FencingToken int64     `json:"fencingToken"`
	ExpiresAt    time.Time `json:"expiresAt"`
}

// LiveParticipant is one participant of a live session.
type LiveParticipant struct {
	Actor    domain.ReceiptActor `json:"actor"`
	Role     string              `json:"role"`
	JoinedAt time.Time           `json:"joinedAt"`
}

// NewLiveSession returns v as the API shows it.
func NewLiveSession(v fleet.LiveSessionView) LiveSession {
	out := LiveSession{SessionID: v.SessionID, DeviceID: v.DeviceID, StartedAt: v.StartedAt, StartedBy: v.StartedBy.ForReceipt(),
		Participants: make([]LiveParticipant, 0, len(v.Participants)), StreamURL: "/v1/devices/" + v.DeviceID + "/stream"}
	if v.Driver != nil {
		d := v.Driver.ForReceipt()
		out.Driver = &d
	}
	if v.Lease != nil {
		out.Lease = &LiveSessionLease{LeaseID: v.Lease.ID, FencingToken: v.Lease.FencingToken, ExpiresAt: v.Lease.ExpiresAt}
	}
	for _, p := range v.Participants {
		out.Participants = append(out.Participants, LiveParticipant{Actor: p.Actor.ForReceipt(), Role: p.Role, JoinedAt: p.JoinedAt})
	}
	return out
}

func newLiveSessionPtr(v *fleet.LiveSessionView) *LiveSession {
	if v == nil {
		return nil
	}
	s := NewLiveSession(*v)
	return &s
}
