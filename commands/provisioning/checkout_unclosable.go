package provisioning

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// unclosable settles an earlier attempt whose page the provider would not
// expire (payments.ErrNotExpirable: complete, already expired, or gone)
// before a new attempt of the organisation opens its page. The session is
// read, and the attempt is recorded as the provider's own event would
// record it, so the new attempt is decided as if that event had arrived
// first:
//
//   - expired: recorded expired; the new page may open (closed true);
//   - complete and paid (or needing no payment): recorded paid with its
//     fulfilments (settlePaidSession); the new page may open unless the
//     organisation is now provisioned (409 wrong_state);
//   - complete with its payment being confirmed: recorded pending; 409
//     payment_in_progress (retryable);
//   - still open, or unreadable: 409 checkout_in_progress, not retryable,
//     as before (it may yet be paid).
//
// refusal, when not nil, is the new attempt's answer; err is the store
// failing.
func (p *Provisioning) unclosable(ctx context.Context, orgID string, other domain.Order, sessionID string, now time.Time) (refusal *domain.Error, err error) {
	inProgress := func(cause error) *domain.Error {
		return domain.Errorf(domain.CodeCheckoutInProgress,
			"another checkout of this organisation is open and can no longer be closed; it may have been paid").WithRetryable(false).Wrap(cause)
	}
	cs, readErr := p.cfg.Payments.CheckoutSession(ctx, sessionID)
	if readErr != nil {
		return inProgress(readErr), nil
	}
	switch {
	case cs.Status == "expired":
		_, _, err := p.accounts.Update(ctx, orgID, func(acct *domain.Account) ([]domain.Event, error) {
			return acct.CloseAttempt(other.OrderID, nil, domain.CheckoutTimedOut, now), nil
		})
		return nil, err
	case cs.Status == "complete" && (cs.PaymentStatus == "paid" || cs.PaymentStatus == "no_payment_required"):
		if err := p.settlePaidSession(ctx, orgID, other.OrderID, cs, now); err != nil {
			return nil, err
		}
		acct, _, err := p.accounts.Load(ctx, orgID)
		if err != nil {
			return nil, err
		}
		states, err := p.subscriptionPhones(ctx, &acct)
		if err != nil {
			return nil, err
		}
		if acct.Provisioned(states) {
			return domain.ErrAlreadyProvisioned(), nil
		}
		return nil, nil
	case cs.Status == "complete":
		_, _, err := p.accounts.Update(ctx, orgID, func(acct *domain.Account) ([]domain.Event, error) {
			return acct.SettlePending(other.OrderID, "", now)
		})
		if err != nil {
			return nil, err
		}
		return domain.Errorf(domain.CodePaymentInProgress, "the previous checkout was paid and the payment is being confirmed").WithRetryable(true), nil
	}
	return inProgress(nil), nil
}

// settlePaidSession records orderID paid from its session as read, with
// its fulfilments, in one unit, as the provider's checkout.session.completed
// does (settleUnit) but without that event's marker: the event, when it
// arrives, finds the order paid and changes nothing. The payment carries
// no provider event id (it was read, not reported).
func (p *Provisioning) settlePaidSession(ctx context.Context, orgID, orderID string, cs payments.CheckoutSession, now time.Time) error {
	wrote := false
	c, err := eventstore.Retry(ctx, func(int) (eventstore.Committed, error) {
		wrote = false
		acct, version, err := p.accounts.Load(ctx, orgID)
		if err != nil {
			return eventstore.Committed{}, err
		}
		paid := domain.OrderPaid{OrderID: orderID, CustomerID: cs.CustomerID, SubscriptionID: cs.SubscriptionID,
			PaymentIntentID: cs.PaymentIntentID, PaidAt: now}
		evs, err := acct.SettlePaid(paid)
		if err != nil || len(evs) == 0 {
			return eventstore.Committed{}, err
		}
		news, err := eventstore.Encode(domain.Events, orgID, evs...)
		if err != nil {
			return eventstore.Committed{}, err
		}
		u := &eventstore.Unit{}
		u.Append(domain.AccountStream(orgID), version, news...)
		o, _ := acct.Order(orderID)
		if err := p.createFulfilments(ctx, u, o, paid, now); err != nil {
			return eventstore.Committed{}, err
		}
		wrote = true
		return p.store.Commit(ctx, u)
	})
	if err != nil || !wrote {
		return err
	}
	for _, name := range []string{projections.FulfilmentsName, projections.DevicesName} {
		if err := p.wait(ctx, name, c); err != nil {
			return err
		}
	}
	return nil
}
