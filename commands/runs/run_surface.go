package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// The device surface: a run acting on its device, through its run token
// (/vrx) or its executor's claim. Every call first checks the credential;
// an unknown, malformed, ended or expired one is one answer
// (errRunTokenRefused), whatever the reason.

// access loads the run a credential names, if the credential still works.
func (r *Runs) access(ctx context.Context, a RunAccess) (domain.Run, int64, error) {
	runID, secret, ok := a.parse()
	if !ok {
		return domain.Run{}, 0, errRunTokenRefused
	}
	run, version, err := r.runs.Load(ctx, runID)
	if err != nil {
		return domain.Run{}, 0, err
	}
	if !r.admits(a, secret, run) {
		return domain.Run{}, 0, errRunTokenRefused
	}
	return run, version, nil
}

// parse returns the run a credential names and the token's secret; ok is
// false for a malformed one.
func (a RunAccess) parse() (runID, secret string, ok bool) {
	if a.Token != "" {
		return domain.ParseRunToken(a.Token)
	}
	return a.RunID, "", a.Worker != "" && domain.HasPrefix(a.RunID, domain.PrefixRun)
}

// admits reports whether a credential still works on run.
func (r *Runs) admits(a RunAccess, secret string, run domain.Run) bool {
	now := r.now()
	switch {
	case !run.Exists():
		return false
	case a.Token != "" && !run.TokenMatches(secret):
		return false
	case a.Token == "" && (run.ClaimedBy != a.Worker || !now.Before(run.ClaimUntil)):
		return false
	}
	return run.Live(now)
}

// runAuth is the authorization a run acts with: its starter's identity
// (its actions' receipts name the starter), only its device, and the
// run as the holder of the device's lease.
func runAuth(run domain.Run) domain.Auth {
	a := domain.Auth{OrgID: run.OrgID, Kind: domain.PrincipalConsole, UserID: run.Starter.ID, Role: domain.RoleMember,
		Scopes:  []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct, domain.ScopeDevicesLease},
		Devices: []string{run.DeviceID}, RunID: run.RunID}
	if run.Starter.Kind == domain.ActorAPIKey {
		a.Kind, a.UserID, a.APIKeyID = domain.PrincipalAPIKey, "", run.Starter.ID
	}
	return a
}

// RunInfoHandler handles RunInfo.
type RunInfoHandler struct{ *Runs }

// Handle reads the run a credential names.
func (r RunInfoHandler) Handle(ctx context.Context, q RunInfo) (projections.RunView, error) {
	run, _, err := r.access(ctx, q.Access)
	if err != nil {
		return projections.RunView{}, err
	}
	return runView(run), nil
}

// RunObserveHandler handles RunObserve.
type RunObserveHandler struct{ *Runs }

// Handle looks at the run's device and stores the frame (attributed to
// the run, so it is in the run's frame index). The picture comes from the
// backend in the asked format (a JPEG encoded from the rendered screen);
// elements come from the UI snapshot in compact form. Errors:
// invalid_argument, and those of ObserveDevice.
func (r RunObserveHandler) Handle(ctx context.Context, cmd RunObserve) (RunObservation, error) {
	run, _, err := r.access(ctx, cmd.Access)
	if err != nil {
		return RunObservation{}, err
	}
	img := cmd.Image
	if img == "" {
		img = domain.ImagePNG
	}
	elems := cmd.Elements
	if elems == "" {
		elems = domain.ElementsInteractive
	}
	switch {
	case img != domain.ImagePNG && img != domain.ImageJPEG && img != domain.ImageNone:
		return RunObservation{}, domain.Errorf(domain.CodeInvalidArgument, "image must be png, jpeg or none")
	case elems != domain.ElementsAll && elems != domain.ElementsInteractive && elems != domain.ElementsNone:
		return RunObservation{}, domain.Errorf(domain.CodeInvalidArgument, "elements must be all, interactive or none")
	case cmd.MaxWidth < 0 || cmd.MaxWidth > domain.MaxObserveWidth:
		return RunObservation{}, domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be between 1 and %d", domain.MaxObserveWidth)
	case cmd.Quality < 0 || cmd.Quality > 100:
		return RunObservation{}, domain.Errorf(domain.CodeInvalidArgument, "quality must be between 1 and 100")
	}
	format := ""
	if img == domain.ImageJPEG {
		format = domain.ImageJPEG
	}
	obs, err := r.devices.Observe(ctx, fleet.ObserveDevice{Auth: runAuth(run), DeviceID: run.DeviceID,
		Image: img != domain.ImageNone, MaxWidth: cmd.MaxWidth, Format: format, Quality: cmd.Quality, Snapshot: elems != domain.ElementsNone})
	if err != nil {
		return RunObservation{}, err
	}
	out := RunObservation{Frame: obs.Frame, DeviceID: run.DeviceID, Width: obs.Width, Height: obs.Height,
		ScreenOn: obs.ScreenOn, StepSeq: run.StepSeq}
	if img != domain.ImageNone && obs.Image != nil {
		out.ContentType, out.Image = obs.ContentType, obs.Image
		out.ImageWidth, out.ImageHeight = obs.ImageWidth, obs.ImageHeight
	}
	if elems != domain.ElementsNone && len(obs.Snapshot) > 0 {
		var root domain.UIElement
		if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
			return RunObservation{}, fmt.Errorf("read UI snapshot: %w", err)
		}
		out.Elements = domain.CompactElements(root, elems == domain.ElementsInteractive)
		out.Layout = domain.LayoutSignature(root)
		out.Tree = &root
	}
	return out, nil
}

// RunActHandler handles RunAct.
type RunActHandler struct{ *Runs }

// Handle performs one step of the run: the action goes through the fleet's
// one action path (idempotency, fencing, stale-frame rules, receipts
// attributed to the starter and the run) and its request is recorded with
// the run's step in one unit, so a step is never taken on a run that was
// paused, parked or ended meanwhile, and never past maxSteps. The step
// past maxSteps ends the run failed. Errors: those of PerformAction, and
// device_unavailable (not_found) for a refused credential or another
// device, device_unavailable (run_paused, run_awaiting_user, run_queued)
// when the run is not running, lease_mismatch for a stale fencingToken,
// capability_unsupported (max_steps) when the budget is spent.
func (r RunActHandler) Handle(ctx context.Context, cmd RunAct) (fleet.ActOutcome, error) {
	// A step is decided again, under the one retry policy, when the run
	// (another step, a pause) or its device moved on between its check and
	// its record. The first decision is made on the run as this process
	// last saw it (the worker's observation, or its last step, left it
	// current), with no read: its record expects the run's stream where
	// that state stood, so a run that moved on fails it. A step that did
	// not succeed is decided again on the run loaded afresh: a refusal that
	// state may have misled is made anew, and a step that was recorded
	// and failed is answered by its key (the run's LastStepKey).
	runID, secret, ok := cmd.Access.parse()
	if !ok {
		return fleet.ActOutcome{}, errRunTokenRefused
	}
	return eventstore.Retry(ctx, func(int) (fleet.ActOutcome, error) {
		var out fleet.ActOutcome
		err := r.runs.DecideCached(ctx, runID, func(run domain.Run, version int64, cached bool) (err error) {
			if !r.admits(cmd.Access, secret, run) {
				err = errRunTokenRefused
			} else {
				out, err = r.step(ctx, cmd, run, version, cached)
			}
			if err != nil && cached {
				return eventstore.ErrStale
			}
			return err
		})
		return out, err
	})
}

// step takes one step of run, decided on its state at version: the
// action's request and the step are recorded in one unit expecting the
// run's stream at version. A step decided on a cached state (cached) ends
// no run: past maxSteps it answers ErrStale, for the fresh state to decide.
// Its other errors are ErrStale to Handle too (the repository's
// DecideCached decides again on the run loaded afresh).
func (r RunActHandler) step(ctx context.Context, cmd RunAct, run domain.Run, version int64, cached bool) (fleet.ActOutcome, error) {
	if cmd.DeviceID != "" && cmd.DeviceID != run.DeviceID {
		return fleet.ActOutcome{}, errRunTokenRefused
	}
	if run.State != domain.RunStateRunning {
		return fleet.ActOutcome{}, domain.Errorf(domain.CodeDeviceUnavailable, "run %s is %s; it takes no step now", run.RunID, run.State).
			With("reason", "run_"+run.State).WithRetryable(run.State != domain.RunStateAwaitingUser)
	}
	if cmd.FencingToken != 0 {
		d, _, err := r.devices.State(ctx, run.DeviceID)
		if err != nil {
			return fleet.ActOutcome{}, err
		}
		if d.Lease == nil || d.Lease.ID != run.LeaseID || d.Lease.FencingToken != cmd.FencingToken {
			return fleet.ActOutcome{}, domain.Errorf(domain.CodeLeaseMismatch, "fencingToken %d is not the run's lease's", cmd.FencingToken).
				With("reason", "not_current")
		}
	}
	if cmd.IdempotencyKey != "" && cmd.IdempotencyKey == run.LastStepKey {
		// The step just taken, asked again: its key's first use answers
		// (a replay), and it takes no step of its own, not even the one
		// past maxSteps that would end the run.
		return r.devices.Act(ctx, fleet.PerformAction{Auth: runAuth(run), DeviceID: run.DeviceID,
			Action: cmd.Action, Arguments: cmd.Arguments, IdempotencyKey: cmd.IdempotencyKey, LeaseID: run.LeaseID,
			ObservedFrame: cmd.ObservedFrame, AgentRunID: run.AgentRunID})
	}
	now := r.now()
	step := domain.RunStepTaken{IdempotencyKey: cmd.IdempotencyKey, Action: domain.ActionType(cmd.Action),
		Arguments: cmd.Arguments, ObservedFrame: cmd.ObservedFrame}
	if cmd.ObservedFrame != "" && domain.HasPrefix(cmd.ObservedFrame, domain.PrefixFrame) {
		deviceID, screen, ok, err := r.devices.FrameOf(ctx, run.OrgID, cmd.ObservedFrame, now)
		switch {
		case err != nil:
			return fleet.ActOutcome{}, err
		case ok && deviceID != run.DeviceID:
			// A frame of another of the organisation's devices shows
			// another screen: the worker decided on the wrong one.
			return fleet.ActOutcome{}, domain.Errorf(domain.CodeStaleFrame,
				"observedFrame %s shows another device than the run's", cmd.ObservedFrame).
				With("reason", domain.ReasonViewportMismatch).With("deviceId", run.DeviceID)
		case ok:
			step.ObservedScreen = screen
		}
	}
	if action, err := domain.ParseAction(cmd.Action, cmd.Arguments); err == nil {
		step.Arguments = action.ArgumentsJSON()
	}
	evs, within, err := run.Step(now, step)
	if err != nil {
		return fleet.ActOutcome{}, err
	}
	if !within {
		if cached {
			return fleet.ActOutcome{}, eventstore.ErrStale // the run is ended on its state loaded afresh
		}
		if _, err := r.change(ctx, run.RunID, func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
			return r.end(ctx, u, run, now, domain.RunStateFailed, domain.RunReasonMaxSteps, "", nil)
		}); err != nil {
			return fleet.ActOutcome{}, err
		}
		return fleet.ActOutcome{}, domain.Errorf(domain.CodeCapabilityUnsupported, "the run has taken its %d steps (maxSteps); it ended failed", run.MaxSteps).
			With("reason", "max_steps")
	}
	news, err := eventstore.Encode(domain.Events, run.OrgID, evs...)
	if err != nil {
		return fleet.ActOutcome{}, err
	}
	out, err := r.devices.Act(ctx, fleet.PerformAction{Auth: runAuth(run), DeviceID: run.DeviceID,
		Action: cmd.Action, Arguments: cmd.Arguments, IdempotencyKey: cmd.IdempotencyKey, LeaseID: run.LeaseID,
		ObservedFrame: cmd.ObservedFrame, AgentRunID: run.AgentRunID,
		Also: &fleet.StreamAppend{StreamID: domain.RunStream(run.RunID), Expected: version, Events: news}})
	if err == nil && !out.Replayed {
		// Recorded with the action at version: the run's next step is
		// decided on it with no read.
		r.runs.Advance(run.RunID, version, evs...)
	}
	return out, err

}

// RunGetFrameHandler handles RunGetFrame.
type RunGetFrameHandler struct{ *Runs }

// Handle reads a frame of the run's device.
func (r RunGetFrameHandler) Handle(ctx context.Context, q RunGetFrame) (fleet.Frame, error) {
	run, _, err := r.access(ctx, q.Access)
	if err != nil {
		return fleet.Frame{}, err
	}
	return r.devices.Frame(ctx, fleet.GetFrame{Auth: runAuth(run), FrameID: q.FrameID, FrameOptions: q.FrameOptions})
}

// RunNeedsUserHandler handles RunNeedsUser.
type RunNeedsUserHandler struct{ *Runs }

// Handle parks the run for a person: awaiting_user until the wait ends
// (default 15 minutes, never past the run's deadline), its device's lease
// given up so a person can take it (run.needs_user_control is sent). A
// script step that already parked the run (cmd.Step) changes nothing and
// answers the run as it is. Errors: invalid_argument (not running, wait out
// of bounds).
func (r RunNeedsUserHandler) Handle(ctx context.Context, cmd RunNeedsUser) (projections.RunView, error) {
	run, _, err := r.access(ctx, cmd.Access)
	if err != nil {
		return projections.RunView{}, err
	}
	wait := time.Duration(cmd.DeadlineSeconds) * time.Second
	switch {
	case cmd.DeadlineSeconds == 0:
		wait = domain.DefaultParkDeadline
	case cmd.DeadlineSeconds < 1 || wait > domain.MaxParkDeadline:
		return projections.RunView{}, domain.Errorf(domain.CodeInvalidArgument, "deadlineSeconds must be between 1 and %d", int(domain.MaxParkDeadline.Seconds()))
	}
	return r.change(ctx, run.RunID, func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		if !run.Live(now) {
			return nil, errRunTokenRefused
		}
		w := min(wait, run.DeadlineAt.Sub(now))
		evs, err := run.Park(now, cmd.Reason, w, cmd.Step)
		if err != nil || len(evs) == 0 {
			return evs, err
		}
		return evs, r.releaseDevice(ctx, u, run, now)
	})
}

// RunFinishHandler handles RunFinish.
type RunFinishHandler struct{ *Runs }

// Handle ends the run as its worker reports. A succeeded run with a
// successCheck is accepted only when the check holds on the screen now
// (the final frame); otherwise it ends failed with success_check_failed.
// Errors: invalid_argument (state, reason or detail).
func (r RunFinishHandler) Handle(ctx context.Context, cmd RunFinish) (projections.RunView, error) {
	run, _, err := r.access(ctx, cmd.Access)
	if err != nil {
		return projections.RunView{}, err
	}
	if cmd.Divergence == nil && cmd.State != domain.RunStateSucceeded && cmd.State != domain.RunStateFailed {
		return projections.RunView{}, domain.Errorf(domain.CodeInvalidArgument, "state must be succeeded or failed")
	}
	if cmd.Divergence != nil {
		return r.change(ctx, run.RunID, func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
			if run.Terminal() || !now.Before(run.DeadlineAt) {
				return nil, errRunTokenRefused
			}
			evs, err := run.Diverge(now, *cmd.Divergence)
			if err != nil || len(evs) == 0 {
				return evs, err
			}
			return evs, r.releaseDevice(ctx, u, run, now)
		})
	}
	state, reason, detail := cmd.State, cmd.Reason, cmd.Detail
	if state == domain.RunStateSucceeded && run.SuccessCheck != nil {
		ok, why, err := r.checkSuccess(ctx, run)
		if err != nil {
			return projections.RunView{}, err
		}
		if !ok {
			state, reason, detail = domain.RunStateFailed, domain.RunReasonSuccessCheckFailed, why
		}
	}
	return r.change(ctx, run.RunID, func(run *domain.Run, u *eventstore.Unit, now time.Time) ([]domain.Event, error) {
		if run.Terminal() || !now.Before(run.DeadlineAt) {
			return nil, errRunTokenRefused
		}
		return r.end(ctx, u, run, now, state, reason, detail, nil)
	})
}

// checkSuccess evaluates the run's successCheck on the device's screen
// now; why says what did not hold.
func (r *Runs) checkSuccess(ctx context.Context, run domain.Run) (ok bool, why string, err error) {
	obs, err := r.devices.Observe(ctx, fleet.ObserveDevice{Auth: runAuth(run), DeviceID: run.DeviceID, Snapshot: true})
	if err != nil {
		return false, "", err
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		return false, "", fmt.Errorf("read UI snapshot: %w", err)
	}
	return domain.EvaluateSuccessCheck(*run.SuccessCheck, root, obs.Frame.FrameID)
}
