package domain

import (
	"encoding/json"
	"time"
)

// runEvents are the events of runs (one stream per run, RunStream) and of
// schedules.
var runEvents = []EventDef{
	Def[RunStarted](1, nil),
	Def[RunClaimed](1, nil),
	Def[RunPaused](1, nil),
	Def[RunResumed](1, nil),
	Def[RunParked](1, nil),
	Def[RunStepTaken](1, nil),
	Def[RunEnded](1, nil),
	Def[RunDiverged](1, nil),
}

// RunStarted records a run accepted for a device: its goal and bounds, who
// started it, and the hash of its run token. It is the first event of the
// run's stream; the device's lease for the run (held by the run) is
// acquired in the same unit of work.
type RunStarted struct {
	RunID      string `json:"runId"`
	AgentRunID string `json:"agentRunId"`
	DeviceID   string `json:"deviceId"`
	Goal       string `json:"goal"`
	// Executor is builtin (the service's agent loop) or external (the
	// starter's worker through vrxBaseUrl).
	Executor string `json:"executor"`
	MaxSteps int    `json:"maxSteps"`
	// DeadlineAt ends the run failed when it has not ended by then.
	DeadlineAt   time.Time     `json:"deadlineAt"`
	SuccessCheck *SuccessCheck `json:"successCheck,omitempty"`
	// Script, when present, is what the scripted planner follows.
	Script json.RawMessage `json:"script,omitempty"`
	// Starter is who started the run; its actions are attributed to it.
	Starter Actor `json:"starter"`
	// ScheduleID names the schedule that started it, if one did.
	ScheduleID string `json:"scheduleId,omitempty"`
	// TokenHash is the SHA-256 of the run token's secret, hex.
	TokenHash string    `json:"tokenHash"`
	LeaseID   string    `json:"leaseId"`
	StartedAt time.Time `json:"startedAt"`
}

// EventName implements Event.
func (RunStarted) EventName() string { return "run.started" }

// RunClaimed records that a built-in executor took a queued run (or one
// whose previous claim lapsed) until Until; the claim is renewed by
// claiming again.
type RunClaimed struct {
	RunID     string    `json:"runId"`
	Worker    string    `json:"worker"`
	ClaimedAt time.Time `json:"claimedAt"`
	Until     time.Time `json:"until"`
}

// EventName implements Event.
func (RunClaimed) EventName() string { return "run.claimed" }

// RunPaused records that the run will take no further step until resumed.
type RunPaused struct {
	RunID string    `json:"runId"`
	By    Actor     `json:"by"`
	At    time.Time `json:"at"`
}

// EventName implements Event.
func (RunPaused) EventName() string { return "run.paused" }

// RunResumed records that a paused or parked run goes on. A parked run
// takes its device back under a new lease (LeaseID).
type RunResumed struct {
	RunID   string    `json:"runId"`
	By      Actor     `json:"by"`
	LeaseID string    `json:"leaseId,omitempty"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (RunResumed) EventName() string { return "run.resumed" }

// RunParked records that the run needs a person: it waits in
// awaiting_user until DeadlineAt, and its lease is given up so a person
// can take the device.
type RunParked struct {
	RunID      string    `json:"runId"`
	AgentRunID string    `json:"agentRunId"`
	DeviceID   string    `json:"deviceId"`
	Goal       string    `json:"goal"`
	Reason     string    `json:"reason"`
	DeadlineAt time.Time `json:"deadlineAt"`
	// Step is the 1-based script step that parked the run (the built-in
	// executor following a script); 0 when no script step did. An
	// executor taking the run over goes on after it.
	Step int       `json:"step,omitempty"`
	At   time.Time `json:"at"`
}

// EventName implements Event.
func (RunParked) EventName() string { return "run.parked" }

// RunStepTaken records one step of the run: an action requested through
// the device surface, recorded in the same unit as the action's request.
// The action's outcome is the action's (its receipt).
type RunStepTaken struct {
	RunID          string          `json:"runId"`
	Seq            int             `json:"seq"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Action         ActionType      `json:"action"`
	Arguments      json.RawMessage `json:"arguments"`
	ObservedFrame  string          `json:"observedFrame,omitempty"`
	// ObservedScreen is the screen hash of ObservedFrame, so that a
	// replay can tell whether another device shows the same screen.
	ObservedScreen string    `json:"observedScreen,omitempty"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (RunStepTaken) EventName() string { return "run.step_taken" }

// RunEnded records a terminal state however it was reached, with what the
// run.ended webhook carries.
type RunEnded struct {
	RunID      string  `json:"runId"`
	AgentRunID string  `json:"agentRunId"`
	DeviceID   string  `json:"deviceId"`
	Goal       string  `json:"goal"`
	State      string  `json:"state"`
	StepSeq    int     `json:"stepSeq"`
	Reason     *string `json:"reason"`
	Detail     *string `json:"detail"`
	// By is who ended it when a person or key did (cancel); empty when
	// the run's worker or the service did.
	By      *Actor    `json:"by,omitempty"`
	EndedAt time.Time `json:"endedAt"`
}

// EventName implements Event.
func (RunEnded) EventName() string { return "run.ended" }
