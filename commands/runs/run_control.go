package runs

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// StartRunHandler handles StartRun.
type StartRunHandler struct{ *Runs }

// Handle hands a device to a new run: the run's first event and the
// device's lease for it (held by the run, until the run's deadline) commit
// as one unit, so a device is never given to two runs or to a run and a
// person at once. It needs runs:start and devices:act. Errors:
// permission_denied, invalid_argument, device_unavailable (not_found;
// already_leased, also when no device of the organisation is free).
func (r StartRunHandler) Handle(ctx context.Context, cmd StartRun) (StartedRun, error) {
	auth := cmd.Auth
	if err := auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return StartedRun{}, err
	}
	started, err := newRunStarted(cmd)
	if err != nil {
		return StartedRun{}, err
	}
	candidates := []string{cmd.DeviceID}
	if cmd.DeviceID == "" {
		if candidates, err = r.freeDevices(ctx, auth); err != nil {
			return StartedRun{}, err
		}
	}
	runID := domain.NewID(domain.PrefixRun)
	token, hash := domain.NewRunToken(runID)
	started.RunID, started.AgentRunID, started.TokenHash = runID, domain.NewID(domain.PrefixAgentRun), hash
	started.Starter = domain.ActorOf(auth)
	deadline := time.Duration(cmd.DeadlineSeconds) * time.Second
	if deadline == 0 {
		deadline = domain.DefaultRunDeadline
	}
	holder := domain.Actor{Kind: domain.ActorRun, ID: runID}
	var committed eventstore.Committed
	err = domain.ErrDeviceNotFound(cmd.DeviceID)
	if cmd.DeviceID == "" {
		err = domain.Errorf(domain.CodeDeviceUnavailable, "no device of the organisation is free; retry when one is").
			With("reason", domain.ReasonAlreadyLeased).WithRetryable(true)
	}
	for _, id := range candidates {
		if _, verr := r.devices.Visible(ctx, auth, id); verr != nil {
			if cmd.DeviceID != "" {
				return StartedRun{}, verr
			}
			continue
		}
		now := r.now()
		started.DeviceID, started.LeaseID, started.StartedAt = id, domain.NewID(domain.PrefixLease), now
		started.DeadlineAt = now.Add(deadline)
		var derr error
		committed, derr = r.devices.UpdateDevice(ctx, id, func(d *domain.Device, u *eventstore.Unit) ([]domain.Event, error) {
			evs, err := d.AcquireLease(now, holder, started.LeaseID, deadline)
			if err != nil {
				return nil, err
			}
			news, err := eventstore.Encode(domain.Events, auth.OrgID, domain.Event(started))
			if err != nil {
				return nil, err
			}
			u.Append(domain.RunStream(runID), eventstore.NoStream, news...)
			return evs, nil
		})
		if derr == nil {
			err = nil
			break
		}
		var de *domain.Error
		if cmd.DeviceID != "" || !errors.As(derr, &de) || de.Code != domain.CodeDeviceUnavailable {
			return StartedRun{}, derr
		}
	}
	if err != nil {
		return StartedRun{}, err
	}
	if err := r.wait(ctx, committed.Last()); err != nil {
		return StartedRun{}, err
	}
	run, _, err := r.runs.Load(ctx, runID)
	if err != nil {
		return StartedRun{}, err
	}
	return StartedRun{Run: runView(run), VrxBaseURL: r.cfg.BaseURL() + "/vrx/" + token}, nil
}

// newRunStarted checks a start request's parameters and returns the event
// to record, without ids and times.
func newRunStarted(cmd StartRun) (domain.RunStarted, error) {
	if err := domain.CheckRunGoal(cmd.Goal); err != nil {
		return domain.RunStarted{}, err
	}
	if cmd.DeviceID != "" && !domain.HasPrefix(cmd.DeviceID, domain.PrefixDevice) {
		return domain.RunStarted{}, domain.ErrDeviceNotFound(cmd.DeviceID)
	}
	maxSteps := cmd.MaxSteps
	switch {
	case maxSteps == 0:
		maxSteps = domain.DefaultRunMaxSteps
	case maxSteps < 1 || maxSteps > domain.MaxRunMaxSteps:
		return domain.RunStarted{}, domain.Errorf(domain.CodeInvalidArgument, "maxSteps must be between 1 and %d", domain.MaxRunMaxSteps)
	}
	if d := time.Duration(cmd.DeadlineSeconds) * time.Second; cmd.DeadlineSeconds != 0 && (d < domain.MinRunDeadline || d > domain.MaxRunDeadline) {
		return domain.RunStarted{}, domain.Errorf(domain.CodeInvalidArgument, "deadlineSeconds must be between %d and %d",
			int(domain.MinRunDeadline.Seconds()), int(domain.MaxRunDeadline.Seconds()))
	}
	executor := cmd.Executor
	switch executor {
	case "":
		executor = domain.ExecutorBuiltin
	case domain.ExecutorBuiltin, domain.ExecutorExternal:
	default:
		return domain.RunStarted{}, domain.Errorf(domain.CodeInvalidArgument, "executor must be builtin or external")
	}
	if err := cmd.SuccessCheck.Check(); err != nil {
		return domain.RunStarted{}, err
	}
	var script json.RawMessage
	if len(cmd.Script) > 0 && string(cmd.Script) != "null" {
		if executor != domain.ExecutorBuiltin {
			return domain.RunStarted{}, domain.Errorf(domain.CodeInvalidArgument, "a script is followed by the builtin executor only")
		}
		s, err := domain.ParseRunScript(cmd.Script)
		if err != nil {
			return domain.RunStarted{}, err
		}
		if script, err = json.Marshal(s); err != nil {
			return domain.RunStarted{}, err
		}
	}
	return domain.RunStarted{Goal: cmd.Goal, Executor: executor, MaxSteps: maxSteps, SuccessCheck: cmd.SuccessCheck,
		Script: script, ScheduleID: cmd.ScheduleID}, nil
}

// freeDevices lists the organisation's devices the caller can see that
// hold no lease in force, oldest first (a start tries them in turn).
func (r *Runs) freeDevices(ctx context.Context, auth domain.Auth) ([]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT d.device_id FROM public.devices d
		WHERE d.org_id = $1 AND ($2::text[] IS NULL OR d.device_id = ANY($2))
		  AND NOT EXISTS (SELECT 1 FROM public.leases l WHERE l.device_id = d.device_id AND l.state = 'active' AND l.expires_at > $3)
		ORDER BY d.device_id LIMIT 100`, auth.OrgID, auth.Devices, r.now())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// resolve loads the run a caller names by runId or agentRunId: one of its
// organisation whose device it can see; anything else is run_not_found.
func (r *Runs) resolve(ctx context.Context, ref RunRef) (domain.Run, error) {
	if err := ref.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return domain.Run{}, err
	}
	runID := ref.RunID
	switch {
	case domain.HasPrefix(runID, domain.PrefixRun):
	case domain.HasPrefix(runID, domain.PrefixAgentRun):
		v, ok, err := projections.FindRun(ctx, r.pool, ref.Auth.OrgID, runID)
		if err != nil {
			return domain.Run{}, err
		}
		if !ok {
			return domain.Run{}, runNotFound(ref.RunID)
		}
		runID = v.RunID
	default:
		return domain.Run{}, runNotFound(ref.RunID)
	}
	run, _, err := r.runs.Load(ctx, runID)
	if err != nil {
		return domain.Run{}, err
	}
	if !run.Exists() || run.OrgID != ref.Auth.OrgID || !ref.Auth.CanSeeDevice(run.DeviceID) {
		return domain.Run{}, runNotFound(ref.RunID)
	}
	return run, nil
}

// GetRunHandler handles GetRun.
type GetRunHandler struct{ *Runs }

// Handle reads a run (by runId or agentRunId).
func (r GetRunHandler) Handle(ctx context.Context, q GetRun) (projections.RunView, error) {
	run, err := r.resolve(ctx, RunRef(q))
	if err != nil {
		return projections.RunView{}, err
	}
	return runView(run), nil
}

// PauseRunHandler handles PauseRun.
type PauseRunHandler struct{ *Runs }

// Handle stops a run between steps: its executor lets go, and a worker's
// actions are refused until it is resumed. Pausing a paused run changes
// nothing; an ended or parked one answers invalid_argument with its state.
func (r PauseRunHandler) Handle(ctx context.Context, cmd PauseRun) (projections.RunView, error) {
	return r.transition(ctx, RunRef(cmd), func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		return run.Pause(now, domain.ActorOf(cmd.Auth))
	})
}

// ResumeRunHandler handles ResumeRun.
type ResumeRunHandler struct{ *Runs }

// Handle continues a paused run, or a parked one: the device goes back to
// the run under a new lease, taken over from the caller when the caller
// holds it (a person who acted while the run was parked hands it back
// this way). Errors: invalid_argument (ended, or past its deadline),
// device_unavailable (already_leased by someone else).
func (r ResumeRunHandler) Handle(ctx context.Context, cmd ResumeRun) (projections.RunView, error) {
	return r.transition(ctx, RunRef(cmd), func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		if run.Terminal() || !now.Before(run.DeadlineAt) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "run %s has ended or is past its deadline", run.RunID).
				With("state", run.State).WithRetryable(false)
		}
		leaseID := ""
		if run.State == domain.RunStateAwaitingUser {
			leaseID = domain.NewID(domain.PrefixLease)
			by, ttl := domain.ActorOf(cmd.Auth), run.DeadlineAt.Sub(now)
			if err := r.deviceEvents(ctx, u, run, func(d *domain.Device) ([]domain.Event, error) {
				return d.HandLease(now, by, run.Holder(), leaseID, ttl)
			}); err != nil {
				return nil, err
			}
		}
		return run.Resume(now, domain.ActorOf(cmd.Auth), leaseID)
	})
}

// CancelRunHandler handles CancelRun.
type CancelRunHandler struct{ *Runs }

// Handle ends a run cancelled and gives its device back; its run token
// stops working from the next request. Cancelling an ended run changes
// nothing.
func (r CancelRunHandler) Handle(ctx context.Context, cmd CancelRun) (projections.RunView, error) {
	by := domain.ActorOf(cmd.Auth)
	return r.transition(ctx, RunRef(cmd), func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		return r.end(ctx, u, run, now, domain.RunStateCancelled, "", "", &by)
	})
}

// transition resolves the run, then decides and appends through the run
// repository and answers the run as it now stands.
func (r *Runs) transition(ctx context.Context, ref RunRef, decide func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error)) (projections.RunView, error) {
	run, err := r.resolve(ctx, ref)
	if err != nil {
		return projections.RunView{}, err
	}
	return r.change(ctx, run.RunID, decide)
}

// change decides on a run through the repository and waits for the read
// models, so a following list shows the change.
func (r *Runs) change(ctx context.Context, runID string, decide func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error)) (projections.RunView, error) {
	run, c, err := r.runs.UpdateWith(ctx, runID, func(run *domain.Run, u *eventstore.Unit) ([]domain.Event, error) {
		return decide(run, u, r.now())
	})
	if err != nil {
		return projections.RunView{}, err
	}
	// A transition may end, give up or hand over the device's lease in the
	// same unit: the lease and device read models show it too.
	if err := r.wait(ctx, c.Last()); err != nil {
		return projections.RunView{}, err
	}
	return runView(run), nil
}

// end returns the events ending run in state, and adds to u the end of
// the run's lease on its device.
func (r *Runs) end(ctx context.Context, u *eventstore.Unit, run *domain.Run, now time.Time, state, reason, detail string, by *domain.Actor) ([]domain.Event, error) {
	evs, err := run.End(now, state, reason, detail, by)
	if err != nil || len(evs) == 0 {
		return evs, err
	}
	return evs, r.releaseDevice(ctx, u, run, now)
}

// releaseDevice adds to u the end of the run's lease, if it still holds one.
func (r *Runs) releaseDevice(ctx context.Context, u *eventstore.Unit, run *domain.Run, now time.Time) error {
	if run.LeaseID == "" {
		return nil
	}
	leaseID := run.LeaseID
	return r.deviceEvents(ctx, u, run, func(d *domain.Device) ([]domain.Event, error) {
		return d.GiveUpLease(now, leaseID), nil
	})
}

// deviceEvents adds to u the events decide returns for the run's device,
// appended at the version they were decided on (a device that moved on
// fails the unit with a conflict, and the run's repository decides again).
func (r *Runs) deviceEvents(ctx context.Context, u *eventstore.Unit, run *domain.Run, decide func(d *domain.Device) ([]domain.Event, error)) error {
	return r.devices.DecideInto(ctx, u, run.DeviceID, decide)
}

// EndRunsOnDeviceInto adds to u the end of every run on deviceID, a
// device the caller retires in u: the run holding its lease (holder, read
// from the device's stream by the caller) and any other live run on it
// (parked, or paused without the lease, from the runs read model). Each
// ends failed, reason device_lost, with detail saying why, appended at the
// version of its stream decided on. The caller's unit already ends the
// device's lease, so nothing else is added to the device's stream.
func (r *Runs) EndRunsOnDeviceInto(ctx context.Context, u *eventstore.Unit, deviceID string, holder domain.Actor, detail string,
	now time.Time) error {
	ids, err := projections.LiveRunsOnDevice(ctx, r.pool, deviceID)
	if err != nil {
		return err
	}
	if holder.Kind == domain.ActorRun && !slices.Contains(ids, holder.ID) {
		ids = append(ids, holder.ID)
	}
	for _, id := range ids {
		if _, err := r.runs.DecideInto(ctx, u, id, func(run *domain.Run) ([]domain.Event, error) {
			if !run.Exists() || run.DeviceID != deviceID {
				return nil, nil
			}
			return run.End(now, domain.RunStateFailed, domain.RunReasonDeviceLost, detail, nil)
		}); err != nil {
			return err
		}
	}
	return nil
}

// ClaimRunHandler handles ClaimRun.
type ClaimRunHandler struct{ *Runs }

// Handle gives a queued built-in run to a worker (or renews its claim).
// Of two workers claiming one run, one wins; the other gets
// invalid_argument.
func (r ClaimRunHandler) Handle(ctx context.Context, cmd ClaimRun) (domain.Run, error) {
	if cmd.Worker == "" || cmd.TTL <= 0 {
		return domain.Run{}, domain.Errorf(domain.CodeInvalidArgument, "a claim needs a worker and a time to live")
	}
	run, _, err := r.runs.Update(ctx, cmd.RunID, func(run *domain.Run) ([]domain.Event, error) {
		if !run.Exists() {
			return nil, runNotFound(cmd.RunID)
		}
		now := r.now()
		if !run.Live(now) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "run %s has ended or is past its deadline", run.RunID).
				With("state", run.State)
		}
		return run.Claim(now, cmd.Worker, cmd.TTL)
	})
	return run, err
}

// EndOverdueRunHandler handles EndOverdueRun.
type EndOverdueRunHandler struct{ *Runs }

// Handle ends a run past its deadline (failed, deadline_exceeded) or
// parked past its wait for a person (failed, user_control_timeout), and
// gives its device back. It reports whether it ended the run.
func (r EndOverdueRunHandler) Handle(ctx context.Context, cmd EndOverdueRun) (bool, error) {
	ended := false
	_, err := r.change(ctx, cmd.RunID, func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		evs := run.Overdue(now)
		ended = len(evs) > 0
		if !ended {
			return nil, nil
		}
		return evs, r.releaseDevice(ctx, u, run, now)
	})
	return ended, err
}

// ListRunsHandler handles ListRuns.
type ListRunsHandler struct{ *Runs }

// Handle pages through the organisation's runs among the devices the caller
// can see, newest first.
func (r ListRunsHandler) Handle(ctx context.Context, q ListRuns) (projections.RunPage, error) {
	if err := q.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.RunPage{}, err
	}
	rq := q.RunQuery
	if rq.State != "" && !validRunState(rq.State) {
		return projections.RunPage{}, domain.Errorf(domain.CodeInvalidArgument, "state must be one of queued, running, paused, awaiting_user, succeeded, failed, cancelled")
	}
	if rq.StarterUserID != "" && rq.StarterKeyID != "" {
		return projections.RunPage{}, domain.Errorf(domain.CodeInvalidArgument, "starterUserId and starterApiKeyId are mutually exclusive")
	}
	if rq.Before != "" && !domain.HasPrefix(rq.Before, domain.PrefixRun) {
		return projections.RunPage{}, domain.Errorf(domain.CodeInvalidArgument, "before must be a nextBefore cursor from a previous page")
	}
	if rq.Limit < 0 {
		return projections.RunPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1")
	}
	return projections.ListRuns(ctx, r.pool, q.Auth.OrgID, q.Auth.Devices, rq)
}

func validRunState(s string) bool {
	for _, st := range domain.RunStates {
		if s == st {
			return true
		}
	}
	return false
}

// ListRunFramesHandler handles ListRunFrames.
type ListRunFramesHandler struct{ *Runs }

// Handle pages through the frames a run saw: what it observed, and each
// of its actions' frames before and after.
func (r ListRunFramesHandler) Handle(ctx context.Context, q ListRunFrames) (projections.RunFramePage, error) {
	run, err := r.resolve(ctx, RunRef{Auth: q.Auth, RunID: q.RunID})
	if err != nil {
		return projections.RunFramePage{}, err
	}
	if q.Limit < 0 || q.After < 0 {
		return projections.RunFramePage{}, domain.Errorf(domain.CodeInvalidArgument, "limit and after must not be negative")
	}
	return projections.ListRunFrames(ctx, r.pool, run.RunID, q.RunFrameQuery)
}

// GetRunScriptHandler handles GetRunScript.
type GetRunScriptHandler struct{ *Runs }

// Handle exports a run's committed steps as a guarded plan the scripted
// planner follows: each step with the screen it was decided on (its layout
// signature, and what a replay on another phone waits for: the app in front
// and a few of its elements), the element a tap acted on, the frame, and the
// action's effect; a run that succeeded ends its script with finish
// succeeded. A step whose frame is past retention is left unguarded.
func (r GetRunScriptHandler) Handle(ctx context.Context, q GetRunScript) (domain.RunScript, error) {
	run, err := r.resolve(ctx, RunRef(q))
	if err != nil {
		return domain.RunScript{}, err
	}
	steps, err := projections.ListRunSteps(ctx, r.pool, run.OrgID, run.RunID)
	if err != nil {
		return domain.RunScript{}, err
	}
	s := domain.RunScript{Version: 1, Goal: run.Goal, Steps: []domain.ScriptStep{}}
	for _, st := range steps {
		step := domain.ScriptStep{Action: st.Action, Arguments: st.Arguments}
		if rc, err := projections.GetReceipt(ctx, r.pool, run.OrgID, st.IdempotencyKey); err != nil {
			return domain.RunScript{}, err
		} else if rc.Effect != nil {
			step.Effect = rc.Effect.State
		}
		if st.ObservedFrame != "" {
			root, ok, err := r.frameTree(ctx, run, st.ObservedFrame)
			if err != nil {
				return domain.RunScript{}, err
			}
			if ok {
				step.ExpectScreen, step.FrameID = domain.LayoutSignature(root), st.ObservedFrame
				if action, err := domain.ParseAction(st.Action, st.Arguments); err == nil {
					guard, element := domain.GuardStep(root, action)
					step.WaitFor, step.Element = &guard, element
				}
			}
		}
		s.Steps = append(s.Steps, step)
	}
	if run.State == domain.RunStateSucceeded {
		s.Steps = append(s.Steps, domain.ScriptStep{Finish: domain.RunStateSucceeded})
	}
	return s, nil
}

// frameTree reads the UI tree of a frame of the run's device; ok is false
// when the frame is past retention or carries no tree.
func (r *Runs) frameTree(ctx context.Context, run domain.Run, frameID string) (root domain.UIElement, ok bool, err error) {
	fr, err := r.devices.Frame(ctx, fleet.GetFrame{Auth: runAuth(run), FrameID: frameID, FrameOptions: fleet.FrameOptions{Snapshot: true}})
	if err != nil {
		if domain.ErrorCode(err) == domain.CodeFrameNotFound {
			return root, false, nil
		}
		return root, false, err
	}
	if len(fr.Snapshot) == 0 {
		return root, false, nil
	}
	if err := json.Unmarshal(fr.Snapshot, &root); err != nil {
		return root, false, err
	}
	return root, true, nil
}

// GetRunDivergenceHandler handles GetRunDivergence.
type GetRunDivergenceHandler struct{ *Runs }

// Handle reads a run's divergence report from its own stream (the
// run.diverged event its executor recorded with its end): nothing is
// derived from a read model, so the report is what the events say.
func (r GetRunDivergenceHandler) Handle(ctx context.Context, q GetRunDivergence) (RunDivergence, error) {
	run, err := r.resolve(ctx, RunRef(q))
	if err != nil {
		return RunDivergence{}, err
	}
	return RunDivergence{Run: runView(run), Replay: len(run.Script) > 0, Steps: run.StepSeq, Divergence: run.Divergence}, nil
}

// runView renders the run aggregate as the read model does.
func runView(run domain.Run) projections.RunView {
	v := projections.RunView{RunID: run.RunID, AgentRunID: run.AgentRunID, DeviceID: run.DeviceID, Goal: run.Goal,
		Executor: run.Executor, State: run.State, MaxSteps: run.MaxSteps, StepSeq: run.StepSeq, DeadlineAt: run.DeadlineAt,
		SuccessCheck: run.SuccessCheck, HasScript: len(run.Script) > 0, Starter: run.Starter.ForReceipt(),
		ScheduleID: run.ScheduleID, ParkReason: run.ParkReason, Reason: run.Reason, Detail: run.Detail,
		CreatedAt: run.StartedAt, UpdatedAt: run.UpdatedAt}
	if run.State == domain.RunStateAwaitingUser {
		t := run.ParkDeadline
		v.ParkDeadlineAt = &t
	}
	if run.Terminal() {
		t := run.EndedAt
		v.EndedAt = &t
	}
	return v
}
