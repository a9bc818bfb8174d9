package provisioning

import (
	"context"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// The operator's tools for payment follow-ups the provider refused or
// that gave up (`phonefleet payments followups`, `… retry ID`, `… settle
// ID --reason TEXT`). They are operator commands, like RefundFulfilment:
// the actor recorded is the one on the context's event metadata.

// ListStuckFollowups asks for the follow-ups that wait for the operator:
// refused or given up, and neither retried nor settled since.
type ListStuckFollowups struct{}

// ListStuckFollowupsHandler handles ListStuckFollowups.
type ListStuckFollowupsHandler struct{ *Provisioning }

// Handle answers the follow-ups, oldest change first, as the
// payment_followups read model shows them (the CLI brings it up to date
// first). Errors: the database failed.
func (p ListStuckFollowupsHandler) Handle(ctx context.Context, _ ListStuckFollowups) ([]projections.FollowupView, error) {
	return projections.StuckFollowups(ctx, p.pool)
}

// RetryPaymentFollowup makes a refused or given-up follow-up due again.
type RetryPaymentFollowup struct {
	FollowupID string
}

// RetryPaymentFollowupHandler handles RetryPaymentFollowup.
type RetryPaymentFollowupHandler struct{ *Provisioning }

// Handle records payment.followup_retried. Errors: not_found, wrong_state
// (see domain.FollowupHistory.Retry).
func (p RetryPaymentFollowupHandler) Handle(ctx context.Context, cmd RetryPaymentFollowup) (domain.PaymentFollowupRetried, error) {
	evs, err := p.decideFollowup(ctx, cmd.FollowupID, func(h *domain.FollowupHistory, by domain.Actor, now time.Time) ([]domain.Event, error) {
		return h.Retry(by, now)
	})
	if err != nil {
		return domain.PaymentFollowupRetried{}, err
	}
	return evs[0].(domain.PaymentFollowupRetried), nil
}

// SettlePaymentFollowup closes a refused or given-up follow-up by hand.
type SettlePaymentFollowup struct {
	FollowupID string
	Reason     string
}

// SettlePaymentFollowupHandler handles SettlePaymentFollowup.
type SettlePaymentFollowupHandler struct{ *Provisioning }

// Handle records payment.followup_settled. Errors: invalid_argument (no
// reason), not_found, wrong_state (see domain.FollowupHistory.Settle).
func (p SettlePaymentFollowupHandler) Handle(ctx context.Context, cmd SettlePaymentFollowup) (domain.PaymentFollowupSettled, error) {
	evs, err := p.decideFollowup(ctx, cmd.FollowupID, func(h *domain.FollowupHistory, by domain.Actor, now time.Time) ([]domain.Event, error) {
		return h.Settle(cmd.Reason, by, now)
	})
	if err != nil {
		return domain.PaymentFollowupSettled{}, err
	}
	return evs[0].(domain.PaymentFollowupSettled), nil
}

// decideFollowup folds the follow-up's attempts and the operator's
// decisions, decides, and appends the decision to the operator's stream
// while the attempts' stream is still where it was read (an attempt
// recorded meanwhile makes the decision again on it).
func (p *Provisioning) decideFollowup(ctx context.Context, id string,
	decide func(h *domain.FollowupHistory, by domain.Actor, now time.Time) ([]domain.Event, error)) ([]domain.Event, error) {
	m, err := eventstore.MetadataFrom(ctx)
	if err != nil {
		return nil, err
	}
	by := domain.Actor{Kind: m.ActorKind, ID: m.ActorID}
	return eventstore.Retry(ctx, func(int) ([]domain.Event, error) {
		h := domain.FollowupHistory{FollowupID: id}
		attempts, err := p.store.Load(ctx, domain.PaymentFollowupStream(id), 1)
		if err != nil {
			return nil, err
		}
		operator, err := p.store.Load(ctx, domain.PaymentFollowupOperatorStream(id), 1)
		if err != nil {
			return nil, err
		}
		for _, e := range append(attempts, operator...) {
			ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.StreamID, err)
			}
			h.OrgID = e.OrgID
			h.Apply(ev)
		}
		evs, err := decide(&h, by, p.now())
		if err != nil {
			return nil, err
		}
		news, err := eventstore.Encode(domain.Events, h.OrgID, evs...)
		if err != nil {
			return nil, err
		}
		_, err = p.store.Commit(ctx, (&eventstore.Unit{}).
			Expect(domain.PaymentFollowupStream(id), int64(len(attempts))).
			Append(domain.PaymentFollowupOperatorStream(id), int64(len(operator)), news...))
		return evs, err
	})
}
