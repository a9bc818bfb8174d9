package domain

import (
	"encoding/json"
	"time"
)

// scheduleEvents are the events of schedules: one stream per schedule
// (ScheduleStream), whose version orders its settings and its firings, so
// that an occurrence is fired once however many instances see it due.
var scheduleEvents = []EventDef{
	Def[ScheduleCreated](1, nil),
	Def[ScheduleUpdated](1, nil),
	Def[ScheduleDeleted](1, nil),
	Def[ScheduleFired](1, nil),
	Def[ScheduleFiringCompleted](1, nil),
}

// ScheduleCreator is who made a schedule, recorded with enough of their
// credential to act for them when the schedule fires: each firing starts
// its run with the authorization context Auth rebuilds (the same
// organisation, principal, scopes and device subset the creator had).
type ScheduleCreator struct {
	Kind     PrincipalKind `json:"kind"`
	UserID   string        `json:"userId,omitempty"`
	APIKeyID string        `json:"apiKeyId,omitempty"`
	ClientID string        `json:"clientId,omitempty"`
	Role     string        `json:"role,omitempty"`
	Scopes   []Scope       `json:"scopes"`
	// Devices, when not nil, is the creator's device subset.
	Devices  []string `json:"devices,omitempty"`
	Instance string   `json:"instance,omitempty"`
}

// ScheduleSettings is what a schedule is: when it fires and the run each
// firing starts. Created and updated events carry all of it, so the
// latest event alone says what the schedule is.
type ScheduleSettings struct {
	Name string `json:"name"`
	// Cron is a standard five-field cron expression (or a descriptor such
	// as @daily), read in Timezone.
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Enabled  bool   `json:"enabled"`
	Goal     string `json:"goal"`
	// DeviceID is the device each run takes; empty means any free device
	// of the organisation the creator can see.
	DeviceID        string          `json:"deviceId,omitempty"`
	Executor        string          `json:"executor"`
	MaxSteps        int             `json:"maxSteps,omitempty"`
	DeadlineSeconds int             `json:"deadlineSeconds,omitempty"`
	SuccessCheck    *SuccessCheck   `json:"successCheck,omitempty"`
	Script          json.RawMessage `json:"script,omitempty"`
}

// ScheduleCreated records a new schedule. It is the first event of the
// schedule's stream.
type ScheduleCreated struct {
	ScheduleID string `json:"scheduleId"`
	// OrgID is the organisation the schedule belongs to (and its stream's).
	OrgID string `json:"orgId"`
	ScheduleSettings
	CreatedBy ScheduleCreator `json:"createdBy"`
	CreatedAt time.Time       `json:"createdAt"`
}

// EventName implements Event.
func (ScheduleCreated) EventName() string { return "schedule.created" }

// ScheduleUpdated records a schedule's new settings (all of them) and
// where its occurrences count from (CountFrom): At when the cron
// expression or timezone changed or the schedule was switched on (nothing
// missed before it is caught up), else where they counted from before.
type ScheduleUpdated struct {
	ScheduleID string `json:"scheduleId"`
	ScheduleSettings
	CountFrom time.Time `json:"countFrom"`
	By        Actor     `json:"by"`
	At        time.Time `json:"at"`
}

// EventName implements Event.
func (ScheduleUpdated) EventName() string { return "schedule.updated" }

// ScheduleDeleted records that a schedule was removed; it fires no more.
type ScheduleDeleted struct {
	ScheduleID string    `json:"scheduleId"`
	By         Actor     `json:"by"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (ScheduleDeleted) EventName() string { return "schedule.deleted" }

// ScheduleFired records the intent of one firing, before its run is
// started: the occurrence ScheduledFor, fired at FiredAt by Worker. The
// firing id is derived from the schedule and the occurrence
// (ScheduleFiringID), and the event is appended at the stream's expected
// version, so one occurrence is fired once across instances. Its outcome
// follows as ScheduleFiringCompleted.
type ScheduleFired struct {
	ScheduleID   string    `json:"scheduleId"`
	FiringID     string    `json:"firingId"`
	ScheduledFor time.Time `json:"scheduledFor"`
	FiredAt      time.Time `json:"firedAt"`
	// Skipped says that earlier occurrences since the last firing were due
	// too (the service was down, say) and are not fired: a schedule catches
	// up once, for its latest occurrence.
	Skipped bool `json:"skipped,omitempty"`
	// Next is the occurrence after ScheduledFor (zero: none), so that a
	// read model knows when the schedule is due again without the cron
	// library.
	Next   time.Time `json:"next,omitzero"`
	Worker string    `json:"worker,omitempty"`
}

// EventName implements Event.
func (ScheduleFired) EventName() string { return "schedule.fired" }

// Firing outcomes.
const (
	// FiringStarted: the firing got a device and its run started.
	FiringStarted = "started"
	// FiringNoDevice: no free device (the schedule's device was leased, or
	// every device of the organisation was); nothing started.
	FiringNoDevice = "no_device"
	// FiringFailed: starting the run was refused for another reason
	// (Reason is the error code).
	FiringFailed = "failed"
	// FiringAbandoned: the instance that fired it stopped before recording
	// what starting the run came to, and no run of the firing is on record.
	// A run that started after all supersedes it (FiringStarted).
	FiringAbandoned = "abandoned"
)

// ScheduleFiringCompleted records what a firing came to: the run it
// started (Outcome FiringStarted; the webhook schedule.triggered follows)
// or why none started. Name is the schedule's name at the firing, for the
// webhook.
type ScheduleFiringCompleted struct {
	ScheduleID   string    `json:"scheduleId"`
	FiringID     string    `json:"firingId"`
	Name         string    `json:"name"`
	ScheduledFor time.Time `json:"scheduledFor"`
	Outcome      string    `json:"outcome"`
	AgentRunID   string    `json:"agentRunId,omitempty"`
	RunID        string    `json:"runId,omitempty"`
	DeviceID     string    `json:"deviceId,omitempty"`
	// Reason is the error code that refused the run (no_device, failed),
	// Detail its message.
	Reason string    `json:"reason,omitempty"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// EventName implements Event.
func (ScheduleFiringCompleted) EventName() string { return "schedule.firing_completed" }

// scheduleTriggered is the data of schedule.triggered (spec 6): sent for
// a firing that got a device and started its run, and for no other.
func scheduleTriggered(e Event) (map[string]any, string, bool) {
	c, ok := e.(ScheduleFiringCompleted)
	if !ok || c.Outcome != FiringStarted {
		return nil, "", false
	}
	return map[string]any{
		"scheduleId":   c.ScheduleID,
		"name":         c.Name,
		"agentRunId":   c.AgentRunID,
		"scheduledFor": FormatWebhookTime(c.ScheduledFor),
	}, "", true
}
