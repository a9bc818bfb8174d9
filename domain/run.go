package domain

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Run states (ARCHITECTURE.md, "Runs").
const (
	RunStateQueued       = "queued"
	RunStateRunning      = "running"
	RunStatePaused       = "paused"
	RunStateAwaitingUser = "awaiting_user"
	RunStateSucceeded    = "succeeded"
	RunStateFailed       = "failed"
	RunStateCancelled    = "cancelled"
)

// RunStates lists every run state, live ones first.
var RunStates = []string{RunStateQueued, RunStateRunning, RunStatePaused, RunStateAwaitingUser, RunStateSucceeded, RunStateFailed, RunStateCancelled}

// Run executors.
const (
	ExecutorBuiltin  = "builtin"
	ExecutorExternal = "external"
)

// Reasons a run ends failed without its worker saying why.
const (
	RunReasonDeadline           = "deadline_exceeded"
	RunReasonMaxSteps           = "max_steps_exceeded"
	RunReasonUserControlTimeout = "user_control_timeout"
	RunReasonSuccessCheckFailed = "success_check_failed"
	RunReasonStaleFrame         = "stale_frame"
	RunReasonPlannerFailed      = "planner_failed"
	RunReasonDeviceLost         = "device_lost"
)

// Bounds of a run's parameters.
const (
	DefaultRunMaxSteps        = 50
	MaxRunMaxSteps            = 1000
	DefaultRunDeadline        = 1800 * time.Second
	MaxRunDeadline            = 24 * time.Hour
	MinRunDeadline            = 10 * time.Second
	DefaultParkDeadline       = 15 * time.Minute
	MaxParkDeadline           = 24 * time.Hour
	MaxRunGoalRunes           = 4000
	MaxRunReasonRunes         = 200
	MaxRunDetailRunes         = 4000
	runTokenPrefix            = "vrx_"
	runTokenSecretBytes       = 32
	runTokenSecretEncodedSize = 43 // base64url without padding of 32 bytes
)

// ActorRun is the actor kind of a run holding its device's lease. A run's
// actions are attributed to its starter, never to the run.
const ActorRun = "run"

// RunStream returns the stream of a run's transitions and steps.
func RunStream(runID string) string { return "run-" + runID }

// SuccessCheck is a predicate on a run's final screen that the service
// evaluates before it accepts succeeded: every field given must hold.
type SuccessCheck struct {
	// Text: an element whose text (or content description) contains it.
	Text string `json:"text,omitempty"`
	// ElementID: an element with this resource id.
	ElementID string `json:"elementId,omitempty"`
	// App: this app (package) is in front.
	App string `json:"app,omitempty"`
}

// Check refuses an empty or oversized check with invalid_argument.
func (c *SuccessCheck) Check() error {
	if c == nil {
		return nil
	}
	if c.Text == "" && c.ElementID == "" && c.App == "" {
		return Errorf(CodeInvalidArgument, "successCheck needs at least one of text, elementId, app")
	}
	for name, v := range map[string]string{"text": c.Text, "elementId": c.ElementID, "app": c.App} {
		if utf8.RuneCountInString(v) > 200 {
			return Errorf(CodeInvalidArgument, "successCheck.%s is longer than 200 characters", name)
		}
	}
	return nil
}

// Run is the aggregate of one run's stream.
type Run struct {
	RunID        string
	AgentRunID   string
	OrgID        string
	DeviceID     string
	Goal         string
	Executor     string
	MaxSteps     int
	DeadlineAt   time.Time
	SuccessCheck *SuccessCheck
	Script       json.RawMessage
	Starter      Actor
	ScheduleID   string
	TokenHash    string
	// LeaseID is the device lease the run holds; empty while parked or
	// ended.
	LeaseID string
	State   string
	StepSeq int
	// LastStepKey is the idempotency key of the run's latest step.
	LastStepKey string
	StartedAt   time.Time
	ClaimedBy   string
	ClaimUntil  time.Time
	// ParkReason and ParkDeadline describe the wait for a person.
	ParkReason   string
	ParkDeadline time.Time
	// ParkedStep is the last script step that parked the run (RunParked's
	// Step): a script is followed from after it, and it is never parked
	// again.
	ParkedStep int
	Reason     *string
	Detail     *string
	EndedAt    time.Time
	// Divergence is where a replay diverged from its script (nil when it
	// did not, or follows none).
	Divergence *RunDiverged
	// UpdatedAt is when the last transition or step happened.
	UpdatedAt time.Time
	Version   int64
}

// Exists reports whether the run was started.
func (r *Run) Exists() bool { return r.RunID != "" }

// Terminal reports whether the run has ended.
func (r *Run) Terminal() bool { return RunTerminal(r.State) }

// RunTerminal reports whether state is a terminal run state.
func RunTerminal(state string) bool {
	return state == RunStateSucceeded || state == RunStateFailed || state == RunStateCancelled
}

// Holder is the actor holding the run's device lease.
func (r *Run) Holder() Actor { return Actor{Kind: ActorRun, ID: r.RunID} }

// Apply changes state by one recorded event.
func (r *Run) Apply(orgID string, e Event, version int64) {
	r.Version = version
	switch e := e.(type) {
	case RunStarted:
		r.RunID, r.AgentRunID, r.OrgID, r.DeviceID, r.Goal = e.RunID, e.AgentRunID, orgID, e.DeviceID, e.Goal
		r.Executor, r.MaxSteps, r.DeadlineAt, r.SuccessCheck = e.Executor, e.MaxSteps, e.DeadlineAt, e.SuccessCheck
		r.Script, r.Starter, r.ScheduleID, r.TokenHash = e.Script, e.Starter, e.ScheduleID, e.TokenHash
		r.LeaseID, r.StartedAt, r.UpdatedAt = e.LeaseID, e.StartedAt, e.StartedAt
		r.State = RunStateRunning
		if e.Executor == ExecutorBuiltin {
			r.State = RunStateQueued
		}
	case RunClaimed:
		r.ClaimedBy, r.ClaimUntil, r.UpdatedAt = e.Worker, e.Until, e.ClaimedAt
		if r.State == RunStateQueued {
			r.State = RunStateRunning
		}
	case RunPaused:
		// A paused run's executor lets go; resuming queues it again.
		r.State, r.ClaimedBy, r.ClaimUntil, r.UpdatedAt = RunStatePaused, "", time.Time{}, e.At
	case RunResumed:
		if e.LeaseID != "" {
			r.LeaseID = e.LeaseID
		}
		r.ParkReason, r.ParkDeadline, r.UpdatedAt = "", time.Time{}, e.At
		r.State = RunStateRunning
		if r.Executor == ExecutorBuiltin && r.ClaimedBy == "" {
			r.State = RunStateQueued
		}
	case RunParked:
		r.State, r.ParkReason, r.ParkDeadline, r.LeaseID = RunStateAwaitingUser, e.Reason, e.DeadlineAt, ""
		r.ClaimedBy, r.ClaimUntil, r.UpdatedAt = "", time.Time{}, e.At
		r.ParkedStep = max(r.ParkedStep, e.Step)
	case RunStepTaken:
		r.StepSeq, r.LastStepKey, r.UpdatedAt = e.Seq, e.IdempotencyKey, e.At
	case RunDiverged:
		d := e
		r.Divergence = &d
	case RunEnded:
		r.State, r.Reason, r.Detail, r.EndedAt, r.LeaseID = e.State, e.Reason, e.Detail, e.EndedAt, ""
		r.UpdatedAt = e.EndedAt
	}
}

// Live reports whether the run token still works at now: the run exists,
// has not ended and its deadline has not passed.
func (r *Run) Live(now time.Time) bool {
	return r.Exists() && !r.Terminal() && now.Before(r.DeadlineAt)
}

// ErrRunNotFound is the answer for a run the caller cannot see.
func ErrRunNotFound(id string) *Error {
	return Errorf(CodeRunNotFound, "no run %s", id)
}

// errRunState refuses a transition the run's state does not allow.
func errRunState(r *Run, what string) *Error {
	return Errorf(CodeInvalidArgument, "run %s is %s; it cannot be %s", r.RunID, r.State, what).
		With("state", r.State).WithRetryable(false)
}

// Claim gives a queued built-in run (or a running one whose claim lapsed)
// to worker until now+ttl, or renews worker's own claim. A paused, parked
// or ended run is refused: resuming queues it again.
func (r *Run) Claim(now time.Time, worker string, ttl time.Duration) ([]Event, error) {
	switch {
	case r.Executor != ExecutorBuiltin || r.State != RunStateQueued && r.State != RunStateRunning:
		// Paused, parked or ended: nobody drives it (resuming queues it).
		return nil, errRunState(r, "claimed")
	case r.ClaimedBy != "" && r.ClaimedBy != worker && now.Before(r.ClaimUntil):
		return nil, errRunState(r, "claimed by another worker")
	case r.State == RunStateRunning && r.ClaimedBy == "":
		return nil, errRunState(r, "claimed")
	}
	return []Event{RunClaimed{RunID: r.RunID, Worker: worker, ClaimedAt: now, Until: now.Add(ttl)}}, nil
}

// Pause stops the run between steps. Pausing a paused run changes nothing.
func (r *Run) Pause(now time.Time, by Actor) ([]Event, error) {
	switch r.State {
	case RunStatePaused:
		return nil, nil
	case RunStateQueued, RunStateRunning:
		return []Event{RunPaused{RunID: r.RunID, By: by, At: now}}, nil
	}
	return nil, errRunState(r, "paused")
}

// Resume continues a paused run, or a parked one under the new lease
// leaseID (its device taken back by the command). Resuming a running or
// queued run changes nothing.
func (r *Run) Resume(now time.Time, by Actor, leaseID string) ([]Event, error) {
	switch r.State {
	case RunStateQueued, RunStateRunning:
		return nil, nil
	case RunStatePaused:
		return []Event{RunResumed{RunID: r.RunID, By: by, At: now}}, nil
	case RunStateAwaitingUser:
		return []Event{RunResumed{RunID: r.RunID, By: by, LeaseID: leaseID, At: now}}, nil
	}
	return nil, errRunState(r, "resumed")
}

// Park asks for a person until now+wait; the command gives up the lease.
// step is the 1-based script step asking (0 when none): a step at or before
// the last one that parked the run was already asked, and parking for it
// again records nothing (no second wait, no second notification), whoever
// asks.
func (r *Run) Park(now time.Time, reason string, wait time.Duration, step int) ([]Event, error) {
	if step > 0 && step <= r.ParkedStep {
		return nil, nil
	}
	if r.State != RunStateRunning {
		return nil, errRunState(r, "parked")
	}
	if utf8.RuneCountInString(reason) > MaxRunReasonRunes {
		return nil, Errorf(CodeInvalidArgument, "reason is longer than %d characters", MaxRunReasonRunes)
	}
	return []Event{RunParked{RunID: r.RunID, AgentRunID: r.AgentRunID, DeviceID: r.DeviceID, Goal: r.Goal,
		Reason: reason, DeadlineAt: now.Add(wait), Step: step, At: now}}, nil
}

// Step records the next step. A run that is not running refuses it; the
// step past MaxSteps is refused with ok false and the caller ends the run.
func (r *Run) Step(now time.Time, step RunStepTaken) (evs []Event, withinBudget bool, err error) {
	if r.State != RunStateRunning {
		return nil, true, errRunState(r, "stepped")
	}
	if r.StepSeq >= r.MaxSteps {
		return nil, false, nil
	}
	step.RunID, step.Seq, step.At = r.RunID, r.StepSeq+1, now
	return []Event{step}, true, nil
}

// End records a terminal state. Ending an ended run changes nothing.
func (r *Run) End(now time.Time, state, reason, detail string, by *Actor) ([]Event, error) {
	if r.Terminal() {
		return nil, nil
	}
	if !RunTerminal(state) {
		return nil, Errorf(CodeInvalidArgument, "state must be one of succeeded, failed")
	}
	if utf8.RuneCountInString(reason) > MaxRunReasonRunes {
		return nil, Errorf(CodeInvalidArgument, "reason is longer than %d characters", MaxRunReasonRunes)
	}
	if utf8.RuneCountInString(detail) > MaxRunDetailRunes {
		return nil, Errorf(CodeInvalidArgument, "detail is longer than %d characters", MaxRunDetailRunes)
	}
	return []Event{RunEnded{RunID: r.RunID, AgentRunID: r.AgentRunID, DeviceID: r.DeviceID, Goal: r.Goal,
		State: state, StepSeq: r.StepSeq, Reason: nullable(reason), Detail: nullable(detail), By: by, EndedAt: now}}, nil
}

// Overdue returns the events ending a run whose deadline, or whose wait
// for a person, has passed at now; none otherwise.
func (r *Run) Overdue(now time.Time) []Event {
	if !r.Exists() || r.Terminal() {
		return nil
	}
	reason := ""
	switch {
	case !now.Before(r.DeadlineAt):
		reason = RunReasonDeadline
	case r.State == RunStateAwaitingUser && !now.Before(r.ParkDeadline):
		reason = RunReasonUserControlTimeout
	default:
		return nil
	}
	evs, _ := r.End(now, RunStateFailed, reason, "", nil)
	return evs
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CheckRunGoal refuses an empty or oversized goal with invalid_argument.
func CheckRunGoal(goal string) error {
	if strings.TrimSpace(goal) == "" {
		return Errorf(CodeInvalidArgument, "goal is required")
	}
	if !utf8.ValidString(goal) || utf8.RuneCountInString(goal) > MaxRunGoalRunes {
		return Errorf(CodeInvalidArgument, "goal must be valid text of at most %d characters", MaxRunGoalRunes)
	}
	return nil
}

// NewRunToken returns a fresh run token for runID and the hash of its
// secret to record. The token is vrx_<run id body>_<secret>.
func NewRunToken(runID string) (token, hash string) {
	b := make([]byte, runTokenSecretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	secret := base64.RawURLEncoding.EncodeToString(b)
	return runTokenPrefix + strings.TrimPrefix(runID, PrefixRun+"_") + "_" + secret, HashRunSecret(secret)
}

// HashRunSecret returns the recorded form of a run token's secret.
func HashRunSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ParseRunToken splits a run token into the run id it names and its
// secret; ok is false for anything not shaped as a run token.
func ParseRunToken(token string) (runID, secret string, ok bool) {
	body, found := strings.CutPrefix(token, runTokenPrefix)
	if !found || len(body) != 32+1+runTokenSecretEncodedSize || body[32] != '_' {
		return "", "", false
	}
	runID, secret = PrefixRun+"_"+body[:32], body[33:]
	if !HasPrefix(runID, PrefixRun) {
		return "", "", false
	}
	// The decoder skips line breaks; the token's alphabet is checked
	// first so that one token has one spelling.
	for _, c := range []byte(secret) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", "", false
		}
	}
	if _, err := base64.RawURLEncoding.DecodeString(secret); err != nil {
		return "", "", false
	}
	return runID, secret, true
}

// TokenMatches reports, in constant time, whether secret is the run's.
func (r *Run) TokenMatches(secret string) bool {
	return r.TokenHash != "" && subtle.ConstantTimeCompare([]byte(HashRunSecret(secret)), []byte(r.TokenHash)) == 1
}
