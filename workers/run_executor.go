package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/clock"
	"phonefleet/internal/planner"
	"phonefleet/projections"
)

// Reasons the executor ends a run with.
const (
	// RunReasonPlannerUnavailable: the run has no script, its goal is not
	// written as steps, and no model planner is configured.
	RunReasonPlannerUnavailable = "planner_unavailable"
)

// Bounds of the executor's retries within one run.
const (
	// runObserveFailures ends a run device_lost after so many failed
	// observations in a row.
	runObserveFailures = 5
	// runPlannerRetries is how often an unreachable planner is asked
	// again before the run ends planner_failed.
	runPlannerRetries = 3
	// runActRetries is how often an action refused as stale_frame or
	// answered action_outcome_unknown is decided again on a new
	// observation before the refusal is given to the planner.
	runActRetries = 5
)

// RunExecutorConfig configures the built-in executor.
type RunExecutorConfig struct {
	// App is the application object; it is read when a run is driven
	// (the wiring builds it after the workers).
	App  *commands.Application
	Pool *pgxpool.Pool
	// LLM is the model planner for runs without a script; nil when none
	// is configured (goals must then be written as steps).
	LLM planner.Planner
	// Worker names this executor in claims; empty means a name unique to
	// the process.
	Worker string
	// Now is the clock deciding when claims are renewed; nil means
	// clock.Now.
	Now func() time.Time
	// Sleep waits d or until ctx ends (wait steps, backoff); nil means a
	// timer.
	Sleep func(ctx context.Context, d time.Duration)
	// PollInterval is how often queued runs are looked for; zero means
	// 200 ms.
	PollInterval time.Duration
	// ClaimTTL is how long a claim lasts unrenewed; zero means 30 s. It
	// is renewed each half TTL while the run is driven.
	ClaimTTL time.Duration
	// Concurrency bounds the runs driven at once; zero means 16.
	Concurrency int
	// History is how many recent steps a planner is shown; zero means
	// planner.DefaultHistory.
	History int
	// ReplayLooks is how often a replayed script's guarded step looks for
	// its screen before the replay diverges (screen_not_reached); zero
	// means 20. A screen still changing from one look to the next is
	// waited for up to twice as many looks.
	ReplayLooks int
	// ReplaySettle is the pause between those looks; zero means 250 ms.
	ReplaySettle time.Duration
	// Hosting, when set, says whether this process hosts the devices: an
	// instance that does not claims no run (it could not act on its
	// device). Nil means it does.
	Hosting func() bool
	Logger  *slog.Logger
}

// RunExecutor is the built-in executor: it claims queued built-in runs
// (projections.RunsToClaim, then ClaimRun: of several instances exactly
// one wins a run) and drives each claimed run with its planner, one step
// at a time: observe (a JPEG at most planner.MaxImageWidth wide and the
// interactive elements), ask the planner, then act, park or finish
// through the device surface's commands with the executor's claim as
// credential.
//
// A run is let go as soon as its access is refused or it is no longer
// running (paused, parked, ended, or claimed by someone else): pause takes
// effect between steps. Resuming queues the run again and it is claimed
// afresh, here or by another instance; the planner (and what it was shown)
// is kept in this process for the run until it ends.
//
// An action's idempotency key is derived from the run, its next step
// number and the attempt at it, so an executor re-claiming a run after a
// crash retries the same step under the same key and the fleet answers
// with the recorded outcome rather than acting twice.
type RunExecutor struct {
	cfg RunExecutorConfig

	mu       sync.Mutex
	active   map[string]bool
	sessions map[string]*runSession
	wg       sync.WaitGroup
}

// runSession is what the executor keeps for a run across its claims: the
// planner and the steps taken.
type runSession struct {
	planner planner.Planner
	history []planner.Step
	omitted int
	done    int
	used    time.Time
}

// NewRunExecutor returns the executor.
func NewRunExecutor(cfg RunExecutorConfig) *RunExecutor {
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("run-executor/%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.ClaimTTL <= 0 {
		cfg.ClaimTTL = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.History <= 0 {
		cfg.History = planner.DefaultHistory
	}
	if cfg.ReplayLooks <= 0 {
		cfg.ReplayLooks = 20
	}
	if cfg.ReplaySettle <= 0 {
		cfg.ReplaySettle = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RunExecutor{cfg: cfg, active: map[string]bool{}, sessions: map[string]*runSession{}}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Worker is the name this executor claims runs under.
func (e *RunExecutor) Worker() string { return e.cfg.Worker }

// Run looks for queued runs at once and then every PollInterval, on the
// one sweep loop, and drives those it claims until ctx ends, then waits
// for the runs it drives to stop.
func (e *RunExecutor) Run(ctx context.Context) {
	defer e.wg.Wait()
	Sweep[int]{Worker: "run-executor", Interval: e.cfg.PollInterval, AtOnce: true, Logger: e.cfg.Logger,
		Pass: e.Poll}.Run(ctx)
}

// Wait returns when every run this executor started driving has been let
// go (ended, parked, paused, or ctx ended).
func (e *RunExecutor) Wait() { e.wg.Wait() }

// Poll claims queued runs up to the free capacity and starts driving each
// one it wins; it reports how many it started. A run another instance
// claimed first is skipped.
func (e *RunExecutor) Poll(ctx context.Context) (int, error) {
	e.mu.Lock()
	free := e.cfg.Concurrency - len(e.active)
	e.pruneSessions()
	e.mu.Unlock()
	if free <= 0 || e.cfg.Hosting != nil && !e.cfg.Hosting() {
		return 0, nil
	}
	queued, err := projections.RunsToClaim(ctx, e.cfg.Pool, e.cfg.Now(), free+e.cfg.Concurrency)
	if err != nil {
		return 0, err
	}
	started := 0
	for _, q := range queued {
		if started == free || ctx.Err() != nil {
			break
		}
		e.mu.Lock()
		busy := e.active[q.RunID]
		e.mu.Unlock()
		if busy || q.Executor != domain.ExecutorBuiltin {
			continue
		}
		pctx := workerPass(ctx, "run-executor")
		run, err := e.cfg.App.Runs.ClaimRun.Handle(pctx, runs.ClaimRun{RunID: q.RunID, Worker: e.cfg.Worker, TTL: e.cfg.ClaimTTL})
		if err != nil {
			// Another instance won it, or it moved on (paused, ended).
			e.cfg.Logger.Debug("run not claimed", "run", q.RunID, "err", err)
			continue
		}
		e.mu.Lock()
		e.active[run.RunID] = true
		e.mu.Unlock()
		e.wg.Add(1)
		started++
		go func() {
			defer e.wg.Done()
			defer func() {
				e.mu.Lock()
				delete(e.active, run.RunID)
				e.mu.Unlock()
			}()
			e.drive(ctx, run)
		}()
	}
	return started, nil
}

// pruneSessions forgets runs not driven for longer than any run may last
// (a run paused and then cancelled is never seen again). e.mu is held.
func (e *RunExecutor) pruneSessions() {
	now := e.cfg.Now()
	for id, s := range e.sessions {
		if !e.active[id] && now.Sub(s.used) > domain.MaxRunDeadline {
			delete(e.sessions, id)
		}
	}
}

// session returns the run's session, making its planner on first use: the
// run's script when it has one, else the model planner when configured,
// else the goal read as steps. reason is why there is none.
func (e *RunExecutor) session(ctx context.Context, run domain.Run) (s *runSession, reason string, err error) {
	e.mu.Lock()
	s = e.sessions[run.RunID]
	e.mu.Unlock()
	if s != nil {
		return s, "", nil
	}
	s = &runSession{}
	switch {
	case len(run.Script) > 0:
		script, err := planner.ParseScript(run.Script)
		if err != nil {
			return nil, domain.RunReasonPlannerFailed, err
		}
		s.planner = planner.NewScripted(script, run.StepSeq, run.ParkedStep)
	case e.cfg.LLM != nil:
		s.planner = e.cfg.LLM
		// A run taken over from another process shows the model what it
		// did; the outcomes are on the receipts.
		if run.StepSeq > 0 {
			steps, err := projections.ListRunSteps(ctx, e.cfg.Pool, run.OrgID, run.RunID)
			if err != nil {
				return nil, "", err
			}
			for _, st := range steps {
				s.record(planner.Step{Kind: planner.KindAct, Action: st.Action, Arguments: st.Arguments,
					Result: "done by an earlier executor"}, e.cfg.History)
			}
			s.done = 0
		}
	default:
		script, err := planner.ParseSteps(run.Goal)
		if err != nil {
			return nil, RunReasonPlannerUnavailable,
				fmt.Errorf("no planner is configured and the goal is not written as steps: %w", err)
		}
		s.planner = planner.NewScripted(script, run.StepSeq, run.ParkedStep)
	}
	e.mu.Lock()
	e.sessions[run.RunID] = s
	e.mu.Unlock()
	return s, "", nil
}

func (s *runSession) record(st planner.Step, keep int) {
	s.history = append(s.history, st)
	if len(s.history) > keep {
		s.omitted += len(s.history) - keep
		s.history = append([]planner.Step(nil), s.history[len(s.history)-keep:]...)
	}
	s.done++
}

func (e *RunExecutor) forget(runID string) {
	e.mu.Lock()
	delete(e.sessions, runID)
	e.mu.Unlock()
}

// drive takes the run's steps until it is let go.
func (e *RunExecutor) drive(ctx context.Context, run domain.Run) {
	acc := runs.RunAccess{RunID: run.RunID, Worker: e.cfg.Worker}
	log := e.cfg.Logger.With("run", run.RunID)
	s, reason, err := e.session(workerPass(ctx, "run-executor"), run)
	if err != nil {
		if reason == "" {
			log.Warn("run executor could not prepare the run", "err", err)
			return // the claim lapses; the run is queued again only by resume
		}
		e.finish(workerPass(ctx, "run-executor"), acc, domain.RunStateFailed, reason, err.Error(), log)
		return
	}
	e.mu.Lock()
	s.used = e.cfg.Now()
	e.mu.Unlock()
	app := e.cfg.App
	renewAt := e.cfg.Now().Add(e.cfg.ClaimTTL / 2)
	var attempt, actRetries, observeFailures, plannerFailures int
	for ctx.Err() == nil {
		pctx := workerPass(ctx, "run-executor")
		if !e.cfg.Now().Before(renewAt) {
			// Only a running run is renewed: a claim taken on a paused run
			// would outlive the pause.
			if e.lost(pctx, acc) {
				return
			}
			if _, err := app.Runs.ClaimRun.Handle(pctx, runs.ClaimRun{RunID: run.RunID, Worker: e.cfg.Worker, TTL: e.cfg.ClaimTTL}); err != nil {
				log.Info("run executor lost its claim", "err", err)
				return
			}
			renewAt = e.cfg.Now().Add(e.cfg.ClaimTTL / 2)
		}
		obs, err := app.Runs.RunObserve.Handle(pctx, runs.RunObserve{Access: acc, Image: "jpeg",
			MaxWidth: planner.MaxImageWidth, Elements: "interactive"})
		if err != nil {
			if e.lost(pctx, acc) {
				return
			}
			if observeFailures++; observeFailures >= runObserveFailures {
				e.finish(pctx, acc, domain.RunStateFailed, domain.RunReasonDeviceLost, err.Error(), log)
				return
			}
			e.cfg.Sleep(ctx, backoff(observeFailures))
			continue
		}
		observeFailures = 0
		in := planner.Input{RunID: run.RunID, Goal: run.Goal, MaxSteps: run.MaxSteps, StepSeq: obs.StepSeq,
			Done: s.done, History: s.history, Omitted: s.omitted, Observation: plannerObservation(obs)}
		d, err := s.planner.Next(pctx, in)
		if err == nil {
			err = d.Check()
		}
		if err != nil {
			if errors.Is(err, planner.ErrUnavailable) && plannerFailures < runPlannerRetries {
				plannerFailures++
				e.cfg.Sleep(ctx, backoff(plannerFailures))
				continue
			}
			e.finish(pctx, acc, domain.RunStateFailed, domain.RunReasonPlannerFailed, err.Error(), log)
			return
		}
		plannerFailures = 0
		switch {
		case d.Kind == planner.KindAct && d.Guard != nil:
			step, div, lost := e.replayStep(ctx, run, acc, obs, d)
			switch {
			case lost:
				return
			case div != nil:
				e.diverged(pctx, acc, div, log)
				return
			}
			attempt, actRetries = 0, 0
			s.record(step, e.cfg.History)
		case d.Kind == planner.KindAct:
			key := fmt.Sprintf("%s/step-%d/%d", run.RunID, obs.StepSeq+1, attempt)
			out, err := app.Runs.RunAct.Handle(pctx, runs.RunAct{Access: acc, Action: d.Action,
				Arguments: d.Arguments, IdempotencyKey: key, ObservedFrame: obs.Frame.FrameID})
			if err == nil && out.Receipt.Error != nil {
				err = &domain.Error{Code: out.Receipt.Error.Code, Message: out.Receipt.Error.Message}
			}
			step := planner.Step{Kind: planner.KindAct, Action: d.Action, Arguments: d.Arguments}
			if err != nil {
				de := domain.AsError(err)
				switch de.Code {
				case domain.CodeStaleFrame, domain.VrxStaleFrame, domain.CodeActionOutcomeUnknown, domain.VrxActionOutcomeUnknown:
					// Look again and decide again, under a new key.
					if actRetries < runActRetries {
						attempt++
						actRetries++
						continue
					}
				case domain.CodeIdempotencyConflict:
					if de.Retryable != nil && *de.Retryable {
						e.cfg.Sleep(ctx, backoff(1)) // the same step is in flight
					} else {
						attempt++ // the key was used for another action
					}
					continue
				}
				if e.lost(pctx, acc) {
					return
				}
				step.Error = string(de.Code) + ": " + de.Message
			} else if r := out.Receipt.Result; r != nil {
				step.Result = r.Description
			}
			attempt, actRetries = 0, 0
			s.record(step, e.cfg.History)
		case d.Kind == planner.KindNeedsUser:
			// A script's step is parked under its index, so that a step
			// already parked (by an executor gone since) is not asked again.
			v, err := app.Runs.RunNeedsUser.Handle(pctx, runs.RunNeedsUser{Access: acc, Reason: d.Reason, Step: d.Step})
			if err != nil {
				if e.lost(pctx, acc) {
					return
				}
				e.finish(pctx, acc, domain.RunStateFailed, domain.RunReasonPlannerFailed, "needs_user refused: "+err.Error(), log)
				return
			}
			s.record(planner.Step{Kind: planner.KindNeedsUser, Reason: d.Reason}, e.cfg.History)
			if v.State == domain.RunStateRunning {
				continue // the step had parked the run before; it goes on
			}
			// Parked: the claim is gone; resume queues the run again.
			return
		case d.Kind == planner.KindFinish:
			e.finish(pctx, acc, d.State, d.Reason, d.Detail, log)
			return
		case d.Kind == planner.KindWait:
			e.cfg.Sleep(ctx, d.Wait)
			s.record(planner.Step{Kind: planner.KindWait}, e.cfg.History)
		}
	}
}

// lost reports whether the executor must let the run go: its access is
// refused (ended, past its deadline, claim lapsed or taken) or the run is
// not running (paused, parked). A run seen ended is forgotten.
func (e *RunExecutor) lost(ctx context.Context, acc runs.RunAccess) bool {
	v, err := e.cfg.App.Runs.RunInfo.Handle(ctx, runs.RunInfo{Access: acc})
	if err != nil {
		// A paused or parked run refuses a worker's access as an ended
		// one does; its session is kept for a resume (and pruned later).
		return true
	}
	if domain.RunTerminal(v.State) {
		e.forget(acc.RunID)
	}
	return v.State != domain.RunStateRunning
}

// finish ends the run as the executor decided and forgets it.
func (e *RunExecutor) finish(ctx context.Context, acc runs.RunAccess, state, reason, detail string, log *slog.Logger) {
	defer e.forget(acc.RunID)
	if _, err := e.cfg.App.Runs.RunFinish.Handle(ctx, runs.RunFinish{Access: acc, State: state,
		Reason: clipRunes(reason, domain.MaxRunReasonRunes), Detail: clipRunes(detail, domain.MaxRunDetailRunes)}); err != nil {
		log.Info("run executor could not finish the run", "state", state, "reason", reason, "err", err)
	}
}

// replayStep takes a guarded script step (d.Guard) on the run's phone. It
// waits for the step's screen: the guard's app in front and its anchors
// shown, and the element a tap acted on; looking again every ReplaySettle,
// ReplayLooks times, or up to twice as often while the screen is still
// changing between looks (an app still loading is waited for, a settled
// other screen is not). It then acts bound to that element as this phone
// shows it (a tap names its ref; the fleet re-resolves it at the moment of
// the tap) and compares the action's effect with the original's. It
// returns the step taken, or the divergence: screen_not_reached,
// element_gone or element_moved (after the retries a stale frame gets),
// effect_differs or step_failed. lost says the run was let go.
func (e *RunExecutor) replayStep(ctx context.Context, run domain.Run, acc runs.RunAccess, obs runs.RunObservation,
	d planner.Decision) (step planner.Step, div *domain.RunDiverged, lost bool) {
	g := d.Guard
	app := e.cfg.App
	diverge := func(reason, detail, frame string) *domain.RunDiverged {
		return &domain.RunDiverged{Step: d.Step, Action: d.Action, Reason: reason, Detail: clipRunes(detail, 500),
			ExpectedFrame: g.FrameID, ActualFrame: frame, ExpectedEffect: g.Effect}
	}
	attempt, retries, prevLayout := 0, 0, ""
	for look := 1; ctx.Err() == nil; look++ {
		pctx := workerPass(ctx, "run-executor")
		args, missing := d.Arguments, ""
		switch {
		case obs.Tree == nil:
			missing = "the device showed no UI tree"
		default:
			missing = g.WaitFor.Missing(*obs.Tree)
			if missing == "" && g.Element != nil {
				if el, ok := domain.FindAnchor(*obs.Tree, *g.Element); ok {
					args, _ = json.Marshal(map[string]string{"ref": el.Ref})
				} else {
					missing = "no element with " + g.Element.String()
				}
			}
		}
		if missing != "" {
			changing := obs.Layout != prevLayout
			if look >= e.cfg.ReplayLooks && (!changing || look >= 2*e.cfg.ReplayLooks) {
				return step, diverge(domain.DivergedScreenNotReached, missing, obs.Frame.FrameID), false
			}
			prevLayout = obs.Layout
			e.cfg.Sleep(ctx, e.cfg.ReplaySettle)
			next, err := app.Runs.RunObserve.Handle(pctx, runs.RunObserve{Access: acc, Image: "none", Elements: "all"})
			if err != nil {
				if e.lost(pctx, acc) {
					return step, nil, true
				}
				continue // counted as a look that did not find the screen
			}
			obs = next
			continue
		}
		key := fmt.Sprintf("%s/step-%d/%d", run.RunID, obs.StepSeq+1, attempt)
		out, err := app.Runs.RunAct.Handle(pctx, runs.RunAct{Access: acc, Action: d.Action, Arguments: args,
			IdempotencyKey: key, ObservedFrame: obs.Frame.FrameID})
		var reason string
		if err == nil && out.Receipt.Error != nil {
			err = &domain.Error{Code: out.Receipt.Error.Code, Message: out.Receipt.Error.Message}
			reason = out.Receipt.Error.Reason
		}
		if err != nil {
			de := domain.AsError(err)
			if r, ok := de.Extra["reason"].(string); ok {
				reason = r
			}
			retry := false
			switch de.Code {
			case domain.CodeStaleFrame, domain.VrxStaleFrame, domain.CodeActionOutcomeUnknown, domain.VrxActionOutcomeUnknown:
				// Look again and act again, under a new key.
				attempt++
				retry = true
			case domain.CodeIdempotencyConflict:
				if de.Retryable != nil && *de.Retryable {
					e.cfg.Sleep(ctx, backoff(1)) // the same step is in flight
				} else {
					attempt++
				}
				retry = true
			}
			if retry && retries < runActRetries {
				retries++
				look = 0
				if next, oerr := app.Runs.RunObserve.Handle(pctx, runs.RunObserve{Access: acc, Image: "none", Elements: "all"}); oerr == nil {
					obs = next
				}
				continue
			}
			if e.lost(pctx, acc) {
				return step, nil, true
			}
			if reason == domain.ReasonElementGone || reason == domain.ReasonElementMoved {
				return step, diverge(reason, de.Message, obs.Frame.FrameID), false
			}
			return step, diverge(domain.DivergedStepFailed, string(de.Code)+": "+de.Message, obs.Frame.FrameID), false
		}
		step = planner.Step{Kind: planner.KindAct, Action: d.Action, Arguments: args}
		if r := out.Receipt.Result; r != nil {
			step.Result = r.Description
		}
		if eff := out.Receipt.Effect; eff != nil && effectSays(g.Effect) && effectSays(eff.State) && eff.State != g.Effect {
			dv := diverge(domain.DivergedEffectDiffers, fmt.Sprintf("the original action's effect was %s; the replay's is %s", g.Effect, eff.State),
				obs.Frame.FrameID)
			dv.ActualEffect = eff.State
			return step, dv, false
		}
		return step, nil, false
	}
	return step, nil, true
}

// effectSays reports whether an effect says something (unknown does not).
func effectSays(effect string) bool {
	return effect == domain.EffectChanged || effect == domain.EffectUnchanged
}

// diverged ends a replay at its divergence and forgets it.
func (e *RunExecutor) diverged(ctx context.Context, acc runs.RunAccess, div *domain.RunDiverged, log *slog.Logger) {
	defer e.forget(acc.RunID)
	if _, err := e.cfg.App.Runs.RunFinish.Handle(ctx, runs.RunFinish{Access: acc, Divergence: div}); err != nil {
		log.Info("run executor could not record the divergence", "step", div.Step, "reason", div.Reason, "err", err)
	}
}

// backoff is the pause before the n-th retry: 100 ms doubling, at most 5 s.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 6)
	return min(d, 5*time.Second)
}

func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// plannerObservation is what the planner sees of a run observation.
func plannerObservation(o runs.RunObservation) planner.Observation {
	return planner.Observation{FrameID: o.Frame.FrameID, ScreenHash: o.Frame.ScreenHash, Layout: o.Layout, Width: o.Width, Height: o.Height,
		ScreenOn: o.ScreenOn, ContentType: o.ContentType, Image: o.Image, ImageWidth: o.ImageWidth,
		ImageHeight: o.ImageHeight, Elements: o.Elements}
}
