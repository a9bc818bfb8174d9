package provisioning

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// Fulfilments (spec 3.1, 3.2, 4.5): the organisation's phones bought, read
// from the fulfilments read model; the customer's Cancel, Return and
// cancel-renewal; the owner's refund; and the sweeps' step on one
// fulfilment (provision it when a unit frees up, move its estimate, give
// it up undelivered, end a day pass or a subscription whose renewal was
// cancelled).

// canReadFulfilments admits a signed-in person of either role, and an API
// key holding orders:place (the key that may start a prepaid checkout may
// follow what it bought). An OAuth app is refused at the edge (spec 5.2).
func canReadFulfilments(a domain.Auth) error {
	if a.IsSession() {
		return nil
	}
	if a.IsApp() {
		return a.DenyApp("orders", "the console")
	}
	if a.Kind == domain.PrincipalAPIKey {
		return a.Require(domain.ScopeOrdersPlace)
	}
	return domain.Errorf(domain.CodePermissionDenied, "reading orders needs a signed-in session or a key with scope %s", domain.ScopeOrdersPlace)
}

// canChangeFulfilments admits only a signed-in admin: cancelling or
// returning an order is never available to an API key (spec 4.1 rule 5)
// nor to an OAuth app (5.2), and a member may not do it.
func canChangeFulfilments(a domain.Auth) error {
	if err := a.RequireSession("cancelling or returning orders"); err != nil {
		return err
	}
	if a.Role != domain.RoleAdmin {
		return domain.Errorf(domain.CodePermissionDenied, "only an organisation admin may cancel or return orders")
	}
	return nil
}

// ListFulfilments pages through the organisation's fulfilments, newest
// first, optionally in one state (GET /v1/fulfilments).
type ListFulfilments struct {
	Auth domain.Auth
	projections.FulfilmentQuery
}

// ListFulfilmentsHandler handles ListFulfilments.
type ListFulfilmentsHandler struct{ *Provisioning }

// Handle answers ListFulfilments.
func (p ListFulfilmentsHandler) Handle(ctx context.Context, r ListFulfilments) (projections.FulfilmentPage, error) {
	if err := canReadFulfilments(r.Auth); err != nil {
		return projections.FulfilmentPage{}, err
	}
	if r.State != "" && r.State != domain.FulfilmentProvisionedState && r.State != domain.FulfilmentAwaitingState &&
		r.State != domain.FulfilmentCancelledState {
		return projections.FulfilmentPage{}, domain.Errorf(domain.CodeInvalidArgument,
			"state must be one of provisioned, awaiting_provisioning, cancelled").With("field", "state")
	}
	if r.Limit < 0 {
		return projections.FulfilmentPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1").With("field", "limit")
	}
	return projections.ListFulfilments(ctx, p.pool, r.Auth.OrgID, r.FulfilmentQuery)
}

// view reads a fulfilment of the caller's organisation from the read
// model; another organisation's answers exactly as a missing one.
func (p *Provisioning) view(ctx context.Context, a domain.Auth, id string) (projections.FulfilmentView, error) {
	v, ok, err := projections.GetFulfilment(ctx, p.pool, a.OrgID, id)
	if err != nil {
		return v, err
	}
	if err := a.Owned(v.OrgID, ok && v.State != "", domain.ErrFulfilmentNotFound); err != nil {
		return projections.FulfilmentView{}, err
	}
	return v, nil
}

// GetFulfilmentEstimates reads the delivery estimates given for a
// fulfilment (GET /v1/fulfilments/{id}/estimate-history).
type GetFulfilmentEstimates struct {
	Auth         domain.Auth
	FulfilmentID string
}

// FulfilmentEstimates is a fulfilment's estimate history.
type FulfilmentEstimates struct {
	Fulfilment projections.FulfilmentView
	// Estimates are the estimates given, oldest first; empty for a phone
	// that was provisioned when it was paid.
	Estimates []projections.EstimateView
}

// GetFulfilmentEstimatesHandler handles GetFulfilmentEstimates.
type GetFulfilmentEstimatesHandler struct{ *Provisioning }

// Handle answers GetFulfilmentEstimates.
func (p GetFulfilmentEstimatesHandler) Handle(ctx context.Context, r GetFulfilmentEstimates) (FulfilmentEstimates, error) {
	if err := canReadFulfilments(r.Auth); err != nil {
		return FulfilmentEstimates{}, err
	}
	v, err := p.view(ctx, r.Auth, r.FulfilmentID)
	if err != nil {
		return FulfilmentEstimates{}, err
	}
	est, err := projections.FulfilmentEstimates(ctx, p.pool, r.Auth.OrgID, r.FulfilmentID)
	return FulfilmentEstimates{Fulfilment: v, Estimates: est}, err
}

// GetFulfilmentRenewal reads whether a fulfilment renews and when (GET
// /v1/fulfilments/{id}/renewal-status).
type GetFulfilmentRenewal struct {
	Auth         domain.Auth
	FulfilmentID string
}

// FulfilmentRenewal is a fulfilment's renewal status.
type FulfilmentRenewal struct {
	Fulfilment projections.FulfilmentView
	domain.RenewalStatus
}

// renewalOf computes the renewal status of a fulfilment as the read model
// shows it, with the domain's rules.
func renewalOf(v projections.FulfilmentView, now time.Time) FulfilmentRenewal {
	f := domain.Fulfilment{FulfilmentCreated: domain.FulfilmentCreated{FulfilmentID: v.FulfilmentID, OrgID: v.OrgID,
		Choice: domain.PurchaseChoice{Sku: v.Sku, Billing: v.Billing, Model: v.Model, Region: v.Region}, At: v.CreatedAt},
		State: v.State, RenewalCancelled: v.RenewalCancelled}
	if v.ProvisionedAt != nil {
		f.ProvisionedAt = *v.ProvisionedAt
	}
	if v.RenewalCancelled && v.EndsAt != nil {
		f.EndsAt = *v.EndsAt
	}
	if v.PeriodStart != nil && v.PeriodEnd != nil {
		f.Period = domain.FulfilmentPeriodRecorded{SubscriptionID: v.SubscriptionID, PeriodStart: *v.PeriodStart, PeriodEnd: *v.PeriodEnd}
	}
	return FulfilmentRenewal{Fulfilment: v, RenewalStatus: f.Renewal(now)}
}

// GetFulfilmentRenewalHandler handles GetFulfilmentRenewal.
type GetFulfilmentRenewalHandler struct{ *Provisioning }

// Handle answers GetFulfilmentRenewal.
func (p GetFulfilmentRenewalHandler) Handle(ctx context.Context, r GetFulfilmentRenewal) (FulfilmentRenewal, error) {
	if err := canReadFulfilments(r.Auth); err != nil {
		return FulfilmentRenewal{}, err
	}
	v, err := p.view(ctx, r.Auth, r.FulfilmentID)
	if err != nil {
		return FulfilmentRenewal{}, err
	}
	return renewalOf(v, p.now()), nil
}

// CancelFulfilment is the customer's Cancel (POST
// /v1/fulfilments/{id}/cancel).
type CancelFulfilment struct {
	Auth         domain.Auth
	FulfilmentID string
}

// ReturnFulfilment is the customer's Return (POST
// /v1/fulfilments/{id}/return).
type ReturnFulfilment struct {
	Auth         domain.Auth
	FulfilmentID string
}

// CancelFulfilmentRenewal stops a subscription phone renewing (POST
// /v1/fulfilments/{id}/cancel-renewal).
type CancelFulfilmentRenewal struct {
	Auth         domain.Auth
	FulfilmentID string
}

// CancelFulfilmentHandler handles CancelFulfilment.
type CancelFulfilmentHandler struct{ *Provisioning }

// Handle cancels a live fulfilment: customer_cancel (notified),
// or cloud_undelivered (no event) for a cloud phone never delivered; its
// device leaves the organisation in the same unit. A signed-in admin only.
// Errors: permission_denied, not_found, wrong_state (cancelled already).
func (p CancelFulfilmentHandler) Handle(ctx context.Context, cmd CancelFulfilment) (projections.FulfilmentView, error) {
	if err := canChangeFulfilments(cmd.Auth); err != nil {
		return projections.FulfilmentView{}, err
	}
	by := domain.ActorOf(cmd.Auth)
	if _, err := p.endFulfilment(ctx, cmd.Auth, cmd.FulfilmentID, func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error) {
		return f.CustomerCancel(by, now)
	}); err != nil {
		return projections.FulfilmentView{}, err
	}
	return p.view(ctx, cmd.Auth, cmd.FulfilmentID)
}

// ReturnFulfilmentHandler handles ReturnFulfilment.
type ReturnFulfilmentHandler struct{ *Provisioning }

// Handle returns a provisioned fulfilment (customer_return,
// notified); its device leaves the organisation in the same unit. A
// signed-in admin only. Errors: permission_denied, not_found, wrong_state
// (never delivered, or cancelled).
func (p ReturnFulfilmentHandler) Handle(ctx context.Context, cmd ReturnFulfilment) (projections.FulfilmentView, error) {
	if err := canChangeFulfilments(cmd.Auth); err != nil {
		return projections.FulfilmentView{}, err
	}
	by := domain.ActorOf(cmd.Auth)
	if _, err := p.endFulfilment(ctx, cmd.Auth, cmd.FulfilmentID, func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error) {
		return f.CustomerReturn(by, now)
	}); err != nil {
		return projections.FulfilmentView{}, err
	}
	return p.view(ctx, cmd.Auth, cmd.FulfilmentID)
}

// CancelFulfilmentRenewalHandler handles CancelFulfilmentRenewal.
type CancelFulfilmentRenewalHandler struct{ *Provisioning }

// Handle records that a live subscription phone will not
// renew: it stays until the end of its paid period. Repeating it changes
// nothing. A signed-in admin only. Errors: permission_denied, not_found,
// wrong_state (not a subscription, or cancelled).
func (p CancelFulfilmentRenewalHandler) Handle(ctx context.Context, cmd CancelFulfilmentRenewal) (FulfilmentRenewal, error) {
	if err := canChangeFulfilments(cmd.Auth); err != nil {
		return FulfilmentRenewal{}, err
	}
	by, now := domain.ActorOf(cmd.Auth), p.now()
	_, c, err := p.fulfilments.Update(ctx, cmd.FulfilmentID, func(f *domain.Fulfilment) ([]domain.Event, error) {
		if err := cmd.Auth.Owned(f.OrgID, f.Exists(), domain.ErrFulfilmentNotFound); err != nil {
			return nil, err
		}
		return f.CancelRenewal(by, now)
	})
	if err != nil {
		return FulfilmentRenewal{}, err
	}
	if err := p.wait(ctx, projections.FulfilmentsName, c); err != nil {
		return FulfilmentRenewal{}, err
	}
	v, err := p.view(ctx, cmd.Auth, cmd.FulfilmentID)
	if err != nil {
		return FulfilmentRenewal{}, err
	}
	return renewalOf(v, now), nil
}

// RefundFulfilment is the deployment owner's refund of one phone (the
// operator command `phonefleet fulfilments refund ID`): a live fulfilment
// is cancelled owner_refund, which sends no event, and its device leaves
// the organisation. The money is refunded at the payment provider by the
// owner. Errors: not_found, wrong_state (cancelled already).
type RefundFulfilment struct {
	FulfilmentID string
}

// RefundFulfilmentHandler handles RefundFulfilment.
type RefundFulfilmentHandler struct{ *Provisioning }

// Handle answers RefundFulfilment with the fulfilment as its
// stream shows it afterwards (an operator command may run while no read
// model is being kept). The actor recorded is the one on the context's
// event metadata (the operator).
func (p RefundFulfilmentHandler) Handle(ctx context.Context, cmd RefundFulfilment) (domain.Fulfilment, error) {
	m, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		return domain.Fulfilment{}, err
	}
	by := domain.Actor{Kind: m.ActorKind, ID: m.ActorID}
	return p.endFulfilment(ctx, domain.Auth{}, cmd.FulfilmentID, func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error) {
		return f.OwnerRefund(by, now)
	})
}

// endFulfilment runs an ending decision on a fulfilment of a's
// organisation (any organisation for the zero Auth: an operator command or
// a sweep), retiring its device in the same unit, and waits until the read
// models show the end.
func (p *Provisioning) endFulfilment(ctx context.Context, a domain.Auth, id string,
	decide func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error)) (domain.Fulfilment, error) {
	now := p.now()
	f, c, err := p.fulfilments.UpdateWith(ctx, id, func(f *domain.Fulfilment, u *eventstore.Unit) ([]domain.Event, error) {
		owner := a.OrgID
		if owner == "" {
			owner = f.OrgID
		}
		if err := (domain.Auth{OrgID: owner}).Owned(f.OrgID, f.Exists(), domain.ErrFulfilmentNotFound); err != nil {
			return nil, err
		}
		evs, err := decide(f, now)
		if err != nil || len(evs) == 0 {
			return evs, err
		}
		end, _ := evs[0].(domain.FulfilmentCancelled)
		if err := p.retire(ctx, u, f.OrgID, f.DeviceID, end.Reason, now); err != nil {
			return nil, err
		}
		return evs, p.releaseUnits(ctx, u, f.OrgID, f.Choice.Slot(), []string{f.FulfilmentID}, end.Reason, now)
	})
	if err != nil {
		return f, err
	}
	// A read afterwards shows the fulfilment ended, and the device list no
	// longer shows its device.
	for _, name := range []string{projections.FulfilmentsName, projections.DevicesName} {
		if err := p.wait(ctx, name, c); err != nil {
			return f, err
		}
	}
	return f, nil
}

// SweepFulfilment is the fulfilment sweeps' step on one fulfilment at the
// capability's clock: a phone awaiting provisioning is provisioned when a
// unit of its slot is free for it (it is first in its slot's queue), else
// given up undelivered once UndeliveredAfter has passed since its payment
// (no event), else given a new estimate once the last one passed; a
// provisioned day pass, or a subscription whose renewal was cancelled,
// ends when its time is up. It is a system command (no caller).
type SweepFulfilment struct {
	FulfilmentID string
	// UndeliveredAfter is how long a paid phone may await provisioning;
	// zero means domain.DefaultUndeliveredAfter.
	UndeliveredAfter time.Duration
}

// What SweepFulfilment did.
const (
	SweptNothing     = ""
	SweptProvisioned = "provisioned"
	SweptEstimate    = "estimate_changed"
	SweptUndelivered = domain.EndUndelivered
	SweptEnded       = "ended"
)

// SweepFulfilmentHandler handles SweepFulfilment.
type SweepFulfilmentHandler struct{ *Provisioning }

// Handle answers what it did (one of the Swept values).
func (p SweepFulfilmentHandler) Handle(ctx context.Context, cmd SweepFulfilment) (string, error) {
	after := cmd.UndeliveredAfter
	if after <= 0 {
		after = domain.DefaultUndeliveredAfter
	}
	f, _, err := p.fulfilments.Load(ctx, cmd.FulfilmentID)
	if err != nil || !f.Exists() {
		return SweptNothing, err
	}
	now := p.now()
	switch f.State {
	case domain.FulfilmentAwaitingState:
		if did, err := p.provisionAwaiting(ctx, &f, now); err != nil || did != SweptNothing {
			return did, err
		}
		if !now.Before(f.At.Add(after)) {
			ended, err := p.endFulfilment(ctx, domain.Auth{}, cmd.FulfilmentID, func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error) {
				return f.GiveUp(after, now)
			})
			if err != nil || ended.CancelledReason != domain.EndUndelivered {
				return SweptNothing, err
			}
			return SweptUndelivered, nil
		}
		if !now.Before(f.EstimatedBy) {
			return p.sweepStep(ctx, cmd.FulfilmentID, SweptEstimate, func(f *domain.Fulfilment) ([]domain.Event, error) {
				return f.ExtendEstimate(now.Add(p.cfg.PromiseWithin), domain.EstimateMissed, now)
			})
		}
	case domain.FulfilmentProvisionedState:
		if end := f.EndsAtTime(); !end.IsZero() && !now.Before(end) {
			ended, err := p.endFulfilment(ctx, domain.Auth{}, cmd.FulfilmentID, func(f *domain.Fulfilment, now time.Time) ([]domain.Event, error) {
				return f.Expire(now)
			})
			if err != nil || ended.State != domain.FulfilmentCancelledState {
				return SweptNothing, err
			}
			return SweptEnded, nil
		}
	}
	return SweptNothing, nil
}

// sweepStep runs one decision on a fulfilment and waits for the read
// model; it answers did when the decision appended something.
func (p *Provisioning) sweepStep(ctx context.Context, id, did string, decide func(*domain.Fulfilment) ([]domain.Event, error)) (string, error) {
	_, c, err := p.fulfilments.Update(ctx, id, decide)
	if err != nil || len(c.Appends) == 0 {
		return SweptNothing, err
	}
	return did, p.wait(ctx, projections.FulfilmentsName, c)
}

// provisionAwaiting provisions an awaiting fulfilment when a unit of its
// slot is free for it: the slot's capacity exceeds the units held (its
// inventory stream) plus the fulfilments awaiting ahead of this one (first
// come, first served). The claim, the device's registration and
// fulfilment.provisioned are one unit (handOut). It answers
// SweptProvisioned, or SweptNothing while it waits on.
func (p *Provisioning) provisionAwaiting(ctx context.Context, f *domain.Fulfilment, now time.Time) (string, error) {
	if p.cfg.Devices == nil {
		return SweptNothing, nil
	}
	ahead, err := projections.AwaitingAhead(ctx, p.pool, f.Choice.Slot(), f.At, f.FulfilmentID)
	if err != nil {
		return SweptNothing, err
	}
	_, c, err := p.fulfilments.UpdateWith(ctx, f.FulfilmentID, func(f *domain.Fulfilment, u *eventstore.Unit) ([]domain.Event, error) {
		if f.State != domain.FulfilmentAwaitingState {
			return nil, nil
		}
		devices, err := p.handOut(ctx, u, f.OrgID, f.Choice, []string{f.FulfilmentID}, ahead, now)
		if err != nil || devices[f.FulfilmentID] == "" {
			return nil, err
		}
		return f.Provision(devices[f.FulfilmentID], now)
	})
	if err != nil || len(c.Appends) == 0 {
		return SweptNothing, err
	}
	return SweptProvisioned, p.wait(ctx, projections.FulfilmentsName, c)
}
