package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// recordTimeout bounds recording an outcome once the device has acted; the
// recording is not abandoned when the executor is asked to stop.
const recordTimeout = 15 * time.Second

// Execute runs one queued job on its device. The device executor calls it
// for one job at a time per device, in arrival order. Device I/O happens
// here, outside any database transaction; the outcome is then recorded in
// one transaction.
func (f *Fleet) Execute(ctx context.Context, job Job) JobResult {
	switch job.Kind {
	case JobAction:
		return f.executeAction(ctx, job)
	case JobWake, JobStop:
		return f.executePower(ctx, job)
	}
	return JobResult{Err: fmt.Errorf("commands: unknown job kind %d", job.Kind)}
}

// executeAction carries out a recorded action: it checks that the lease it
// was accepted under is still in force (fencing) and that the screen still
// matches observedFrame, takes the before frame, acts, takes the after
// frame and records committed, failed or outcome unknown.
func (f *Fleet) executeAction(ctx context.Context, job Job) JobResult {
	req := job.Requested
	rec := &domain.ActionRecord{}
	rec.Apply(job.OrgID, req, 1)
	started := f.now()
	o := outcome{f: f, ctx: ctx, job: job, rec: rec, started: started}

	d, err := f.repo.load(ctx, job.DeviceID)
	if err != nil {
		return o.fail(domain.Errorf(domain.CodeInternal, "internal error").Wrap(err), nil)
	}
	if l := d.ActiveLease(started); l == nil || l.FencingToken != req.FencingToken {
		return o.fail(domain.Errorf(domain.CodeLeaseMismatch, "the lease this action was accepted under ended before it ran; nothing was done").
			With("deviceId", d.ID).With("reason", "lease_ended"), nil)
	}
	backend, err := f.cfg.Backends.Resolve(ctx, &d)
	if err != nil {
		return o.fail(err, nil)
	}
	o.backend, o.d = backend, &d
	obs, err := backend.Observe(ctx, domain.ObserveOptions{Replay: true})
	if err != nil {
		return o.fail(err, nil)
	}
	before := f.frameFor(&d, obs, started)
	o.before = &before
	if job.ObservedHash != "" && obs.ScreenHash != job.ObservedHash {
		return o.fail(domain.Errorf(domain.CodeStaleFrame, "the screen changed since observedFrame %s; observe again and decide anew", req.ObservedFrame).
			With("deviceId", d.ID).With("frameId", before.ID), nil)
	}

	actCtx, cancel := context.WithTimeout(ctx, f.cfg.ActTimeout)
	res, err := backend.Act(actCtx, job.Action)
	cancel()
	if err != nil {
		if domain.ErrorCode(err) == domain.CodeActionOutcomeUnknown || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return o.unknown("the device gave no outcome")
		}
		return o.fail(err, nil)
	}
	after := before
	if res.ScreenHash != before.ScreenHash || res.ScreenHash == "" {
		afterObs, err := backend.Observe(ctx, domain.ObserveOptions{Replay: true})
		if err == nil {
			after = f.frameFor(&d, afterObs, f.now())
		}
	}
	return o.commit(res, &after)
}

// frameFor returns the frame showing obs: the device's last stored frame
// when it shows the same screen, else a new one (to be inserted).
func (f *Fleet) frameFor(d *domain.Device, obs domain.Observation, at time.Time) frameRow {
	f.lastMu.Lock()
	last, ok := f.last[d.ID]
	f.lastMu.Unlock()
	if ok && last.ScreenHash == obs.ScreenHash && at.Before(last.ExpiresAt) {
		last.stored = true
		return last
	}
	return frameRow{ID: domain.NewID(domain.PrefixFrame), OrgID: d.OrgID, DeviceID: d.ID, Backend: d.Backend,
		ScreenHash: obs.ScreenHash, Width: obs.Width, Height: obs.Height, CapturedAt: at,
		ExpiresAt: at.Add(f.cfg.FrameRetention), PNG: obs.PNG, Snapshot: obs.Snapshot, Replay: obs.Replay}
}

// outcome records how one action ended.
type outcome struct {
	f       *Fleet
	ctx     context.Context
	job     Job
	rec     *domain.ActionRecord
	started time.Time
	d       *domain.Device
	backend domain.Backend
	before  *frameRow
}

func (o *outcome) fail(err error, after *frameRow) JobResult {
	e := domain.AsError(err)
	reason, _ := e.Extra["reason"].(string)
	ev := domain.ActionFailed{ActionID: o.rec.Requested.ActionID, DeviceID: o.job.DeviceID, Code: e.Code, Message: e.Message,
		Reason: reason, StartedAt: o.started, FinishedAt: o.f.now()}
	if e.Code == domain.CodeInternal {
		ev.Message = "internal error"
	}
	if o.before != nil {
		ev.FrameBefore = o.before.ref()
	}
	if after != nil {
		ev.FrameAfter = after.ref()
	}
	return o.record("failed", ev, false, o.before, after)
}

func (o *outcome) unknown(reason string) JobResult {
	ev := domain.ActionOutcomeUnknown{ActionID: o.rec.Requested.ActionID, DeviceID: o.job.DeviceID, Reason: reason, At: o.f.now()}
	return o.record("unknown", ev, true, o.before, nil)
}

func (o *outcome) commit(res domain.ActionResult, after *frameRow) JobResult {
	ev := domain.ActionCommitted{ActionID: o.rec.Requested.ActionID, DeviceID: o.job.DeviceID, Result: res,
		StartedAt: o.started, FinishedAt: o.f.now()}
	if o.before != nil {
		ev.FrameBefore = o.before.ref()
	}
	if after != nil {
		ev.FrameAfter = after.ref()
	}
	return o.record("committed", ev, true, o.before, after)
}

// record appends the outcome event and, in the same transaction, stores
// the new frames, saves the device's state and closes the idempotency
// row. It runs to the end even when the executor is being stopped.
func (o *outcome) record(state string, ev domain.Event, saveState bool, frames ...*frameRow) JobResult {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), recordTimeout)
	defer cancel()
	f := o.f
	var rows []frameRow
	for _, r := range frames {
		if r != nil && !r.stored && (len(rows) == 0 || rows[0].ID != r.ID) {
			rows = append(rows, *r)
		}
	}
	var devState []byte
	if sb, ok := o.backend.(domain.StatefulBackend); ok && saveState {
		s, err := sb.SaveState()
		if err != nil {
			return JobResult{Err: err}
		}
		devState = s
	}
	req := o.rec.Requested
	news, err := fleetEncode(o.job.OrgID, fleetMeta(req.Actor, req.ActionID), ev)
	if err != nil {
		return JobResult{Err: err}
	}
	finished := f.now()
	var a eventstore.Appended
	for attempt := 0; ; attempt++ {
		a, err = f.outcomes.do(outcomeWrite{orgID: o.job.OrgID, key: req.IdempotencyKey, actionID: req.ActionID,
			version: o.rec.Version, state: state, news: news, rows: rows, device: o.d, devState: devState, finished: finished})
		if !errors.Is(err, eventstore.ErrConflict) || attempt > 0 {
			break
		}
		// A review landed on the stream meanwhile: record after it.
		cur, lerr := f.loadAction(ctx, req.ActionID)
		if lerr != nil {
			return JobResult{Err: lerr}
		}
		if cur.Finished() {
			return JobResult{Receipt: cur.Receipt(), Err: cur.OutcomeError()}
		}
		o.rec.Version = cur.Version
	}
	if err != nil {
		return JobResult{Err: err}
	}
	f.frames.remember(rows...)
	if len(rows) > 0 {
		f.lastMu.Lock()
		last := rows[len(rows)-1]
		f.last[o.job.DeviceID] = frameRow{ID: last.ID, OrgID: last.OrgID, DeviceID: last.DeviceID, Backend: last.Backend,
			ScreenHash: last.ScreenHash, Width: last.Width, Height: last.Height, CapturedAt: last.CapturedAt, ExpiresAt: last.ExpiresAt}
		f.lastMu.Unlock()
	}
	o.rec.Apply(o.job.OrgID, ev, a.Version)
	return JobResult{Receipt: o.rec.Receipt(), Appended: a, Err: o.rec.OutcomeError()}
}

// AbandonJob records that a queued job never started (the executor is
// stopping): an action fails with device_unavailable (offline) — nothing
// was done, so it is not an unknown outcome. Wake and stop jobs are
// answered the same without a record.
func (f *Fleet) AbandonJob(ctx context.Context, job Job) JobResult {
	err := domain.Errorf(domain.CodeDeviceUnavailable, "the service stopped before this action ran; nothing was done").
		With("reason", domain.ReasonOffline).With("deviceId", job.DeviceID).WithRetryable(false)
	if job.Kind != JobAction {
		return JobResult{Err: err.WithRetryable(true)}
	}
	rec := &domain.ActionRecord{}
	rec.Apply(job.OrgID, job.Requested, 1)
	now := f.now()
	o := outcome{f: f, ctx: ctx, job: job, rec: rec, started: now}
	return o.fail(err, nil)
}

// MarkAbandonedActions gives every action recorded as requested but never
// finished the outcome unknown: the process that was executing it ended
// between the request and the outcome, so the action may or may not have
// happened. Such an action is never executed again. The device executor
// calls it when it takes over the devices, before it runs anything; it
// returns how many it marked.
func (f *Fleet) MarkAbandonedActions(ctx context.Context) (int, error) {
	rows, err := f.pool.Query(ctx, `SELECT org_id, idempotency_key, action_id FROM action_idempotency WHERE state = 'requested'`)
	if err != nil {
		return 0, err
	}
	type open struct{ org, key, action string }
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		err := r.Scan(&o.org, &o.key, &o.action)
		return o, err
	})
	if err != nil {
		return 0, err
	}
	marked := 0
	for _, op := range list {
		rec, err := f.loadAction(ctx, op.action)
		if err != nil {
			return marked, err
		}
		state := "unknown"
		var news []eventstore.NewEvent
		if !rec.Finished() {
			evs, err := rec.MarkOutcomeUnknown("the service stopped before the outcome was recorded", f.now())
			if err != nil {
				return marked, err
			}
			if news, err = fleetEncode(op.org, fleetMeta(fleetSystemActor, op.action), evs...); err != nil {
				return marked, err
			}
		} else if !rec.OutcomeUnknown {
			state = rec.State // the outcome is recorded; the row lagged behind
		}
		err = f.store.InTx(ctx, func(tx pgx.Tx) error {
			if len(news) > 0 {
				if _, err := f.store.AppendTx(ctx, tx, domain.ActionStream(op.action), rec.Version, news...); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `UPDATE action_idempotency SET state = $3, finished_at = $4 WHERE org_id = $1 AND idempotency_key = $2`,
				op.org, op.key, state, f.now())
			return err
		})
		if err != nil {
			return marked, err
		}
		if len(news) > 0 {
			marked++
		}
	}
	return marked, nil
}
