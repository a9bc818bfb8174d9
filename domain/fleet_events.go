package domain

import (
	"encoding/json"
	"time"
)

// fleetEvents are the events of devices, leases, actions, frames and receipts.
var fleetEvents = []EventDef{
	Def[DeviceRegistered](1, nil),
	Def[DeviceRenamed](1, nil),
	Def[DeviceWoken](1, nil),
	Def[DeviceStopped](1, nil),
	Def[FleetSeeded](1, nil),
	Def[LeaseAcquired](1, nil),
	Def[LeaseRenewed](1, nil),
	Def[LeaseReleased](1, nil),
	Def[LeaseExpired](1, nil),
	Def[ActionRequested](1, nil),
	Def[ActionCommitted](1, nil),
	Def[ActionFailed](1, nil),
	Def[ActionOutcomeUnknown](1, nil),
	Def[ReceiptReviewed](1, nil),
	Def[FrameCaptured](1, nil),
	Def[DeviceReset](1, nil),
	Def[DeviceWentOffline](1, nil),
	Def[DeviceCameOnline](1, nil),
	Def[DeviceRetired](1, nil),
}

// DeviceRetired records that a device left its organisation's fleet (its
// fulfilment was cancelled): from this event on it answers exactly as a
// device that never existed. Any lease on it is ended in the same append
// (lease.released just before this event).
type DeviceRetired struct {
	DeviceID string    `json:"deviceId"`
	OrgID    string    `json:"orgId"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceRetired) EventName() string { return "device.retired" }

// DeviceRegistered records a device joining an organisation's fleet. It is
// the first event of the device's stream (DeviceStream).
type DeviceRegistered struct {
	DeviceID string `json:"deviceId"`
	OrgID    string `json:"orgId"`
	Name     string `json:"name"`
	// Backend is the backend kind named by the row (sim, adb, robot). It is
	// kept as recorded even when this binary does not know it, so that such
	// a device answers backend_resolution_failed instead of vanishing.
	Backend string `json:"backend"`
	Model   string `json:"model,omitempty"`
	Serial  string `json:"serial,omitempty"`
	// Width and Height are the screen size in pixels, when known.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// RegisteredAt is when the device was registered.
	RegisteredAt time.Time `json:"registeredAt"`
	// GatewayID and GatewayKey name the gateway that brings the device and
	// its key for it; empty for a device the service drives itself.
	GatewayID  string `json:"gatewayId,omitempty"`
	GatewayKey string `json:"gatewayKey,omitempty"`
}

// EventName implements Event.
func (DeviceRegistered) EventName() string { return "device.registered" }

// DeviceRenamed records a new display name.
type DeviceRenamed struct {
	DeviceID string `json:"deviceId"`
	Name     string `json:"name"`
}

// EventName implements Event.
func (DeviceRenamed) EventName() string { return "device.renamed" }

// DeviceWoken records that the device's screen was turned on.
type DeviceWoken struct {
	DeviceID string    `json:"deviceId"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceWoken) EventName() string { return "device.woken" }

// DeviceStopped records that the device was put to sleep (screen off).
type DeviceStopped struct {
	DeviceID string    `json:"deviceId"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceStopped) EventName() string { return "device.stopped" }

// FleetSeeded marks that a local deployment registered its starting sim
// phones; it is the only event of the stream LocalFleetStream, so a second
// start (or a concurrent one) never registers them again.
type FleetSeeded struct {
	OrgID     string   `json:"orgId"`
	DeviceIDs []string `json:"deviceIds"`
}

// EventName implements Event.
func (FleetSeeded) EventName() string { return "fleet.seeded" }

// LeaseAcquired records exclusive use of a device granted to Holder until
// ExpiresAt. FencingToken is one more than the device's previous token.
type LeaseAcquired struct {
	DeviceID     string    `json:"deviceId"`
	LeaseID      string    `json:"leaseId"`
	FencingToken int64     `json:"fencingToken"`
	Holder       Actor     `json:"holder"`
	AcquiredAt   time.Time `json:"acquiredAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
	// ResetOnRelease asks for the device to be reset to its baseline when
	// the lease ends (added in place: absent means false).
	ResetOnRelease bool `json:"resetOnRelease,omitempty"`
}

// EventName implements Event.
func (LeaseAcquired) EventName() string { return "lease.acquired" }

// LeaseRenewed records a lease's new expiry.
type LeaseRenewed struct {
	DeviceID  string    `json:"deviceId"`
	LeaseID   string    `json:"leaseId"`
	RenewedAt time.Time `json:"renewedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// EventName implements Event.
func (LeaseRenewed) EventName() string { return "lease.renewed" }

// LeaseReleased records that the holder gave the device back.
type LeaseReleased struct {
	DeviceID   string    `json:"deviceId"`
	LeaseID    string    `json:"leaseId"`
	ReleasedAt time.Time `json:"releasedAt"`
	// Reset records that the lease asked for resetOnRelease: from this
	// event on the device owes a reset, until device.reset names the lease
	// (added in place: absent means false).
	Reset bool `json:"reset,omitempty"`
}

// EventName implements Event.
func (LeaseReleased) EventName() string { return "lease.released" }

// LeaseExpired records that a lease ran past its expiry without renewal.
type LeaseExpired struct {
	DeviceID string `json:"deviceId"`
	LeaseID  string `json:"leaseId"`
	// ExpiredAt is the lease's expiry, not when the expiry was noticed.
	ExpiredAt time.Time `json:"expiredAt"`
	// Reset: as LeaseReleased.Reset.
	Reset bool `json:"reset,omitempty"`
}

// EventName implements Event.
func (LeaseExpired) EventName() string { return "lease.expired" }

// ActionRequested records that an action was accepted for execution: the
// receipt exists from here on, pending. It is the first event of the
// action's stream (ActionStream) and is recorded before anything physical
// happens.
type ActionRequested struct {
	ActionID       string          `json:"actionId"`
	DeviceID       string          `json:"deviceId"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Action         ActionType      `json:"action"`
	Arguments      json.RawMessage `json:"arguments"`
	Actor          Actor           `json:"actor"`
	AgentRunID     string          `json:"agentRunId,omitempty"`
	// RunID names the run's execution when a run acted (AgentRunID is the
	// run as its customer sees it).
	RunID string `json:"runId,omitempty"`
	// LeaseID and FencingToken say under which lease the action was
	// accepted; the executor refuses it if the device's lease has moved on.
	// They never appear on a receipt.
	LeaseID       string    `json:"leaseId"`
	FencingToken  int64     `json:"fencingToken"`
	ObservedFrame string    `json:"observedFrame,omitempty"`
	RequestedAt   time.Time `json:"requestedAt"`
}

// EventName implements Event.
func (ActionRequested) EventName() string { return "action.requested" }

// ActionCommitted records that the device carried the action out.
type ActionCommitted struct {
	ActionID string       `json:"actionId"`
	DeviceID string       `json:"deviceId"`
	Result   ActionResult `json:"result"`
	// Effect says whether the action changed the screen (absent from
	// actions committed before effects were judged).
	Effect      *ActionEffect `json:"effect,omitempty"`
	FrameBefore *FrameRef     `json:"frameBefore,omitempty"`
	FrameAfter  *FrameRef     `json:"frameAfter,omitempty"`
	StartedAt   time.Time     `json:"startedAt"`
	FinishedAt  time.Time     `json:"finishedAt"`
}

// EventName implements Event.
func (ActionCommitted) EventName() string { return "action.committed" }

// ActionFailed records that the action was refused or failed; Code is one
// of the domain codes (stale_frame, lease_mismatch, invalid_argument, …).
type ActionFailed struct {
	ActionID    string    `json:"actionId"`
	DeviceID    string    `json:"deviceId"`
	Code        Code      `json:"code"`
	Message     string    `json:"message"`
	Reason      string    `json:"reason,omitempty"`
	FrameBefore *FrameRef `json:"frameBefore,omitempty"`
	FrameAfter  *FrameRef `json:"frameAfter,omitempty"`
	StartedAt   time.Time `json:"startedAt"`
	FinishedAt  time.Time `json:"finishedAt"`
}

// EventName implements Event.
func (ActionFailed) EventName() string { return "action.failed" }

// ActionOutcomeUnknown records that the action may or may not have happened:
// it was dispatched and no outcome came back, or the process executing it
// ended first. The receipt stays pending and is never executed again.
type ActionOutcomeUnknown struct {
	ActionID string    `json:"actionId"`
	DeviceID string    `json:"deviceId"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (ActionOutcomeUnknown) EventName() string { return "action.outcome_unknown" }

// ReceiptReviewed records that a person looked at a receipt.
type ReceiptReviewed struct {
	ActionID       string    `json:"actionId"`
	IdempotencyKey string    `json:"idempotencyKey"`
	Reviewer       Actor     `json:"reviewer"`
	Note           string    `json:"note,omitempty"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (ReceiptReviewed) EventName() string { return "receipt.reviewed" }

// FrameCaptured records an observation (a screenshot or UI snapshot asked
// for by a client). The frames an action captures are recorded on its
// committed or failed event instead, so an action costs no extra event.
type FrameCaptured struct {
	Frame    FrameRef `json:"frame"`
	DeviceID string   `json:"deviceId"`
	Reason   string   `json:"reason"`
	// RunID names the run that observed, when one did.
	RunID string `json:"runId,omitempty"`
}

// EventName implements Event.
func (FrameCaptured) EventName() string { return "frame.captured" }

// DeviceReset records that a device was returned to its baseline (a fresh
// device of its model and serial) for the lease LeaseID, which ended with
// resetOnRelease. It settles the reset that lease's ending made due.
type DeviceReset struct {
	DeviceID string    `json:"deviceId"`
	LeaseID  string    `json:"leaseId"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceReset) EventName() string { return "device.reset" }

// DeviceWentOffline records that a device's transport lost it (an adb
// server stopped listing it as a connected device).
type DeviceWentOffline struct {
	DeviceID string `json:"deviceId"`
	// State is what the transport said, e.g. "offline", "unauthorized",
	// or "gone" when it stopped listing the device.
	State string    `json:"state,omitempty"`
	At    time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceWentOffline) EventName() string { return "device.went_offline" }

// DeviceCameOnline records that a device's transport has it again.
type DeviceCameOnline struct {
	DeviceID string    `json:"deviceId"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (DeviceCameOnline) EventName() string { return "device.came_online" }
