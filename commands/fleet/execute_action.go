package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// recordTimeout bounds recording an outcome once the device has acted; the
// recording is not abandoned when the device runtime is asked to stop.
const recordTimeout = 15 * time.Second

// savedState is a stateful backend's state after a job (a sim phone's, to
// record with the job's events); nil for a backend that keeps none.
func savedState(b domain.Backend) ([]byte, error) {
	if sb, ok := b.(domain.StatefulBackend); ok {
		return sb.SaveState()
	}
	return nil, nil
}

// recordContext is the context a device job records its outcome in: the
// request's metadata, not cancelled with the request (the device has
// acted), bounded by recordTimeout.
func recordContext(ctx context.Context, meta eventstore.Metadata) (context.Context, context.CancelFunc) {
	return context.WithTimeout(eventstore.WithMetadata(context.WithoutCancel(ctx), meta), recordTimeout)
}

// jobResult is what a job queued on a device came to.
type jobResult struct {
	// receipt is the action's receipt (action jobs).
	receipt domain.Receipt
	// appended is what the job recorded last, for read-your-writes waits.
	appended eventstore.Appended
	err      error
}

// submit fills a reserved place with a job: run when its turn comes, or
// abandon instead when the runtime stops first. Whichever ran answers on
// the returned channel, which has room for the one result, so the device
// never waits for a caller that gave up.
func submit(slot domain.QueueSlot, run, abandon func(ctx context.Context) jobResult) <-chan jobResult {
	done := make(chan jobResult, 1)
	slot.Submit(func(ctx context.Context) { done <- run(ctx) }, func(ctx context.Context) { done <- abandon(ctx) })
	return done
}

// await waits for a queued job's result, or until the caller gives up
// (its context's error): the job goes on regardless.
func await(ctx context.Context, done <-chan jobResult) (jobResult, error) {
	select {
	case res := <-done:
		return res, nil
	case <-ctx.Done():
		return jobResult{}, ctx.Err()
	}
}

// Why a recorded action never ran.
const (
	whyStopped  = "the service stopped before this action ran; nothing was done"
	whyDatabase = "the database failed while this action was being accepted; nothing was done"
	// whyDatabaseRan: the database failed when the action's turn came.
	whyDatabaseRan = "the database failed before this action ran; nothing was done"
	// whyNotHolder: this process lost its claim on the device's host
	// (another process drives the device now) before the action ran.
	whyNotHolder = "the instance that accepted this action no longer drives the device; nothing was done"
	// whyFencedAfter: the claim was lost while the device acted.
	whyFencedAfter = "the instance driving the device lost its claim on it while it acted; another instance drives it now"
)

// fenceRefused reports whether err is the database refusing a write made
// under a stale host claim (SQL function host_fence, SQLSTATE PF409).
func fenceRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "PF409"
}

// fenceNow returns the claim on host a job begun under start writes
// under now: the same unbroken hold (Since), at its latest generation.
// ok is false when this process no longer holds it, or lost it in
// between.
func (f *Fleet) fenceNow(start domain.HostFence) (domain.HostFence, bool) {
	cur, ok := f.runtime.Fence(start.Host)
	return cur, ok && cur.Since == start.Since
}

// checkFence asks the database whether fence is still the host's claim
// (a fenced write of nothing): an error satisfying fenceRefused when
// another process has taken the host since.
func (f *Fleet) checkFence(ctx context.Context, fence domain.HostFence) error {
	if fence.Epoch == 0 {
		return nil // the host's claim is not fenced
	}
	_, err := f.pool.Exec(ctx, fenceSQL(fence.Host, "$1", "$2"), fence.Host, fence.Epoch)
	return err
}

// fenceSQL is the statement that refuses a write made under a stale claim
// on host: host and epoch are the placeholders of the claim's host and
// generation. It locks the host's row FOR SHARE, as the SQL function
// host_fence does (a take, which bumps the epoch, waits for the writing
// transaction to end), and calls host_fence, which raises PF409, only when
// the row's epoch is not the claim's. Every action checks its claim twice,
// and a PL/pgSQL call cost the database more than the locked read itself;
// the function stays the one place a refusal is worded.
func fenceSQL(host, hostParam, epochParam string) string {
	var cur string
	switch {
	case host == "sim":
		cur = `SELECT epoch FROM sim_host WHERE id = 1 FOR SHARE`
	case strings.HasPrefix(host, "gw."):
		cur = `SELECT epoch FROM gateway_hosts WHERE gateway_id = substr(` + hostParam + `, 4) FOR SHARE`
	default:
		return `SELECT host_fence(` + hostParam + `, ` + epochParam + `)` // names no host: the function says so
	}
	return `SELECT host_fence(` + hostParam + `, ` + epochParam + `) WHERE ` + epochParam + ` IS DISTINCT FROM (` + cur + `)`
}

// neverRan is the failure of device work that never started:
// device_unavailable (offline), since nothing was done — not an unknown
// outcome.
// beforeSending is how a failure before the action was sent is recorded:
// a refusal the backend classified as it is, anything else as the
// backend's command failing (backend_command_failed), so that the receipt,
// and every retry of its key, says nothing was done instead of
// internal_error.
func beforeSending(err error) error {
	if domain.ErrorCode(err) != domain.CodeInternal {
		return err
	}
	return domain.Errorf(domain.CodeBackendCommandFailed, "the device failed before the action was sent; nothing was done").WithRetryable(false)
}

func neverRan(deviceID, why string) *domain.Error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "%s", why).With("reason", domain.ReasonOffline).With("deviceId", deviceID)
}

// actionJob is a recorded action waiting for its turn on its device.
// Device I/O happens in run, outside any database transaction; the
// outcome is then recorded in one transaction.
type actionJob struct {
	f     *Fleet
	orgID string
	// host is the host the action is accepted under (domain.HostKey):
	// its idempotency row names it, so a takeover settles its own host's
	// actions only.
	host   string
	req    domain.ActionRequested
	action domain.Action
	// observedHash is the screen hash of the action's observedFrame, if any.
	observedHash string
	// seen is the element a bound action (one naming a ref) targets as its
	// observedFrame showed it, when that frame kept a UI tree: the element,
	// not the whole screen, must then be where it was.
	seen *domain.UIElement
	// target is the element a bound action was resolved to.
	target domain.UIElement
	// meta is the metadata of the request that queued the action: the
	// events recording its outcome carry it.
	meta eventstore.Metadata
}

// run carries out the action: it checks that the lease it was accepted
// under is still in force (fencing) and that the screen still matches
// observedFrame, takes the before frame, acts, takes the after frame and
// records committed, failed or outcome unknown.
func (j *actionJob) run(ctx context.Context) jobResult {
	f, req := j.f, j.req
	started := f.now()
	o := j.outcome(ctx, started)
	fence, held := f.runtime.Fence(j.host)
	if !held {
		return o.fail(neverRan(req.DeviceID, whyNotHolder), nil)
	}
	o.fence = fence

	// The device as this process last saw it (at least as new as the
	// state the action was accepted on) answers a lease that had ended
	// already; whether it is still in force is read afresh right before
	// the act, with the host's claim (below).
	d, _, cached := f.devices.Cached(req.DeviceID)
	if !cached {
		var err error
		if d, _, err = f.devices.Load(ctx, req.DeviceID); err != nil {
			// Nothing was sent: the database failed under the action. Its
			// receipt says so for good, so that a retry of its key answers
			// that, never internal_error (issue 27).
			return o.fail(neverRan(req.DeviceID, whyDatabaseRan).WithRetryable(false), nil)
		}
	}
	if !j.leaseInForce(&d, started) {
		return o.fail(leaseEnded(d.ID), nil)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return o.fail(err, nil)
	}
	o.backend, o.d = backend, &d
	bound, trees := j.action.Ref != "", backend.Capabilities().CheapSnapshot
	obs, err := backend.Observe(ctx, domain.ObserveOptions{Replay: true, Snapshot: bound || trees, Tree: true})
	if err != nil {
		return o.fail(beforeSending(err), nil)
	}
	before := f.frameFor(&d, lean(obs, trees), started)
	o.before = &before
	if j.observedHash != "" && obs.ScreenHash != j.observedHash && j.seen == nil {
		return o.fail(domain.Errorf(domain.CodeStaleFrame, "the screen changed since observedFrame %s; observe again and decide anew", req.ObservedFrame).
			With("deviceId", d.ID).With("frameId", before.ID), nil)
	}
	action := j.action
	if bound {
		if action, err = j.resolve(obs); err != nil {
			return o.fail(domain.AsError(beforeSending(err)).With("deviceId", d.ID).With("frameId", before.ID), nil)
		}
	}

	// The last moment to find that the lease ended (fencing must see a
	// lease ended by any instance) or that another process took the
	// device's host over (this one's claim may have gone with its database
	// session before it noticed: acting now would act twice, with the new
	// holder). Both are one round trip: the host's claim is checked in the
	// read of the device's stream.
	cur, held := f.fenceNow(fence)
	if !held {
		return o.fail(neverRan(req.DeviceID, whyNotHolder), nil)
	}
	var check eventstore.Check
	if cur.Epoch != 0 {
		check = eventstore.Check{SQL: fenceSQL(cur.Host, "$1", "$2"), Args: []any{cur.Host, cur.Epoch}}
	}
	fresh, _, err := f.devices.LoadChecked(ctx, req.DeviceID, check)
	if fenceRefused(err) {
		f.runtime.Lose(j.host)
		return o.fail(neverRan(req.DeviceID, whyNotHolder), nil)
	} else if err != nil {
		return o.fail(neverRan(req.DeviceID, whyDatabaseRan).WithRetryable(false), nil)
	}
	if !j.leaseInForce(&fresh, started) {
		// Nothing was done: the receipt names no frame, as for a lease
		// found ended before the device was looked at.
		o.before = nil
		return o.fail(leaseEnded(d.ID), nil)
	}
	actCtx, cancel := context.WithTimeout(ctx, f.cfg.ActTimeout)
	res, err := backend.Act(actCtx, action)
	cancel()
	if err != nil {
		if domain.ErrorCode(err) == domain.CodeActionOutcomeUnknown || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return o.unknown("the device gave no outcome")
		}
		if domain.ErrorCode(err) == domain.CodeInternal {
			// An error the backend did not classify, once the action was
			// handed to it: whether the phone acted is not known.
			return o.unknown("the device's backend failed without saying whether it acted")
		}
		return o.fail(err, nil)
	}
	if bound && res.Target == "" {
		res.Target, res.TargetID, res.TargetText = j.target.Ref, j.target.ResourceID, j.target.Text
		if res.TargetText == "" {
			res.TargetText = j.target.ContentDesc
		}
	}
	after, sample, afterState := j.settle(ctx, backend, &d, before, obs, res, trees)
	effect := domain.JudgeEffect(domain.SampleOf(obs), sample)
	o.afterState = afterState
	return o.commit(res, &effect, &after)
}

// leaseInForce reports whether the lease the action was accepted under is
// still d's active lease at started.
func (j *actionJob) leaseInForce(d *domain.Device, started time.Time) bool {
	l := d.ActiveLease(started)
	return l != nil && l.FencingToken == j.req.FencingToken
}

// leaseEnded is the failure of an action whose lease ended before it ran.
func leaseEnded(deviceID string) error {
	return domain.Errorf(domain.CodeLeaseMismatch, "the lease this action was accepted under ended before it ran; nothing was done").
		With("deviceId", deviceID).With("reason", "lease_ended")
}

// lean is obs as its frame stores it: without the tree taken to judge the
// effect when the backend redraws it cheaply on demand (trees), so an
// action writes no more than it did before effects were judged.
func lean(obs domain.Observation, trees bool) domain.Observation {
	if trees {
		obs.Snapshot = nil
	}
	return obs
}

// resolve turns a bound action into a tap at its element's current centre,
// found in the tree of the screen now (obs), or refuses it (stale_frame,
// element_gone or element_moved) before anything is sent.
func (j *actionJob) resolve(obs domain.Observation) (domain.Action, error) {
	root, _, err := obs.UITree()
	if err != nil || root == nil {
		if err == nil {
			err = errors.New("the device gave no UI tree")
		}
		return domain.Action{}, domain.Errorf(domain.CodeInternal, "internal error").Wrap(err)
	}
	tree := *root
	x, y, err := domain.ResolveBound(tree, j.action.Ref, j.seen)
	if err != nil {
		return domain.Action{}, err
	}
	j.target, _ = tree.Find(j.action.Ref)
	a := j.action
	a.Ref, a.X, a.Y = "", x, y
	return a, nil
}

// Settling: a backend that does not report the screen after acting (an
// adb phone, whose app may still be drawing) is looked at again, up to
// settleLooks times settleDelay apart, while its picture still equals the
// one before the action; an equal picture is then the settled answer.
const (
	settleLooks = 3
	settleDelay = 150 * time.Millisecond
)

// settle returns the frame after the action and what it showed of the
// screen (with its tree when trees is set; no picture when the device could
// not be looked at), and the replay bytes of the last look, taken after the
// action (nil when it did not look).
func (j *actionJob) settle(ctx context.Context, backend domain.Backend, d *domain.Device, before frameRow, obs domain.Observation,
	res domain.ActionResult, trees bool) (frameRow, domain.EffectSample, []byte) {
	if res.ScreenHash != "" && res.ScreenHash == before.ScreenHash && !trees {
		return before, domain.EffectSample{ScreenHash: res.ScreenHash, ScreenOn: res.ScreenOn}, nil
	}
	after, sample := before, domain.EffectSample{}
	var replay []byte
	for look := 1; ; look++ {
		afterObs, err := backend.Observe(ctx, domain.ObserveOptions{Replay: true, Snapshot: trees, Tree: true})
		if err != nil {
			return after, domain.EffectSample{}, nil
		}
		after, sample, replay = j.f.frameFor(d, lean(afterObs, trees), j.f.now()), domain.SampleOf(afterObs), afterObs.Replay
		if res.ScreenHash != "" || afterObs.ScreenHash != obs.ScreenHash || look == settleLooks {
			return after, sample, replay
		}
		select {
		case <-ctx.Done():
			return after, sample, replay
		case <-time.After(settleDelay):
		}
	}
}

// abandon records that the action never started, for the reason why: it
// fails with device_unavailable (offline), not retryable since this
// action is over.
func (j *actionJob) abandon(ctx context.Context, why string) jobResult {
	o := j.outcome(ctx, j.f.now())
	return o.fail(neverRan(j.req.DeviceID, why).WithRetryable(false), nil)
}

// outcome starts recording how the action ended, from its request.
func (j *actionJob) outcome(ctx context.Context, started time.Time) *outcome {
	rec := &domain.ActionRecord{}
	rec.Apply(j.orgID, j.req, 1)
	return &outcome{f: j.f, ctx: ctx, j: j, rec: rec, started: started}
}

// outcome records how one action ended.
type outcome struct {
	f       *Fleet
	ctx     context.Context
	j       *actionJob
	rec     *domain.ActionRecord
	started time.Time
	d       *domain.Device
	backend domain.Backend
	before  *frameRow
	// fence is the claim on the device's host the job runs under; what
	// it writes after the device acted carries it (record).
	fence domain.HostFence
	// afterState is the replay bytes of the device's last look after it
	// acted: a stateful backend's saved state at that moment
	// (domain.StatefulBackend), saved as it is instead of asked for again.
	afterState []byte
}

// fail records that the action failed with err. It is reached only before
// the action was sent, or with a failure the backend classified, so an
// unclassified error is recorded as nothing done (beforeSending): a
// receipt's internal_error would answer every retry of its key with a 500
// for good (issue 27), as an adb device's probe failing unclassified when
// its turn came once did in principle.
func (o *outcome) fail(err error, after *frameRow) jobResult {
	e := domain.AsError(beforeSending(err))
	reason, _ := e.Extra["reason"].(string)
	ev := domain.ActionFailed{ActionID: o.rec.Requested.ActionID, DeviceID: o.j.req.DeviceID, Code: e.Code, Message: e.Message,
		Reason: reason, StartedAt: o.started, FinishedAt: o.f.now()}
	if o.before != nil {
		ev.FrameBefore = o.before.ref()
	}
	if after != nil {
		ev.FrameAfter = after.ref()
	}
	return o.record("failed", ev, false, o.before, after)
}

func (o *outcome) unknown(reason string) jobResult {
	ev := domain.ActionOutcomeUnknown{ActionID: o.rec.Requested.ActionID, DeviceID: o.j.req.DeviceID, Reason: reason, At: o.f.now()}
	return o.record("unknown", ev, true, o.before, nil)
}

func (o *outcome) commit(res domain.ActionResult, effect *domain.ActionEffect, after *frameRow) jobResult {
	ev := domain.ActionCommitted{ActionID: o.rec.Requested.ActionID, DeviceID: o.j.req.DeviceID, Result: res, Effect: effect,
		StartedAt: o.started, FinishedAt: o.f.now()}
	if o.before != nil {
		ev.FrameBefore = o.before.ref()
	}
	if after != nil {
		ev.FrameAfter = after.ref()
	}
	return o.record("committed", ev, true, o.before, after)
}

// record appends the outcome event, as the action aggregate decides it,
// and, in the same unit, stores the new frames, saves the device's state
// and closes the idempotency row.
//
// Once the device has acted the outcome is known, and only writing it can
// fail: a write that fails for any reason but a decided conflict is tried
// again, with backoff, until the database takes it. Meanwhile the device's
// queue waits (its next action must see this one recorded), and a client
// repeating the key hears that the action is still in progress. Only when
// the runtime is stopping does recording give up, after recordTimeout;
// the next start then marks the action outcome unknown, since no process
// knows it any more.
func (o *outcome) record(state string, ev domain.Event, saveState bool, frames ...*frameRow) jobResult {
	f := o.f
	var rows []frameRow
	for _, r := range frames {
		if r != nil && !r.stored && (len(rows) == 0 || rows[0].ID != r.ID) {
			rows = append(rows, *r)
		}
	}
	var devState []byte
	if _, stateful := o.backend.(domain.StatefulBackend); saveState && stateful && o.afterState != nil {
		devState = o.afterState // nothing acted on the device since that look: its queue runs this job
	} else if saveState {
		s, err := savedState(o.backend)
		if err != nil {
			return jobResult{err: err}
		}
		devState = s
	}
	req := o.rec.Requested
	finished := f.now()
	// What a job writes once the device acted (its outcome, frames and
	// the device's state) is fenced: the database refuses it if another
	// process took the host over meanwhile.
	var fence domain.HostFence
	if saveState {
		var held bool
		if fence, held = f.fenceNow(o.fence); !held {
			return o.fenced()
		}
	}
	decide := func(r *domain.ActionRecord, u *eventstore.Unit) ([]domain.Event, error) {
		if r.Finished() {
			return nil, nil // recorded already (a write that failed after its commit)
		}
		var evs []domain.Event
		var err error
		switch e := ev.(type) {
		case domain.ActionCommitted:
			evs, err = r.Commit(e)
		case domain.ActionFailed:
			evs, err = r.Fail(e)
		case domain.ActionOutcomeUnknown:
			evs, err = r.MarkOutcomeUnknown(e.Reason, e.At)
		default:
			err = fmt.Errorf("commands: %s is no action outcome", ev.EventName())
		}
		if err != nil {
			return nil, err
		}
		sql, args := closing{frames: rows, fence: fence, d: o.d, state: devState, orgID: o.j.orgID, key: req.IdempotencyKey,
			final: state, at: finished}.statement()
		u.Exec(sql, args...)
		return evs, nil
	}
	ctx := eventstore.WithMetadata(context.WithoutCancel(o.ctx), o.j.meta)
	var rec domain.ActionRecord
	var c eventstore.Committed
	var err error
	var stopping time.Time
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		actx, cancel := context.WithTimeout(ctx, recordTimeout)
		rec, c, err = f.actions.UpdateFrom(actx, req.ActionID, *o.rec, o.rec.Version, decide)
		cancel()
		if err == nil || !eventstore.Transient(err) {
			break
		}
		if o.ctx.Err() != nil {
			if stopping.IsZero() {
				stopping = time.Now()
			} else if time.Since(stopping) > recordTimeout {
				break
			}
		}
		time.Sleep(pause)
	}
	if saveState && fenceRefused(err) {
		f.runtime.Lose(o.j.host)
		return o.fenced()
	}
	if saveState && err == nil && len(c.Appends) == 0 && fence.Epoch != 0 {
		// Settled already, so nothing fenced was written: by another
		// process's takeover pass while the device acted (the zombie
		// window, between the check before the act and the act). Whether
		// this process still holds the host is asked now, so that a zombie
		// stops at once rather than at its next claim attempt.
		cctx, cancel := context.WithTimeout(ctx, recordTimeout)
		if cerr := f.checkFence(cctx, fence); fenceRefused(cerr) {
			f.runtime.Lose(o.j.host)
		}
		cancel()
	}
	if err != nil {
		return jobResult{err: err}
	}
	if len(c.Appends) > 0 {
		for _, row := range rows {
			f.runtime.RememberFrames(row.StoredFrame)
		}
	}
	*o.rec = rec
	return jobResult{receipt: rec.Receipt(), appended: c.Last(), err: rec.OutcomeError()}
}

// fenced records the action's outcome unknown after this process lost its
// claim on the device's host while the device acted: nothing it saw is
// kept (neither frames nor the device's state), since the new holder
// drives the device now. The record itself is not fenced: it only says
// that no process knows the outcome, which the new holder's takeover pass
// says too, and the first of the two to commit stands.
func (o *outcome) fenced() jobResult {
	ev := domain.ActionOutcomeUnknown{ActionID: o.rec.Requested.ActionID, DeviceID: o.j.req.DeviceID, Reason: whyFencedAfter, At: o.f.now()}
	return o.record("unknown", ev, false)
}

// closing is what closes an action besides its events, written as one
// statement (statement): the frames it stored, the check that fence is
// still the host's claim (none when its Epoch is 0), the device's saved
// state (when state is not nil, so that the device comes back as it was
// recorded after a restart) and the action's final state (committed,
// failed or unknown) in its idempotency row. The writes are
// data-modifying CTEs, which PostgreSQL runs to completion whatever the
// outer query reads; the outer query is the fence's check itself, so it
// runs exactly once, and a stale claim (SQLSTATE PF409) fails the
// statement and with it the whole unit, as the separate statements did.
// The check's row lock (FOR SHARE on the host's claim) is held to the
// unit's commit either way.
type closing struct {
	frames     []frameRow
	fence      domain.HostFence
	d          *domain.Device
	state      []byte
	orgID, key string
	final      string
	at         time.Time
}

// statement returns closing's statement and its arguments.
func (c closing) statement() (string, []any) {
	var args []any
	params := func(vs ...any) string { // placeholders for vs, appended to args
		ps := make([]string, len(vs))
		for i, v := range vs {
			args = append(args, v)
			ps[i] = fmt.Sprintf("$%d", len(args))
		}
		return strings.Join(ps, ", ")
	}
	at := params(c.at)
	ctes := []string{`closed AS (UPDATE action_idempotency SET (state, finished_at) = (` + params(c.final) + `, ` + at +
		`) WHERE (org_id, idempotency_key) = (` + params(c.orgID, c.key) + `))`}
	for i, row := range c.frames {
		var snap any
		if row.Snapshot != nil {
			snap = string(row.Snapshot)
		}
		ctes = append(ctes, fmt.Sprintf(`frame%d AS (%s VALUES (%s))`, i, insertFrameColumns, params(row.ID, row.OrgID, row.DeviceID,
			row.Backend, row.ScreenHash, row.Width, row.Height, row.CapturedAt, row.ExpiresAt, row.PNG, snap, row.Replay)))
	}
	if c.state != nil {
		ctes = append(ctes, `saved AS (INSERT INTO device_states (device_id, org_id, backend, model, state, updated_at) VALUES (`+
			params(c.d.ID, c.d.OrgID, c.d.Backend, c.d.Model, c.state)+`, `+at+
			`) ON CONFLICT (device_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at)`)
	}
	check := `SELECT 1`
	if c.fence.Epoch != 0 {
		host, epoch := params(c.fence.Host), params(c.fence.Epoch)
		check = fenceSQL(c.fence.Host, host, epoch)
	}
	return `WITH ` + strings.Join(ctes, ",\n") + "\n" + check, args
}

// queueDeviceState adds saving the device's state to the unit u, so that
// the device comes back as it was recorded after a restart.
func queueDeviceState(u *eventstore.Unit, d *domain.Device, state []byte, at time.Time) {
	u.Exec(`INSERT INTO device_states (device_id, org_id, backend, model, state, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (device_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at`,
		d.ID, d.OrgID, d.Backend, d.Model, state, at)
}

// closeIdempotency adds recording the action's final state (committed,
// failed or unknown) in its idempotency row to the unit u.
func closeIdempotency(u *eventstore.Unit, orgID, key, state string, at time.Time) {
	u.Exec(`UPDATE action_idempotency SET state = $3, finished_at = $4 WHERE org_id = $1 AND idempotency_key = $2`,
		orgID, key, state, at)
}
