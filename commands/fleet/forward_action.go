package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// settleTimeout bounds settling an action whose holder never answered.
const settleTimeout = 15 * time.Second

// forward sends the action to the instance holding the device's host. An
// answer is the answer. When none comes — the holder died or stalled, as
// the runtime sees by watching the host's claim — the action is settled
// from what was recorded (forwardUnanswered).
func (h PerformActionHandler) forward(ctx context.Context, cmd PerformAction, host, fp string) (ActOutcome, error) {
	var out ActOutcome
	cctx, cancel := context.WithTimeout(ctx, forwardTimeouts[OpPerformAction])
	err := h.f.runtime.CallWatched(cctx, host, OpPerformAction, cmd, &out)
	cancel()
	if !errors.Is(err, domain.ErrUnanswered) {
		return out, err
	}
	if ctx.Err() != nil {
		return ActOutcome{}, ctx.Err() // the caller gave up; a retry with the key answers the outcome
	}
	return h.forwardUnanswered(context.WithoutCancel(ctx), cmd, fp)
}

// forwardUnanswered settles an action sent to the holder of its device
// that never answered. What the holder recorded decides: an outcome is
// answered as recorded; a request with no outcome is
// action_outcome_unknown (the holder's successor, or the orphaned-host
// sweep, marks its receipt so); and when nothing was recorded the caller
// records the action itself as failed, device_disconnected, so that a
// holder merely slow to take it finds the key used and never acts.
func (h PerformActionHandler) forwardUnanswered(ctx context.Context, cmd PerformAction, fp string) (ActOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	var state string
	err := h.f.pool.QueryRow(ctx, `SELECT state FROM action_idempotency WHERE org_id = $1 AND idempotency_key = $2`,
		cmd.Auth.OrgID, cmd.IdempotencyKey).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return h.tombstone(ctx, cmd, fp)
	case err != nil:
		return ActOutcome{}, err
	case state == "requested":
		return ActOutcome{}, outcomeUnknown(cmd)
	}
	out, _, err := h.replay(ctx, cmd.Auth, cmd.IdempotencyKey, fp)
	return out, err
}

func outcomeUnknown(cmd PerformAction) *domain.Error {
	return domain.Errorf(domain.CodeActionOutcomeUnknown, "the instance driving the device went away during this action; its outcome is unknown: observe the device again and use a new idempotencyKey").
		WithRetryable(false).With("idempotencyKey", cmd.IdempotencyKey).With("deviceId", cmd.DeviceID)
}

// tombstone records a forwarded action that no holder recorded as failed
// (device_disconnected): requested and failed, and its key closed. If the
// holder recorded it first after all, its record answers.
func (h PerformActionHandler) tombstone(ctx context.Context, cmd PerformAction, fp string) (ActOutcome, error) {
	f := h.f
	action, err := domain.ParseAction(cmd.Action, cmd.Arguments)
	if err != nil {
		return ActOutcome{}, err
	}
	now := f.now()
	req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: cmd.DeviceID,
		IdempotencyKey: cmd.IdempotencyKey, Action: action.Type, Arguments: action.ArgumentsJSON(), Actor: domain.ActorOf(cmd.Auth),
		AgentRunID: cmd.AgentRunID, RunID: cmd.Auth.RunID, LeaseID: cmd.LeaseID, ObservedFrame: cmd.ObservedFrame, RequestedAt: now}
	d := domain.Device{ID: cmd.DeviceID}
	host := d.HostKey()
	if dev, _, err := f.devices.Load(ctx, cmd.DeviceID); err == nil {
		host = dev.HostKey()
	}
	requestedID, inserted, err := h.record(ctx, cmd.Auth.OrgID, req, fp, cmd.DeviceID, -1, host, nil)
	if err != nil {
		return ActOutcome{}, err
	}
	if !inserted {
		out, _, err := h.replay(ctx, cmd.Auth, cmd.IdempotencyKey, fp)
		var de *domain.Error
		if errors.As(err, &de) && de.Code == domain.CodeIdempotencyConflict && de.Retryable != nil && *de.Retryable {
			return ActOutcome{}, outcomeUnknown(cmd)
		}
		return out, err
	}
	meta, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		return ActOutcome{}, err
	}
	meta.CausationID = requestedID
	job := &actionJob{f: f, orgID: cmd.Auth.OrgID, host: host, req: req, action: action, meta: meta}
	res := job.outcome(ctx, now).fail(domain.Errorf(domain.CodeDeviceDisconnected,
		"the instance driving the device went away before taking this action; nothing was done").
		With("deviceId", cmd.DeviceID).WithRetryable(true), nil)
	if res.err != nil && domain.ErrorCode(res.err) != domain.CodeDeviceDisconnected {
		return ActOutcome{}, res.err // recording failed
	}
	if f.cfg.WaitForReceipts && res.appended.LastPosition > 0 {
		if err := f.waitFor(ctx, res.appended, projections.ReceiptsName); err != nil {
			return ActOutcome{}, err
		}
	}
	// The key is closed with that failure: repeated, it answers the same
	// (retryable false, as its replay); a new key tries again.
	return ActOutcome{}, domain.Errorf(domain.CodeDeviceDisconnected,
		"the instance driving the device went away before taking this action; nothing was done: use a new idempotencyKey to try again").
		With("deviceId", cmd.DeviceID).With("idempotencyKey", cmd.IdempotencyKey).WithRetryable(false)
}
