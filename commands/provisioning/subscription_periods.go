package provisioning

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
)

// A subscription phone renews when the payment provider's period ends, not
// on a date counted here: the provider's webhooks report each period (the
// subscription line of a paid invoice, the subscription's current period
// when it changes), and each report is recorded on the phones of the
// subscription's order (fulfilment.period_recorded). A phone no report
// reached (paid before the periods were read) falls back to the monthly
// anniversary of its payment (domain.Fulfilment.PeriodEnd).

// settlePeriod records the provider's period on an order's phones.
const settlePeriod = "period"

// periodSettlement reads the period an invoice.paid or a
// customer.subscription.updated reports for one of this service's
// subscriptions. An event of no subscription of ours, or that names no
// period, settles nothing.
func periodSettlement(ev payments.Event) (settlement, error) {
	var s settlement
	switch ev.Type {
	case payments.EventSubscriptionUpdated:
		sub, err := ev.Subscription()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		s.orgID, s.orderID = ourOrder(sub.Metadata)
		s.period = domain.FulfilmentPeriodRecorded{SubscriptionID: sub.ID, PeriodStart: sub.CurrentPeriodStart,
			PeriodEnd: sub.CurrentPeriodEnd}
	case payments.EventInvoicePaid:
		inv, err := ev.Invoice()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		line, ok := subscriptionLine(inv)
		if !ok {
			return settlement{}, nil
		}
		s.orgID, s.orderID = ourOrder(inv.SubscriptionMetadata)
		if s.orderID == "" {
			s.orgID, s.orderID = ourOrder(line.Metadata)
		}
		s.period = domain.FulfilmentPeriodRecorded{SubscriptionID: inv.SubscriptionID, PeriodStart: line.PeriodStart,
			PeriodEnd: line.PeriodEnd}
	}
	if s.orgID == "" || s.orderID == "" || s.period.SubscriptionID == "" || s.period.PeriodEnd.IsZero() {
		return settlement{}, nil
	}
	s.period.AsOf, s.period.Source, s.period.ProviderEventID = ev.Created, ev.Type, ev.ID
	s.do = settlePeriod
	return s, nil
}

// subscriptionLine is the line of a subscription's invoice that bills its
// period: of the lines of the invoice's subscription, the one whose period
// ends last (a proration line of a quantity change ends with the period
// too, and the period's own line is never shorter). The invoice-level
// period is not it: Stripe's covers what was billed before.
func subscriptionLine(inv payments.Invoice) (payments.InvoiceLine, bool) {
	var found payments.InvoiceLine
	ok := false
	for _, l := range inv.Lines {
		if inv.SubscriptionID == "" || l.SubscriptionID != inv.SubscriptionID || l.PeriodEnd.IsZero() {
			continue
		}
		if !ok || l.PeriodEnd.After(found.PeriodEnd) {
			found, ok = l, true
		}
	}
	return found, ok
}

// recordPeriods adds to u the provider's period on each live phone of the
// order s names, when it is the order's subscription and a newer report
// than the one recorded. An order whose payment is not recorded yet (its
// phones do not exist) is not_settled while the report is younger than
// unrecordedPaymentWait (the provider does not order its deliveries: the
// first invoice's invoice.paid often comes before the checkout's event);
// an older one, or an ended order, records nothing.
func (p *Provisioning) recordPeriods(ctx context.Context, u *eventstore.Unit, s settlement, now time.Time) error {
	acc, _, err := p.accounts.Load(ctx, s.orgID)
	if err != nil {
		return err
	}
	o, ok := acc.Order(s.orderID)
	switch {
	case ok && o.State == domain.OrderPaidState:
	case (!ok || o.State != domain.OrderEndedState) && now.Sub(s.period.AsOf) < unrecordedPaymentWait:
		return domain.Errorf(domain.CodeNotSettled, "order %s has no recorded payment yet; its subscription's period waits for it",
			s.orderID).WithRetryable(true)
	default:
		return nil
	}
	if o.SubscriptionID != "" && o.SubscriptionID != s.period.SubscriptionID {
		return nil
	}
	period := s.period
	period.At = now
	for _, id := range o.FulfilmentIDs {
		f, version, err := p.fulfilments.Load(ctx, id)
		if err != nil {
			return err
		}
		if err := p.appendFulfilment(u, s.orgID, id, version, f.RecordPeriod(period)); err != nil {
			return err
		}
	}
	return nil
}
