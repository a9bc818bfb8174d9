package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// PerformAction asks for one action on a leased device (POST
// /v1/devices/{deviceId}/actions).
type PerformAction struct {
	Auth     domain.Auth
	DeviceID string
	// Action is the action type (tap, swipe, …) and Arguments its object.
	Action    string
	Arguments json.RawMessage
	// IdempotencyKey names this action for the organisation: a retry with
	// the same key never acts twice.
	IdempotencyKey string
	// RetryIfUnchanged asks, on a retry with the same key, that the action
	// be performed again if its latest attempt committed without effect
	// (domain.MayRetry); each further attempt is its own action and
	// receipt under domain.AttemptKey. Otherwise the latest attempt's
	// outcome answers, as for any retry.
	RetryIfUnchanged bool
	LeaseID          string
	// ObservedFrame, when set, is the frame the caller decided on; if the
	// screen has changed since, the action is refused (stale_frame) before
	// anything physical happens.
	ObservedFrame string
	// AgentRunID attributes the action to a run.
	AgentRunID string
	// APK, for install_app, is the file to install (the app store's
	// installations); it must hash to its SHA-256, checked before anything
	// is recorded or sent.
	APK *domain.APK
	// Also, when set, appends events that commit with the action's
	// request or not at all (a run's step). A stream that moved on from
	// the version it expects fails the request with eventstore.ErrConflict
	// before anything physical happens. It is data, not a function, since
	// the request may be recorded by the instance driving the device.
	Also *StreamAppend
}

// StreamAppend is events to append to a stream expected at a version.
type StreamAppend struct {
	StreamID string
	Expected int64
	Events   []eventstore.NewEvent
}

// ActOutcome is an action's answer: its receipt, and whether it is the
// recorded outcome of an earlier request with the same key.
type ActOutcome struct {
	Receipt  domain.Receipt
	Replayed bool
}

// PerformActionHandler handles PerformAction.
type PerformActionHandler struct{ f *Fleet }

// PerformAction returns the handler of PerformAction.
func (f *Fleet) PerformAction() PerformActionHandler { return PerformActionHandler{f} }

// Handle records the action as requested — the receipt exists, pending —
// in one transaction with its idempotency row, then hands it to the
// device's queue and waits for the outcome. It needs devices:act.
//
// A key already used answers without acting: the recorded outcome when
// that action finished (its receipt, or its failure), idempotency_conflict
// (retryable) while it is in flight, idempotency_conflict (not retryable)
// when the key was used for a different action. Refusals before anything
// is recorded: invalid_argument, device_unavailable (not_found, offline),
// backend_resolution_failed, backend_not_implemented,
// capability_unsupported, lease_required, lease_mismatch, frame_not_found,
// stale_frame, device_busy. Outcomes: the committed receipt, or the failure
// (stale_frame, lease_mismatch, invalid_argument, device_unavailable,
// device_disconnected, backend_command_failed), or action_outcome_unknown.
//
// The database failing under the request (a lost connection, a server
// shutting down or starting) is never a 500: it answers as what it means
// for the action (databaseFailure).
func (h PerformActionHandler) Handle(ctx context.Context, cmd PerformAction) (ActOutcome, error) {
	at := reachedNothing
	out, err := h.handle(ctx, cmd, &at)
	if err != nil && ctx.Err() == nil && databaseFailed(err) {
		return ActOutcome{}, databaseFailure(cmd, at)
	}
	return out, err
}

// reached is how far a request got before the database failed under it.
type reached int

const (
	// reachedNothing: nothing of the request was recorded.
	reachedNothing reached = iota
	// reachedRecord: its record may have committed (the key may be
	// used); the device's queue settles it failed, never run.
	reachedRecord
	// reachedDevice: the action was handed to the device (its queue here,
	// or the instance driving it): it may have been performed.
	reachedDevice
)

// databaseFailed reports whether err is the database failing under the
// request (eventstore.Transient) rather than an answer.
func databaseFailed(err error) bool {
	var de *domain.Error
	return !errors.As(err, &de) && eventstore.Transient(err)
}

// databaseFailure is the answer to a request the database failed under,
// by how far it got (docs/decisions.md, "An action the database fails
// under"): before anything was recorded, device_unavailable (offline),
// retryable, after retryAfterMs; when its record may have committed,
// device_unavailable not retryable (the key may be used, by an action
// settled as never run: a new key performs it); once it was handed to the
// device, action_outcome_unknown.
func databaseFailure(cmd PerformAction, at reached) *domain.Error {
	switch at {
	case reachedDevice:
		return domain.Errorf(domain.CodeActionOutcomeUnknown, "the database failed while this action was under way; its outcome is unknown: observe the device again and use a new idempotencyKey").
			WithRetryable(false).With("idempotencyKey", cmd.IdempotencyKey).With("deviceId", cmd.DeviceID)
	case reachedRecord:
		return neverRan(cmd.DeviceID, "the database failed while this action was being accepted; nothing was done: repeat it with a new idempotencyKey").
			WithRetryable(false).With("idempotencyKey", cmd.IdempotencyKey)
	default:
		return neverRan(cmd.DeviceID, "the database cannot be reached; nothing was done: repeat the request shortly").
			WithRetryable(true).With("retryAfterMs", databaseRetryAfterMs)
	}
}

// databaseRetryAfterMs is how long a request refused because the database
// could not be reached is told to wait (an immediate restart of
// PostgreSQL takes about a second).
const databaseRetryAfterMs = 1000

func (h PerformActionHandler) handle(ctx context.Context, cmd PerformAction, at *reached) (ActOutcome, error) {
	f := h.f
	auth := cmd.Auth
	if err := auth.Require(domain.ScopeDevicesAct); err != nil {
		return ActOutcome{}, err
	}
	if err := domain.CheckIdempotencyKey(cmd.IdempotencyKey); err != nil {
		return ActOutcome{}, err
	}
	action, err := domain.ParseAction(cmd.Action, cmd.Arguments)
	if err != nil {
		return ActOutcome{}, err
	}
	if cmd.APK != nil {
		if action.Type != domain.ActionInstallApp || cmd.APK.Package != action.Package {
			return ActOutcome{}, domain.Errorf(domain.CodeInvalidArgument, "an APK goes with install_app of its own package")
		}
		if err := cmd.APK.Verify(); err != nil {
			return ActOutcome{}, err
		}
		action.APK = cmd.APK
	}
	fp := action.Fingerprint(cmd.DeviceID)
	if cmd.RetryIfUnchanged {
		if cmd.IdempotencyKey, err = h.attempt(ctx, auth, cmd.IdempotencyKey, fp); err != nil {
			return ActOutcome{}, err
		}
		cmd.RetryIfUnchanged = false // decided here, not again where the device is driven
	}
	// refuse answers a refusal, unless the key was used before: then the
	// key's first use decides the answer.
	refuse := func(err error) (ActOutcome, error) {
		out, found, rerr := h.replay(ctx, auth, cmd.IdempotencyKey, fp)
		if found || rerr != nil {
			return out, rerr
		}
		return ActOutcome{}, err
	}
	if !domain.HasPrefix(cmd.DeviceID, domain.PrefixDevice) || !auth.CanSeeDevice(cmd.DeviceID) {
		return refuse(domain.ErrDeviceNotFound(cmd.DeviceID))
	}
	// The request is decided on the device's state as this process last
	// saw it, and recorded only if the device's stream has not moved on
	// since (Unit.Expect), so an action reads nothing before it is
	// recorded. A refusal, or a stream that moved on, is decided again on
	// the state loaded afresh (the repository's DecideCached).
	var out ActOutcome
	err = f.devices.DecideCached(ctx, cmd.DeviceID, func(d domain.Device, version int64, cached bool) (err error) {
		if !cached && (!d.Registered() || d.OrgID != auth.OrgID) {
			out, err = refuse(domain.ErrDeviceNotFound(cmd.DeviceID))
			return err
		}
		if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
			return err
		} else if remote {
			*at = reachedDevice
			out, err = h.forward(ctx, cmd, host, fp)
			return err
		}
		job, slot, err := h.accept(ctx, cmd, auth, action, d)
		if err != nil {
			if cached {
				return eventstore.ErrStale
			}
			out, err = refuse(err)
			return err
		}
		requestedID, inserted, err := h.record(ctx, auth.OrgID, job.req, fp, d.ID, version, job.host, cmd.Also)
		if errors.Is(err, eventstore.ErrConflict) && cached {
			slot.Cancel() // the device moved on: decide again
			return eventstore.ErrStale
		}
		if eventstore.Transient(err) {
			// The write may have committed before the connection failed.
			// The device's queue settles it once the database answers, so
			// that a request recorded here is never left pending: it never
			// ran.
			settle := func(ctx context.Context) jobResult { return job.abandon(ctx, whyDatabase) }
			submit(slot, settle, settle)
			*at = reachedRecord
			return err
		}
		if err != nil || !inserted {
			slot.Cancel()
			if err != nil {
				return err
			}
			// A concurrent request with the same key recorded first.
			out, _, err = h.replay(ctx, auth, cmd.IdempotencyKey, fp)
			return err
		}
		*at = reachedDevice
		out, err = h.hand(ctx, job, slot, requestedID)
		return err
	})
	return out, err
}

// accept checks the action against the device's state d — its tenancy,
// backend, capabilities, lease and observedFrame — and reserves its place
// in the device's queue. Its refusals are those of Handle before anything
// is recorded.
func (h PerformActionHandler) accept(ctx context.Context, cmd PerformAction, auth domain.Auth, action domain.Action, d domain.Device) (*actionJob, domain.QueueSlot, error) {
	f := h.f
	if !d.Registered() || d.OrgID != auth.OrgID || !auth.CanSeeDevice(d.ID) {
		return nil, nil, domain.ErrDeviceNotFound(cmd.DeviceID)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return nil, nil, err
	}
	if err := backend.Capabilities().Check(action); err != nil {
		return nil, nil, err
	}
	now := f.now()
	actor := domain.ActorOf(auth)
	lease, err := d.CheckLease(now, domain.HolderOf(auth), cmd.LeaseID)
	if err != nil {
		return nil, nil, err
	}
	var observedHash string
	if cmd.ObservedFrame != "" {
		if !domain.HasPrefix(cmd.ObservedFrame, domain.PrefixFrame) {
			return nil, nil, frameNotFound(cmd.ObservedFrame)
		}
		m, ok, err := f.lookupFrame(ctx, auth.OrgID, cmd.ObservedFrame, now)
		if err != nil {
			return nil, nil, err
		}
		if !ok || !auth.CanSeeDevice(m.DeviceID) {
			return nil, nil, frameNotFound(cmd.ObservedFrame)
		}
		if m.DeviceID != d.ID {
			return nil, nil, domain.Errorf(domain.CodeStaleFrame, "observedFrame %s shows another device", cmd.ObservedFrame).With("reason", "other_device").
				With("deviceId", d.ID)
		}
		observedHash = m.ScreenHash
	}
	var seen *domain.UIElement
	if action.Ref != "" && cmd.ObservedFrame != "" {
		if seen, err = f.observedElement(ctx, auth, cmd.ObservedFrame, action.Ref); err != nil {
			return nil, nil, err
		}
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		return nil, nil, err
	}
	slot, err := f.runtime.Reserve(d.ID)
	if err != nil {
		return nil, nil, err
	}
	req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: d.ID,
		IdempotencyKey: cmd.IdempotencyKey, Action: action.Type, Arguments: action.ArgumentsJSON(), Actor: actor,
		AgentRunID: cmd.AgentRunID, RunID: auth.RunID, LeaseID: lease.ID, FencingToken: lease.FencingToken,
		ObservedFrame: cmd.ObservedFrame, RequestedAt: now}
	host, _ := f.runtime.Locate(&d)
	return &actionJob{f: f, orgID: auth.OrgID, host: host, req: req, action: action, observedHash: observedHash, seen: seen, meta: meta}, slot, nil
}

// hand gives the recorded action to its device's queue and waits for its
// outcome.
func (h PerformActionHandler) hand(ctx context.Context, job *actionJob, slot domain.QueueSlot, requestedID string) (ActOutcome, error) {
	f := h.f
	// The outcome's events are caused by the request's event.
	job.meta.CausationID = requestedID
	done := submit(slot, job.run, func(ctx context.Context) jobResult { return job.abandon(ctx, whyStopped) })
	res, err := await(ctx, done)
	if err != nil {
		return ActOutcome{}, err // the action goes on; a retry with the key answers its outcome
	}
	if f.cfg.WaitForReceipts && res.appended.LastPosition > 0 {
		// The outcome is recorded: a database failing while the receipts
		// catch up does not hide it (they catch up once it is back).
		if err := f.waitFor(ctx, res.appended, projections.ReceiptsName); err != nil && (ctx.Err() != nil || !databaseFailed(err)) {
			return ActOutcome{}, err
		}
	}
	if res.err != nil {
		return ActOutcome{}, res.err
	}
	return ActOutcome{Receipt: res.receipt}, nil
}

// record inserts the idempotency row and appends action.requested as one
// unit (which concurrent requests share: group commit); inserted is false
// when the key was taken (by a concurrent duplicate, decided by the
// primary key). It returns the id of the action.requested event.
// The unit also expects the device's stream at deviceVersion, the state
// the request was decided on (ErrConflict when it moved on), unless
// deviceVersion is negative; host is the host it is accepted under.
func (h PerformActionHandler) record(ctx context.Context, orgID string, req domain.ActionRequested, fp, deviceID string, deviceVersion int64, host string, also *StreamAppend) (string, bool, error) {
	news, err := eventstore.Encode(domain.Events, orgID, domain.Event(req))
	if err != nil {
		return "", false, err
	}
	news[0].ID = uuid.Must(uuid.NewV7())
	// The idempotency row's insert and the device's expectation are one
	// statement: the insert is a data-modifying CTE (run to completion) under
	// the expectation's SELECT, which fails the unit (PF409) when the
	// device's stream moved on, as Unit.Expect's own statement did.
	args := []any{orgID, req.IdempotencyKey, req.ActionID, req.DeviceID, fp, req.RequestedAt, host}
	check, stream := `SELECT 1`, h.f.devices.Stream(deviceID)
	if deviceVersion >= 0 {
		check, args = `SELECT eventstore_expect($8, $9)`, append(args, stream, deviceVersion)
	}
	u := (&eventstore.Unit{}).
		Exec(`WITH requested AS (INSERT INTO action_idempotency (org_id, idempotency_key, action_id, device_id, fingerprint, state, requested_at, host)
			VALUES ($1, $2, $3, $4, $5, 'requested', $6, $7)) `+check, args...).
		Append(domain.ActionStream(req.ActionID), eventstore.NoStream, news...)
	if also != nil {
		u.Append(also.StreamID, also.Expected, also.Events...)
	}
	_, err = h.f.store.Commit(ctx, u)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "action_idempotency_pkey" {
		return "", false, nil
	}
	if errors.As(err, &pgErr) && pgErr.Code == "PF409" {
		// Only the expectation raises it raw (the unit's appends report
		// theirs as *eventstore.ConflictError).
		return "", false, &eventstore.ConflictError{StreamID: stream, Expected: deviceVersion}
	}
	if err != nil {
		return "", false, err
	}
	return news[0].ID.String(), true, nil
}

// attempt answers the key a request with RetryIfUnchanged goes under: the
// key itself when it was never used; the next attempt's when the latest
// attempt under it committed without effect (domain.MayRetry); the
// latest attempt's otherwise, whose recorded outcome (or refusal: in
// flight, used for another action) then answers. Two such retries racing
// both choose the same next key, and its idempotency row lets one act.
func (h PerformActionHandler) attempt(ctx context.Context, auth domain.Auth, key, fp string) (string, error) {
	keys := domain.AttemptKeys(key)
	rows, err := h.f.pool.Query(ctx, `SELECT idempotency_key, action_id, fingerprint, state FROM action_idempotency
		WHERE org_id = $1 AND idempotency_key = ANY($2)`, auth.OrgID, keys)
	if err != nil {
		return "", err
	}
	latest, actionID, fingerprint, state := 0, "", "", ""
	for rows.Next() {
		var k, a, f, st string
		if err := rows.Scan(&k, &a, &f, &st); err != nil {
			rows.Close()
			return "", err
		}
		if n := slices.Index(keys, k) + 1; n > latest {
			latest, actionID, fingerprint, state = n, a, f, st
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if latest == 0 {
		return key, nil
	}
	if fingerprint != fp || state != domain.ReceiptCommitted {
		return domain.AttemptKey(key, latest), nil
	}
	rec, err := h.f.loadAction(ctx, actionID)
	if err != nil {
		return "", err
	}
	if domain.MayRetry(rec.Receipt(), key, latest) {
		return domain.AttemptKey(key, latest+1), nil
	}
	return domain.AttemptKey(key, latest), nil
}

// replay answers a request whose key was used before; found is false when
// it was not.
func (h PerformActionHandler) replay(ctx context.Context, auth domain.Auth, key, fp string) (ActOutcome, bool, error) {
	var actionID, deviceID, fingerprint, state string
	err := h.f.pool.QueryRow(ctx, `SELECT action_id, device_id, fingerprint, state FROM action_idempotency
		WHERE org_id = $1 AND idempotency_key = $2`, auth.OrgID, key).Scan(&actionID, &deviceID, &fingerprint, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return ActOutcome{}, false, nil
	}
	if err != nil {
		return ActOutcome{}, true, err
	}
	if fingerprint != fp || !auth.CanSeeDevice(deviceID) {
		return ActOutcome{}, true, domain.Errorf(domain.CodeIdempotencyConflict,
			"idempotencyKey %q was already used for a different action; use a new key", key).
			WithRetryable(false).With("idempotencyKey", key)
	}
	if state == "requested" {
		return ActOutcome{}, true, domain.Errorf(domain.CodeIdempotencyConflict,
			"the action with idempotencyKey %q is still in progress; repeat shortly for its outcome", key).
			WithRetryable(true).With("idempotencyKey", key).With("deviceId", deviceID)
	}
	rec, err := h.f.loadAction(ctx, actionID)
	if err != nil {
		return ActOutcome{}, true, err
	}
	if err := rec.OutcomeError(); err != nil {
		return ActOutcome{}, true, err
	}
	return ActOutcome{Receipt: rec.Receipt(), Replayed: true}, true, nil
}

// loadAction folds an action's stream.
func (f *Fleet) loadAction(ctx context.Context, actionID string) (*domain.ActionRecord, error) {
	rec, _, err := f.actions.Load(ctx, actionID)
	return &rec, err
}
