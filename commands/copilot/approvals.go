package copilot

import (
	"context"
	"errors"
	"fmt"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// ListApprovals lists the person's approvals (GET /v1/copilot/approvals),
// newest first.
type ListApprovals struct {
	Auth domain.Auth
	// State narrows the list (pending, granted, denied, expired, refused);
	// empty lists all.
	State string
	Limit int
}

// ListApprovalsHandler handles ListApprovals.
type ListApprovalsHandler struct{ c *Copilot }

// Handle answers the caller's own approvals in their organisation.
func (h ListApprovalsHandler) Handle(ctx context.Context, q ListApprovals) ([]projections.CopilotApprovalView, error) {
	if err := access(q.Auth); err != nil {
		return nil, err
	}
	switch q.State {
	case "", domain.ApprovalPending, domain.ApprovalGranted, domain.ApprovalDenied, domain.ApprovalExpired, domain.ApprovalRefused:
	default:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "state must be pending, granted, denied, expired or refused").With("field", "state")
	}
	switch {
	case q.Limit == 0:
		q.Limit = 50
	case q.Limit < 1 || q.Limit > 100:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "limit must be between 1 and 100").With("field", "limit")
	}
	return h.c.cfg.Queries.Approvals(ctx, q.Auth.OrgID, q.Auth.UserID, q.Auth.Devices, q.State, q.Limit)
}

// Decisions on an approval.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// DecideApproval is the person's yes or no to an action the copilot asked
// to run (POST /v1/copilot/approvals). Digest is the digest they were
// shown: a yes counts only for exactly that.
type DecideApproval struct {
	Auth       domain.Auth
	ApprovalID string
	Decision   string
	Digest     string
}

// DecidedApproval is what a decision came to: the approval's state and,
// for an approved action, its receipt.
type DecidedApproval struct {
	ThreadID   string
	ApprovalID string
	State      string
	Receipt    *domain.Receipt
}

// DecideApprovalHandler handles DecideApproval.
type DecideApprovalHandler struct{ c *Copilot }

// Handle records a no (denied), or on a yes runs the approved action
// through the fleet's PerformAction as the person, its idempotency key
// naming the approval, with copilot.approval_granted recorded in the same
// unit as the action's request. The action runs only while the digest the
// person approved, the arguments, the frame it was decided on (the
// fleet's stale-frame check) and the fencing token of the person's lease
// all match; otherwise the approval is recorded refused and the answer is
// 409 wrong_state (state refused, reason digest_mismatch, lease_changed or
// screen_changed): the copilot must ask again. An approval past its time
// is recorded expired and answered 409 wrong_state (state expired); a
// decided one 409 wrong_state naming its state. Other refusals:
// permission_denied, invalid_argument, not_found (not the caller's).
func (h DecideApprovalHandler) Handle(ctx context.Context, cmd DecideApproval) (DecidedApproval, error) {
	c, a := h.c, cmd.Auth
	if err := access(a); err != nil {
		return DecidedApproval{}, err
	}
	if cmd.Decision != DecisionApprove && cmd.Decision != DecisionDeny {
		return DecidedApproval{}, domain.Errorf(domain.CodeInvalidArgument, "decision must be approve or deny").With("field", "decision")
	}
	if cmd.Decision == DecisionApprove && cmd.Digest == "" {
		return DecidedApproval{}, domain.Errorf(domain.CodeInvalidArgument, "digest is required to approve: the digest of the action you were shown").
			With("field", "digest")
	}
	if !domain.HasPrefix(cmd.ApprovalID, domain.PrefixCopilotApproval) {
		return DecidedApproval{}, domain.ErrCopilotApprovalNotFound(cmd.ApprovalID)
	}
	threadID, found, err := c.cfg.Queries.ApprovalThread(ctx, a.OrgID, a.UserID, cmd.ApprovalID)
	if err != nil {
		return DecidedApproval{}, err
	}
	if !found {
		return DecidedApproval{}, domain.ErrCopilotApprovalNotFound(cmd.ApprovalID)
	}
	out := DecidedApproval{ThreadID: threadID, ApprovalID: cmd.ApprovalID}
	for attempt := 0; ; attempt++ {
		t, version, err := c.visibleThread(ctx, a, threadID)
		if err != nil {
			return out, err
		}
		now := c.now()
		ap, expired, err := t.Pending(cmd.ApprovalID, now)
		if err != nil {
			return out, err
		}
		if len(expired) > 0 {
			if err := c.record(ctx, threadID, version, expired...); err != nil {
				return out, c.retry(err)
			}
			return out, domain.Errorf(domain.CodeWrongState, "approval %s expired at %s; ask the copilot again", ap.ApprovalID,
				ap.ExpiresAt.Format("2006-01-02T15:04:05Z07:00")).With("state", domain.ApprovalExpired).With("approvalId", ap.ApprovalID)
		}
		if cmd.Decision == DecisionDeny {
			if err := c.record(ctx, threadID, version, domain.CopilotApprovalDenied{ThreadID: threadID, ApprovalID: ap.ApprovalID,
				By: domain.ActorOf(a), At: now}); err != nil {
				return out, c.retry(err)
			}
			out.State = domain.ApprovalDenied
			return out, nil
		}
		refuse := func(reason, detail string) (DecidedApproval, error) {
			if err := c.record(ctx, threadID, version, domain.CopilotApprovalRefused{ThreadID: threadID, ApprovalID: ap.ApprovalID,
				Reason: reason, Detail: detail, At: now}); err != nil {
				return out, err
			}
			return out, domain.Errorf(domain.CodeWrongState, "approval %s no longer matches what would happen: %s; nothing ran, ask the copilot again",
				ap.ApprovalID, detail).With("state", domain.ApprovalRefused).With("reason", reason).With("approvalId", ap.ApprovalID)
		}
		if cmd.Digest != ap.Digest ||
			domain.CopilotActionDigest(ap.Action, ap.Arguments, ap.Frame, ap.FencingToken) != ap.Digest {
			return c.retryRefusal(refuse(domain.ApprovalStaleDigest, "the action or its arguments differ from those approved"))
		}
		lease, err := c.personsLease(ctx, a, ap.DeviceID)
		if err != nil {
			return out, err
		}
		if lease == nil || lease.FencingToken != ap.FencingToken {
			return c.retryRefusal(refuse(domain.ApprovalStaleLease, "the lease it was decided under ended"))
		}
		news, err := eventstore.Encode(domain.Events, a.OrgID, domain.Event(domain.CopilotApprovalGranted{ThreadID: threadID,
			ApprovalID: ap.ApprovalID, By: domain.ActorOf(a), At: now}))
		if err != nil {
			return out, err
		}
		act, err := c.devices.Act.Handle(ctx, fleet.PerformAction{Auth: a, DeviceID: ap.DeviceID, Action: ap.Action,
			Arguments: ap.Arguments, IdempotencyKey: "copilot-" + ap.ApprovalID, LeaseID: lease.LeaseID, ObservedFrame: ap.Frame,
			Also: &fleet.StreamAppend{StreamID: domain.CopilotThreadStream(threadID), Expected: version, Events: news}})
		var de *domain.Error
		errors.As(err, &de)
		granted := err == nil || c.granted(ctx, threadID, ap.ApprovalID)
		switch {
		case errors.Is(err, eventstore.ErrConflict) && attempt < 3:
			continue // the thread moved on: decide again
		case !granted:
			return out, err // refused before anything was recorded: still pending
		}
		done := domain.CopilotToolCompleted{ThreadID: threadID, TurnID: ap.TurnID, CallID: ap.CallID, ApprovalID: ap.ApprovalID,
			IdempotencyKey: "copilot-" + ap.ApprovalID, State: "failed", At: c.now()}
		if err == nil {
			rc := act.Receipt
			out.Receipt = &rc
			done.State, done.ActionID, done.ReceiptState, done.FrameBefore, done.FrameAfter = "succeeded", rc.ActionID, rc.State,
				rc.Frames.Before, rc.Frames.After
			if rc.Error != nil {
				done.State, de = "failed", &domain.Error{Code: rc.Error.Code, Message: rc.Error.Message}
			}
		}
		if de != nil {
			done.Error = &domain.CopilotToolError{Code: string(de.Code), Message: de.Message}
		}
		evs := []domain.Event{done}
		stale := de != nil && de.Code == domain.CodeStaleFrame
		if stale {
			// Checked on the device when its turn came: the screen was no
			// longer the one approved, and nothing was done.
			evs = append(evs, domain.CopilotApprovalRefused{ThreadID: threadID, ApprovalID: ap.ApprovalID,
				Reason: domain.ApprovalStaleFrame, Detail: "the screen changed since the frame it was decided on", At: c.now()})
		}
		if rerr := c.record(ctx, threadID, eventstore.AnyVersion, evs...); rerr != nil {
			return out, rerr
		}
		if stale {
			out.State = domain.ApprovalRefused
			return out, domain.Errorf(domain.CodeWrongState, "approval %s no longer matches what would happen: the screen changed since the frame it was decided on; nothing ran, ask the copilot again",
				ap.ApprovalID).With("state", domain.ApprovalRefused).With("reason", domain.ApprovalStaleFrame).With("approvalId", ap.ApprovalID)
		}
		out.State = domain.ApprovalGranted
		return out, err
	}
}

// retry turns a conflict on the thread into a retryable answer.
func (c *Copilot) retry(err error) error {
	if errors.Is(err, eventstore.ErrConflict) {
		return domain.Errorf(domain.CodeInternal, "the thread changed while deciding; try again").WithRetryable(true)
	}
	return err
}

func (c *Copilot) retryRefusal(out DecidedApproval, err error) (DecidedApproval, error) {
	return out, c.retry(err)
}

// record appends events to a thread's stream at version and waits for the
// read model.
func (c *Copilot) record(ctx context.Context, threadID string, version int64, evs ...domain.Event) error {
	t, _, err := c.threads.Load(ctx, threadID)
	if err != nil {
		return err
	}
	news, err := eventstore.Encode(domain.Events, t.OrgID, evs...)
	if err != nil {
		return err
	}
	ap, err := c.cfg.Store.Append(ctx, domain.CopilotThreadStream(threadID), version, news...)
	if err != nil {
		return err
	}
	return c.wait(ctx, ap)
}

// granted reports whether the approval's yes was recorded (with its
// action's request).
func (c *Copilot) granted(ctx context.Context, threadID, approvalID string) bool {
	t, _, err := c.threads.Load(context.WithoutCancel(ctx), threadID)
	return err == nil && t.Approvals[approvalID] != nil && t.Approvals[approvalID].State == domain.ApprovalGranted
}

// personsLease returns the person's lease in force on the device, if any.
func (c *Copilot) personsLease(ctx context.Context, a domain.Auth, deviceID string) (*projections.LeaseView, error) {
	page, err := c.devices.ListLeases.Handle(ctx, fleet.ListLeases{Auth: a, LeaseQuery: fleet.LeaseQuery{DeviceID: deviceID}})
	if err != nil {
		return nil, fmt.Errorf("the person's lease: %w", err)
	}
	for _, l := range page.Leases {
		if l.DeviceID == deviceID && l.Holder.UserID == a.UserID && l.Holder.RunID == "" {
			return &l, nil
		}
	}
	return nil, nil
}
