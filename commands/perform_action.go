package commands

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
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
	LeaseID        string
	// ObservedFrame, when set, is the frame the caller decided on; if the
	// screen has changed since, the action is refused (stale_frame) before
	// anything physical happens.
	ObservedFrame string
	// AgentRunID attributes the action to a run.
	AgentRunID string
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
// device's executor and waits for the outcome. It needs devices:act.
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
func (h PerformActionHandler) Handle(ctx context.Context, cmd PerformAction) (ActOutcome, error) {
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
	fp := action.Fingerprint(cmd.DeviceID)
	// refuse answers a refusal, unless the key was used before: then the
	// key's first use decides the answer.
	refuse := func(err error) (ActOutcome, error) {
		out, found, rerr := h.replay(ctx, auth, cmd.IdempotencyKey, fp)
		if found || rerr != nil {
			return out, rerr
		}
		return ActOutcome{}, err
	}
	d, err := f.visibleDevice(ctx, auth, cmd.DeviceID)
	if err != nil {
		return refuse(err)
	}
	backend, err := f.cfg.Backends.Resolve(ctx, &d)
	if err != nil {
		return refuse(err)
	}
	if err := backend.Capabilities().Check(action); err != nil {
		return refuse(err)
	}
	now := f.now()
	actor := domain.ActorOf(auth)
	lease, err := d.CheckLease(now, actor, cmd.LeaseID)
	if err != nil {
		return refuse(err)
	}
	var observedHash string
	if cmd.ObservedFrame != "" {
		if !domain.HasPrefix(cmd.ObservedFrame, domain.PrefixFrame) {
			return refuse(frameNotFound(cmd.ObservedFrame))
		}
		m, ok, err := f.frames.lookup(ctx, auth.OrgID, cmd.ObservedFrame, now)
		if err != nil {
			return ActOutcome{}, err
		}
		if !ok || !auth.CanSeeDevice(m.DeviceID) {
			return refuse(frameNotFound(cmd.ObservedFrame))
		}
		if m.DeviceID != d.ID {
			return refuse(domain.Errorf(domain.CodeStaleFrame, "observedFrame %s shows another device", cmd.ObservedFrame).
				With("deviceId", d.ID))
		}
		observedHash = m.ScreenHash
	}
	if f.queue == nil {
		return ActOutcome{}, errors.New("commands: fleet has no executor")
	}
	slot, err := f.queue.Reserve(d.ID)
	if err != nil {
		return refuse(err)
	}
	req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: d.ID,
		IdempotencyKey: cmd.IdempotencyKey, Action: action.Type, Arguments: action.ArgumentsJSON(), Actor: actor,
		AgentRunID: cmd.AgentRunID, LeaseID: lease.ID, FencingToken: lease.FencingToken,
		ObservedFrame: cmd.ObservedFrame, RequestedAt: now}
	inserted, err := h.record(ctx, auth.OrgID, req, fp)
	if err != nil || !inserted {
		slot.Cancel()
		if err != nil {
			return ActOutcome{}, err
		}
		// A concurrent request with the same key recorded first.
		out, _, err := h.replay(ctx, auth, cmd.IdempotencyKey, fp)
		return out, err
	}
	job := Job{Kind: JobAction, OrgID: auth.OrgID, DeviceID: d.ID, Requested: req, Action: action,
		ObservedHash: observedHash, Done: make(chan JobResult, 1)}
	slot.Submit(job)
	var res JobResult
	select {
	case res = <-job.Done:
	case <-ctx.Done():
		// The action goes on; a retry with the key answers its outcome.
		return ActOutcome{}, ctx.Err()
	}
	if f.cfg.WaitForReceipts && res.Appended.LastPosition > 0 {
		if err := f.waitFor(ctx, res.Appended, "receipts"); err != nil {
			return ActOutcome{}, err
		}
	}
	if res.Err != nil {
		return ActOutcome{}, res.Err
	}
	return ActOutcome{Receipt: res.Receipt}, nil
}

// record inserts the idempotency row and appends action.requested in one
// transaction (shared with concurrent requests: group commit); inserted is
// false when the key was taken (by a concurrent duplicate, decided by the
// primary key).
func (h PerformActionHandler) record(ctx context.Context, orgID string, req domain.ActionRequested, fp string) (bool, error) {
	news, err := fleetEncode(orgID, fleetMeta(req.Actor, req.ActionID), req)
	if err != nil {
		return false, err
	}
	return h.f.requests.do(requestWrite{orgID: orgID, req: req, fp: fp, news: news})
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
	evs, err := f.store.Load(ctx, domain.ActionStream(actionID), 1)
	if err != nil {
		return nil, err
	}
	rec := &domain.ActionRecord{}
	for _, e := range evs {
		de, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return nil, err
		}
		rec.Apply(e.OrgID, de, e.StreamVersion)
	}
	return rec, nil
}
