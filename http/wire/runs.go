package wire

import (
	"strconv"
	"time"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of runs (ARCHITECTURE.md, "Runs"), as both /v1/runs and the
// MCP run tools answer them.
//
// Null or absent: every member of a run is always present; a value the run
// does not have (yet) is null — endedAt, reason and detail until it ends,
// scheduleId when no schedule started it, successCheck when it has none,
// parkedReason and parkDeadlineAt unless it is parked (awaiting_user). A
// client can therefore read a field without first testing for it. Page
// cursors follow the rest of the API instead: absent on the last page.

// Run is a run as the API shows it.
type Run struct {
	AgentRunID   string               `json:"agentRunId"`
	RunID        string               `json:"runId"`
	State        string               `json:"state"`
	DeviceID     string               `json:"deviceId"`
	Goal         string               `json:"goal"`
	Executor     string               `json:"executor"`
	StepSeq      int                  `json:"stepSeq"`
	MaxSteps     int                  `json:"maxSteps"`
	DeadlineAt   time.Time            `json:"deadlineAt"`
	CreatedAt    time.Time            `json:"createdAt"`
	UpdatedAt    time.Time            `json:"updatedAt"`
	EndedAt      *time.Time           `json:"endedAt"`
	Reason       *string              `json:"reason"`
	Detail       *string              `json:"detail"`
	Starter      domain.ReceiptActor  `json:"starter"`
	ScheduleID   *string              `json:"scheduleId"`
	SuccessCheck *domain.SuccessCheck `json:"successCheck"`
	// HasScript says the run follows a script (POST /v1/runs with script).
	HasScript      bool       `json:"hasScript"`
	ParkedReason   *string    `json:"parkedReason"`
	ParkDeadlineAt *time.Time `json:"parkDeadlineAt"`
}

// NewRun returns v as the API shows it.
func NewRun(v projections.RunView) Run {
	out := Run{AgentRunID: v.AgentRunID, RunID: v.RunID, State: v.State, DeviceID: v.DeviceID, Goal: v.Goal,
		Executor: v.Executor, StepSeq: v.StepSeq, MaxSteps: v.MaxSteps, DeadlineAt: v.DeadlineAt.UTC(),
		CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC(), EndedAt: utc(v.EndedAt), Reason: v.Reason,
		Detail: v.Detail, Starter: v.Starter, SuccessCheck: v.SuccessCheck, HasScript: v.HasScript}
	if v.ScheduleID != "" {
		out.ScheduleID = &v.ScheduleID
	}
	if v.State == domain.RunStateAwaitingUser {
		reason := v.ParkReason
		out.ParkedReason, out.ParkDeadlineAt = &reason, utc(v.ParkDeadlineAt)
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// StartedRun answers POST /v1/runs: the run and, for its starter only, the
// base URL of its device surface (the run token is inside it).
type StartedRun struct {
	Run
	VrxBaseURL string `json:"vrxBaseUrl"`
}

// NewStartedRun returns s as its starter sees it.
func NewStartedRun(s runs.StartedRun) StartedRun {
	return StartedRun{Run: NewRun(s.Run), VrxBaseURL: s.VrxBaseURL}
}

// RunPage is one page of runs, newest first; NextBefore, absent on the
// last page, is the cursor of the next.
type RunPage struct {
	Runs       []Run  `json:"runs"`
	NextBefore string `json:"nextBefore,omitempty"`
}

// NewRunPage returns p as the API lists it (runs never null).
func NewRunPage(p projections.RunPage) RunPage {
	return RunPage{Runs: each(p.Runs, NewRun), NextBefore: p.NextBefore}
}

// RunFrame is one frame of a run's frame index: a frame the run observed,
// or the frame before or after one of its actions (actionId names it; null
// for an observation).
type RunFrame struct {
	FrameID  string    `json:"frameId"`
	Kind     string    `json:"kind"`
	ActionID *string   `json:"actionId"`
	At       time.Time `json:"at"`
}

// NewRunFrame returns f as the API shows it.
func NewRunFrame(f projections.RunFrame) RunFrame {
	out := RunFrame{FrameID: f.FrameID, Kind: f.Kind, At: f.At.UTC()}
	if f.ActionID != "" {
		out.ActionID = &f.ActionID
	}
	return out
}

// RunFramePage is one page of a run's frames, oldest first; NextAfter,
// absent on the last page, is the cursor of the next (opaque to clients).
type RunFramePage struct {
	Frames    []RunFrame `json:"frames"`
	NextAfter string     `json:"nextAfter,omitempty"`
}

// NewRunFramePage returns p as the API lists it (frames never null).
func NewRunFramePage(p projections.RunFramePage) RunFramePage {
	out := RunFramePage{Frames: each(p.Frames, NewRunFrame)}
	if p.NextAfter > 0 {
		out.NextAfter = strconv.FormatInt(p.NextAfter, 10)
	}
	return out
}

// ParseRunFrameCursor reads a cursor NewRunFramePage wrote; ok is false for
// anything else. The empty string is the first page.
func ParseRunFrameCursor(s string) (after int64, ok bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// NewRunScript returns s as the API shows it (steps never null). The
// script is the body POST /v1/runs accepts as `script`, unchanged.
func NewRunScript(s domain.RunScript) domain.RunScript {
	if s.Steps == nil {
		s.Steps = []domain.ScriptStep{}
	}
	return s
}

// RunDivergence is a run's divergence report (GET /v1/runs/{runId}/divergence
// and the get_run_divergence tool): whether the run replays a script, its
// state and steps taken, and the first step where it diverged from the
// script (null while it has not).
type RunDivergence struct {
	RunID      string        `json:"runId"`
	State      string        `json:"state"`
	Replay     bool          `json:"replay"`
	Steps      int           `json:"steps"`
	Divergence *DivergedStep `json:"divergence"`
}

// DivergedStep is where a replay diverged: the step (1-based, in the
// script), its action, why, and the original's and the replay's frames
// with their effects, side by side. A frame is read with GET
// /v1/frames/{frameId}; null when there is none (a script without frame
// ids, a phone that could not be looked at).
type DivergedStep struct {
	Step     int           `json:"step"`
	Action   *string       `json:"action"`
	Reason   string        `json:"reason"`
	Detail   *string       `json:"detail"`
	Expected DivergedFrame `json:"expected"`
	Actual   DivergedFrame `json:"actual"`
	At       time.Time     `json:"at"`
}

// DivergedFrame is one side of a divergence.
type DivergedFrame struct {
	FrameID *string `json:"frameId"`
	Effect  *string `json:"effect"`
}

// NewRunDivergence returns d as the API shows it.
func NewRunDivergence(d runs.RunDivergence) RunDivergence {
	out := RunDivergence{RunID: d.Run.RunID, State: d.Run.State, Replay: d.Replay, Steps: d.Steps}
	if dv := d.Divergence; dv != nil {
		out.Divergence = &DivergedStep{Step: dv.Step, Action: optionalString(dv.Action), Reason: dv.Reason, Detail: optionalString(dv.Detail),
			Expected: DivergedFrame{FrameID: optionalString(dv.ExpectedFrame), Effect: optionalString(dv.ExpectedEffect)},
			Actual:   DivergedFrame{FrameID: optionalString(dv.ActualFrame), Effect: optionalString(dv.ActualEffect)}, At: dv.At}
	}
	return out
}
