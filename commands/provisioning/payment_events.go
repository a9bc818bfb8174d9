package provisioning

import (
	"context"
	"errors"
	"fmt"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// The payment provider's webhook (POST /webhooks/stripe): each event the
// provider reports is verified, read, and applied to the organisation's
// account, its orders and their fulfilments exactly once.

// ReceiveProviderEvent is one delivery of the provider's webhook: the raw
// body and its Stripe-Signature header.
type ReceiveProviderEvent struct {
	Payload   []byte
	Signature string
}

// Outcomes of a provider event.
const (
	// ProviderEventApplied: its effects were recorded.
	ProviderEventApplied = "applied"
	// ProviderEventDuplicate: it was applied before; nothing changed.
	ProviderEventDuplicate = "duplicate"
	// ProviderEventIgnored: it is of a type (or about an object) this
	// service does not act on; it is marked applied all the same.
	ProviderEventIgnored = "ignored"
)

// ProviderEventReceipt is what a provider event came to.
type ProviderEventReceipt struct {
	EventID string
	Type    string
	// Outcome is ProviderEventApplied, ProviderEventDuplicate or
	// ProviderEventIgnored.
	Outcome string
	// OrderID is the order the event is about, when it names one of ours.
	OrderID string
}

// ReceiveProviderEventHandler handles ReceiveProviderEvent.
type ReceiveProviderEventHandler struct{ *Provisioning }

// Handle verifies a delivery with the webhook secret and
// applies its event (ApplyProviderEvent). Errors: invalid_signature (the
// signature, or its timestamp, does not verify), invalid_event (a
// correctly signed body that is not an event, or whose object is not what
// its type says), not_settled (the event cannot apply yet; the provider
// delivers it again), service_unavailable (no webhook secret configured).
func (p ReceiveProviderEventHandler) Handle(ctx context.Context, cmd ReceiveProviderEvent) (ProviderEventReceipt, error) {
	if p.cfg.WebhookSecret == "" {
		return ProviderEventReceipt{}, domain.Errorf(domain.CodeServiceUnavailable,
			"this deployment receives no payment provider events (no webhook secret is configured)")
	}
	ev, err := payments.VerifyWebhook(cmd.Payload, cmd.Signature, p.cfg.WebhookSecret, p.cfg.Now())
	switch {
	case errors.Is(err, payments.ErrInvalidSignature):
		return ProviderEventReceipt{}, domain.Errorf(domain.CodeInvalidSignature,
			"the Stripe-Signature header does not verify (wrong secret, altered body or a timestamp out of tolerance)").
			WithRetryable(false).Wrap(err)
	case errors.Is(err, payments.ErrInvalidEvent):
		return ProviderEventReceipt{}, errInvalidEvent(err)
	case err != nil:
		return ProviderEventReceipt{}, err
	}
	return p.ApplyProviderEvent(ctx, ev)
}

func errInvalidEvent(cause error) error {
	return domain.Errorf(domain.CodeInvalidEvent, "the event is signed but cannot be read").WithRetryable(false).Wrap(cause)
}

// What a provider event does to an order.
const (
	settleNothing = ""
	settlePaid    = "paid"
	settlePending = "pending"
	settleExpired = "expired"
	settleEnd     = "end"
	// settleRefundPart records a partial refund of an order's charge.
	settleRefundPart = "refund_part"
)

// settlement is a provider event read: the order it is about and what it
// does to it.
type settlement struct {
	orgID, orderID string
	do             string
	// paid is the order.paid of settlePaid; reason the end of settleEnd.
	paid   domain.OrderPaid
	reason string
	// refund is the record of settleRefundPart.
	refund domain.ChargeRefunded
	// period is the record of settlePeriod.
	period domain.FulfilmentPeriodRecorded
}

// ApplyProviderEvent applies a verified provider event once: the marker
// payment.provider_event_applied is appended to the event's own stream at
// NoStream in the same unit as its effects, so a redelivery (or a
// concurrent delivery) changes nothing. Types acted on:
//   - checkout.session.completed: paid (or no payment required, a
//     pay-as-you-go card saved) → order.paid and the order's fulfilments;
//     unpaid → order.payment_pending;
//   - checkout.session.async_payment_succeeded → order.paid and
//     fulfilments; checkout.session.async_payment_failed and
//     checkout.session.expired → checkout.expired;
//   - customer.subscription.deleted → order.ended subscription_ended and
//     every live fulfilment of the order cancelled (notified);
//   - charge.refunded (fully refunded) → order.ended refunded; partly
//     refunded → payment.charge_refunded on the charge's stream (the
//     order stands);
//     charge.dispute.created → order.ended disputed; each cancelling the
//     order's live fulfilments (notified).
//   - invoice.paid (the period of its subscription line) and
//     customer.subscription.updated (the subscription's current period) →
//     fulfilment.period_recorded on the order's live phones: their
//     renewal is the provider's (subscription_periods.go).
//
// Every other type, and an object that names no order of this service, is
// marked applied and ignored. An event that cannot apply yet answers
// not_settled (retryable): an order the account does not hold yet, a
// checkout still being opened, or an order ending before its payment was
// recorded.
func (p *Provisioning) ApplyProviderEvent(ctx context.Context, ev payments.Event) (ProviderEventReceipt, error) {
	ctx = eventstore.CausedBy(ctx, ev.ID)
	r := ProviderEventReceipt{EventID: ev.ID, Type: ev.Type}
	marker := domain.ProviderEventStream(ev.ID)
	done, err := p.streamExists(ctx, marker)
	if err != nil || done {
		r.Outcome = ProviderEventDuplicate
		return r, err
	}
	s, err := p.settlementOf(ctx, ev)
	if err != nil {
		return r, err
	}
	r.OrderID = s.orderID
	now := p.now()
	s.paid.PaidAt = now
	// The unit is decided again, under the one retry policy, when the
	// account, a fulfilment or a device moved on first; the marker taken
	// by another delivery of the event makes it a duplicate instead.
	errDuplicate := errors.New("the provider event was applied meanwhile")
	c, err := eventstore.Retry(ctx, func(int) (eventstore.Committed, error) {
		u, err := p.settleUnit(ctx, ev, s, now)
		if err != nil {
			return eventstore.Committed{}, err
		}
		c, err := p.store.Commit(ctx, u)
		var conflict *eventstore.ConflictError
		if errors.As(err, &conflict) && conflict.StreamID == marker {
			return c, errDuplicate
		}
		return c, err
	})
	if errors.Is(err, errDuplicate) {
		r.Outcome = ProviderEventDuplicate
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.Outcome = ProviderEventApplied
	if s.do == settleNothing {
		r.Outcome = ProviderEventIgnored
		return r, nil
	}
	// A read afterwards shows the fulfilments, and the devices that joined
	// or left with them.
	for _, name := range []string{projections.FulfilmentsName, projections.DevicesName} {
		if err := p.wait(ctx, name, c); err != nil {
			return r, err
		}
	}
	return r, nil
}

// streamExists reports whether a marker stream has its event.
func (p *Provisioning) streamExists(ctx context.Context, stream string) (bool, error) {
	evs, err := p.store.Load(ctx, stream, 1)
	return len(evs) > 0, err
}

// ourOrder reads the organisation and order a provider object's metadata
// names (the checkout writes them on the session, the subscription and
// the payment intent).
func ourOrder(meta map[string]string) (orgID, orderID string) {
	return meta[payments.MetaOrgID], meta[payments.MetaOrderID]
}

// settlementOf reads what a provider event does. A decodable event about
// something that is not one of this service's orders settles nothing.
func (p *Provisioning) settlementOf(ctx context.Context, ev payments.Event) (settlement, error) {
	var s settlement
	switch ev.Type {
	case payments.EventCheckoutCompleted, payments.EventCheckoutAsyncPaymentSucceeded,
		payments.EventCheckoutAsyncPaymentFailed, payments.EventCheckoutExpired:
		cs, err := ev.CheckoutSession()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		s.orgID, s.orderID = ourOrder(cs.Metadata)
		if s.orderID == "" {
			s.orderID = cs.ClientReferenceID
		}
		switch {
		case ev.Type == payments.EventCheckoutAsyncPaymentFailed || ev.Type == payments.EventCheckoutExpired:
			s.do = settleExpired
		case ev.Type == payments.EventCheckoutAsyncPaymentSucceeded:
			s.do = settlePaid
		case cs.PaymentStatus == "paid" || cs.PaymentStatus == "no_payment_required":
			s.do = settlePaid
		case cs.PaymentStatus == "unpaid":
			s.do = settlePending
		}
		s.paid = domain.OrderPaid{OrderID: s.orderID, ProviderEventID: ev.ID, CustomerID: cs.CustomerID,
			SubscriptionID: cs.SubscriptionID, PaymentIntentID: cs.PaymentIntentID}
	case payments.EventSubscriptionDeleted:
		sub, err := ev.Subscription()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		s.orgID, s.orderID = ourOrder(sub.Metadata)
		s.do, s.reason = settleEnd, domain.EndSubscriptionEnded
	case payments.EventChargeRefunded:
		ch, err := ev.Charge()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		s.orgID, s.orderID = ourOrder(ch.Metadata)
		if s.orderID == "" {
			if s.orgID, s.orderID, err = p.orderOfPayment(ctx, ch.PaymentIntentID, ev.Created,
				func() (bool, error) { return ch.InvoiceID == "", nil }); err != nil {
				return s, err
			}
		}
		if s.orderID == "" && ch.InvoiceID != "" {
			if s.orgID, s.orderID, err = p.orderOfInvoiceCharge(ctx, ch.ID, ""); err != nil {
				return s, err
			}
		}
		s.do, s.reason = settleEnd, domain.EndRefunded
		if !ch.Refunded {
			// A partial refund leaves the order standing (the owner
			// refunds single phones with `phonefleet fulfilments refund`),
			// but is recorded on the charge's stream.
			s.do, s.reason = settleRefundPart, ""
			s.refund = domain.ChargeRefunded{OrgID: s.orgID, OrderID: s.orderID, ChargeID: ch.ID, PaymentIntentID: ch.PaymentIntentID,
				InvoiceID: ch.InvoiceID, Amount: ch.Amount, AmountRefunded: ch.AmountRefunded, Currency: ch.Currency,
				ProviderEventID: ev.ID}
		}
	case payments.EventDisputeCreated:
		d, err := ev.Dispute()
		if err != nil {
			return s, errInvalidEvent(err)
		}
		s.orgID, s.orderID = ourOrder(d.Metadata)
		if s.orderID == "" {
			sub, asked := "", false
			if s.orgID, s.orderID, err = p.orderOfPayment(ctx, d.PaymentIntentID, ev.Created, func() (bool, error) {
				if p.cfg.Payments == nil || d.ChargeID == "" {
					return false, nil
				}
				var err error
				sub, err = p.cfg.Payments.SubscriptionOfCharge(ctx, d.ChargeID)
				asked = true
				return sub == "", err
			}); err != nil {
				return s, err
			}
			if s.orderID == "" && (!asked || sub != "") {
				if s.orgID, s.orderID, err = p.orderOfInvoiceCharge(ctx, d.ChargeID, sub); err != nil {
					return s, err
				}
			}
		}
		s.do, s.reason = settleEnd, domain.EndDisputed
	case payments.EventSubscriptionUpdated, payments.EventInvoicePaid:
		return periodSettlement(ev)
	}
	if s.orgID == "" || s.orderID == "" {
		return settlement{}, nil
	}
	return s, nil
}

// unrecordedPaymentWait is how long a refund or a dispute of a payment
// that no order records yet answers not_settled rather than being
// ignored: the provider does not order its deliveries, so the
// checkout.session.completed that records the payment may come after it
// (a refund made in the dashboard at once, say). A payment still unknown
// a day later is not one of this service's checkouts.
const unrecordedPaymentWait = 24 * time.Hour

// orderOfPayment finds the order a refunded or disputed payment intent
// paid (its charge carries no metadata of ours). None found: when the
// event was created less than unrecordedPaymentWait ago and checkoutCharge says the charge could be
// a checkout's own payment (not an invoice's, which carries none of our
// orders' payment intents), the event is not settled yet (retryable);
// otherwise it is about nothing of ours ("" ids).
func (p *Provisioning) orderOfPayment(ctx context.Context, paymentIntentID string, at time.Time,
	checkoutCharge func() (bool, error)) (orgID, orderID string, err error) {
	orgID, orderID, ok, err := projections.OrderOfPayment(ctx, p.pool, paymentIntentID)
	if err != nil || ok || paymentIntentID == "" || p.now().Sub(at) >= unrecordedPaymentWait {
		return orgID, orderID, err
	}
	if could, err := checkoutCharge(); err != nil || !could {
		return "", "", err
	}
	return "", "", domain.Errorf(domain.CodeNotSettled,
		"no order records payment %s yet; its checkout's payment may still be on its way", paymentIntentID).WithRetryable(true)
}

// orderOfInvoiceCharge finds the order whose subscription an invoice's
// charge paid (the first invoice or a renewal: the charge and its payment
// intent carry none of our metadata, and no order records that payment
// intent): charge → invoice → subscription (SubscriptionOfCharge, unless
// sub is already known) → the order whose phones that subscription pays.
// None ("" ids): an invoice of no subscription of ours, or no provider
// configured to ask.
func (p *Provisioning) orderOfInvoiceCharge(ctx context.Context, chargeID, sub string) (orgID, orderID string, err error) {
	if sub == "" {
		if p.cfg.Payments == nil || chargeID == "" {
			return "", "", nil
		}
		if sub, err = p.cfg.Payments.SubscriptionOfCharge(ctx, chargeID); err != nil || sub == "" {
			return "", "", err
		}
	}
	orgID, orderID, _, err = projections.OrderOfSubscription(ctx, p.pool, sub)
	return orgID, orderID, err
}

// settleUnit builds the unit of one provider event: its marker, and the
// account's and fulfilments' events it calls for, each at the version it
// was decided on.
func (p *Provisioning) settleUnit(ctx context.Context, ev payments.Event, s settlement, now time.Time) (*eventstore.Unit, error) {
	u := &eventstore.Unit{}
	mark, err := eventstore.Encode(domain.Events, s.orgID, domain.Event(domain.ProviderEventApplied{
		ProviderEventID: ev.ID, Type: ev.Type, OrgID: s.orgID, At: now}))
	if err != nil {
		return nil, err
	}
	u.Append(domain.ProviderEventStream(ev.ID), eventstore.NoStream, mark...)
	if s.do == settleNothing {
		return u, nil
	}
	if s.do == settleRefundPart {
		s.refund.At = now
		news, err := eventstore.Encode(domain.Events, s.orgID, domain.Event(s.refund))
		if err != nil {
			return nil, err
		}
		u.Append(domain.ChargeRefundStream(s.refund.ChargeID), eventstore.AnyVersion, news...)
		return u, nil
	}
	if s.do == settlePeriod {
		return u, p.recordPeriods(ctx, u, s, now)
	}
	acc, version, err := p.accounts.Load(ctx, s.orgID)
	if err != nil {
		return nil, err
	}
	var evs []domain.Event
	switch s.do {
	case settlePaid:
		evs, err = acc.SettlePaid(s.paid)
	case settlePending:
		evs, err = acc.SettlePending(s.orderID, ev.ID, now)
	case settleExpired:
		evs, err = acc.SettleExpired(s.orderID, now)
	case settleEnd:
		evs, err = acc.EndOrder(s.orderID, s.reason, ev.ID, now)
	}
	if err != nil || len(evs) == 0 {
		return u, err
	}
	news, err := eventstore.Encode(domain.Events, s.orgID, evs...)
	if err != nil {
		return nil, err
	}
	u.Append(domain.AccountStream(s.orgID), version, news...)
	o, _ := acc.Order(s.orderID)
	switch s.do {
	case settlePaid:
		return u, p.createFulfilments(ctx, u, o, s.paid, now)
	case settleEnd:
		return u, p.endFulfilments(ctx, u, o, s.reason, ev.ID, now)
	}
	return u, nil
}

// createFulfilments adds a paid order's fulfilments to u: one per id the
// checkout committed to, each provisioned with a new device when a unit of
// its slot is claimed for it in u (handOut), else awaiting provisioning
// promised within PromiseWithin. A pay-as-you-go order has none (it grants
// pool access).
func (p *Provisioning) createFulfilments(ctx context.Context, u *eventstore.Unit, o *domain.Order, paid domain.OrderPaid,
	now time.Time) error {
	if o.Choice.Billing == domain.BillingPayg {
		return nil
	}
	choice := o.Choice
	choice.Quantity = 1 // each fulfilment is one phone
	reserved, err := projections.AwaitingUnits(ctx, p.pool, choice.Slot())
	if err != nil {
		return err
	}
	devices, err := p.handOut(ctx, u, o.OrgID, choice, o.FulfilmentIDs, reserved, now)
	if err != nil {
		return err
	}
	for _, id := range o.FulfilmentIDs {
		f, version, err := p.fulfilments.Load(ctx, id)
		if err != nil {
			return err
		}
		evs, err := f.Create(domain.FulfilmentCreated{FulfilmentID: id, OrgID: o.OrgID, OrderID: o.OrderID, Choice: choice,
			Currency: o.Currency, UnitAmount: o.UnitAmount, SubscriptionID: paid.SubscriptionID,
			PaymentIntentID: paid.PaymentIntentID, At: now}, devices[id], now.Add(p.cfg.PromiseWithin))
		if err != nil {
			return err
		}
		if err := p.appendFulfilment(u, o.OrgID, id, version, evs); err != nil {
			return err
		}
	}
	return nil
}

// endFulfilments adds the end of every live fulfilment of an order the
// provider ended to u, each retiring its device and releasing its unit in
// the same unit.
func (p *Provisioning) endFulfilments(ctx context.Context, u *eventstore.Unit, o *domain.Order, reason, providerEventID string,
	now time.Time) error {
	for _, id := range o.FulfilmentIDs {
		f, version, err := p.fulfilments.Load(ctx, id)
		if err != nil {
			return err
		}
		evs, err := f.End(reason, nil, providerEventID, now)
		if err != nil || len(evs) == 0 {
			if err != nil {
				return err
			}
			continue
		}
		if err := p.retire(ctx, u, f.OrgID, f.DeviceID, reason, now); err != nil {
			return err
		}
		if err := p.appendFulfilment(u, f.OrgID, id, version, evs); err != nil {
			return err
		}
	}
	return p.releaseUnits(ctx, u, o.OrgID, o.Choice.Slot(), o.FulfilmentIDs, reason, now)
}

// releaseUnits adds to u the release of the units of slot that the
// fulfilments ids (ending in u) hold, at the version of the slot's
// inventory stream decided on; one decision for the slot, however many
// phones of an order end together.
func (p *Provisioning) releaseUnits(ctx context.Context, u *eventstore.Unit, orgID, slot string, ids []string, reason string,
	now time.Time) error {
	_, err := p.inventory.DecideInto(ctx, u, slot, func(i *domain.Inventory) ([]domain.Event, error) {
		return i.Release(slot, ids, orgID, reason, now), nil
	})
	return err
}

// appendFulfilment adds a fulfilment's events to u at version.
func (p *Provisioning) appendFulfilment(u *eventstore.Unit, orgID, id string, version int64, evs []domain.Event) error {
	if len(evs) == 0 {
		return nil
	}
	news, err := eventstore.Encode(domain.Events, orgID, evs...)
	if err != nil {
		return err
	}
	u.Append(domain.FulfilmentStream(id), version, news...)
	return nil
}

// retire adds the retirement of a cancelled fulfilment's device to u, and
// the end of every run on it (retireDevice).
func (p *Provisioning) retire(ctx context.Context, u *eventstore.Unit, orgID, deviceID, reason string, now time.Time) error {
	if p.cfg.Devices == nil || deviceID == "" {
		return nil
	}
	return p.retireDevice(ctx, u, deviceID, reason, now, func(d *domain.Device) bool { return d.OrgID == orgID })
}

// retireDevice adds to u the retirement of deviceID (after the end of its
// lease) when due says so, and the end of every run on it, failed with
// reason device_lost and a detail naming reason: a run is never left
// going on a device that left its organisation.
func (p *Provisioning) retireDevice(ctx context.Context, u *eventstore.Unit, deviceID, reason string, now time.Time,
	due func(d *domain.Device) bool) error {
	var holder domain.Actor
	retired := false
	err := p.cfg.Devices.DecideInto(ctx, u, deviceID, func(d *domain.Device) ([]domain.Event, error) {
		if !due(d) {
			return nil, nil
		}
		if d.Lease != nil {
			holder = d.Lease.Holder
		}
		evs := d.Retire(reason, now)
		retired = len(evs) > 0
		return evs, nil
	})
	if err != nil || !retired || p.cfg.Runs == nil {
		return err
	}
	return p.cfg.Runs.EndRunsOnDeviceInto(ctx, u, deviceID, holder, "the device was retired from the organisation ("+reason+")", now)
}

// handOut claims units of c's slot for the fulfilments ids of orgID, in
// order, while the slot has units free beyond reserved (the phones ahead
// of them in its queue), and adds to u, for each that got one, the
// registration of its device: one unit of work with the claims (on the
// slot's inventory stream, at the version decided on) and with whatever
// the caller records (the payment, the fulfilment provisioned). So two
// instances cannot hand out one unit twice (the loser's unit conflicts and
// decides again), and no device is ever registered without the fulfilment
// that holds it, whatever stops the work. It returns the device of each
// fulfilment that got a unit. A fulfilment that a version before issue 26
// registered a device for (its marker stream) keeps that device.
func (p *Provisioning) handOut(ctx context.Context, u *eventstore.Unit, orgID string, c domain.PurchaseChoice, ids []string,
	reserved int, now time.Time) (map[string]string, error) {
	out := map[string]string{}
	capacity, _, listed := p.cfg.Catalog.Capacity(c.Sku, c.Model, c.Region)
	if p.cfg.Devices == nil || !listed || len(ids) == 0 {
		return out, nil
	}
	claims := make([]domain.InventoryClaim, len(ids))
	registered := make([]bool, len(ids))
	for n, id := range ids {
		device, ok, err := p.markedDevice(ctx, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			device = domain.NewID(domain.PrefixDevice)
		}
		claims[n], registered[n] = domain.InventoryClaim{FulfilmentID: id, OrgID: orgID, DeviceID: device}, ok
	}
	slot := c.Slot()
	var got []bool
	_, err := p.inventory.DecideInto(ctx, u, slot, func(i *domain.Inventory) ([]domain.Event, error) {
		var held []string
		if !i.Opened {
			var err error
			if held, err = p.heldBeforeClaims(ctx, slot); err != nil {
				return nil, err
			}
		}
		evs, g := i.Claim(slot, capacity, reserved, held, claims, now)
		got = g
		return evs, nil
	})
	if err != nil {
		return nil, err
	}
	prefix := c.Sku
	if c.Model != "" {
		prefix += "-" + c.Model
	}
	for n, claim := range claims {
		if !got[n] {
			continue
		}
		if !registered[n] {
			reg := domain.DeviceRegistered{DeviceID: claim.DeviceID, OrgID: orgID, Name: prefix + "-1", Backend: domain.BackendSim,
				Model: p.cfg.Catalog.SimModel(c.Sku), RegisteredAt: now}
			if _, err := p.cfg.Devices.RegisterInto(u, reg, nil); err != nil {
				return nil, err
			}
		}
		out[claim.FulfilmentID] = claim.DeviceID
	}
	return out, nil
}

// heldBeforeClaims lists the fulfilments of slot that hold a unit without
// a claim on its inventory stream (provisioned before the stream existed),
// from the fulfilments read model once it has applied everything
// committed: read once, when the slot's stream is opened.
func (p *Provisioning) heldBeforeClaims(ctx context.Context, slot string) ([]string, error) {
	if err := cqrs.AwaitAll(ctx, p.store, p.cfg.ReadModels, projections.FulfilmentsName); err != nil {
		return nil, err
	}
	return projections.ProvisionedIn(ctx, p.pool, slot)
}

// markedDevice returns the device registered for a fulfilment, if any.
func (p *Provisioning) markedDevice(ctx context.Context, fulfilmentID string) (string, bool, error) {
	evs, err := p.store.Load(ctx, domain.FulfilmentDeviceStream(fulfilmentID), 1)
	if err != nil || len(evs) == 0 {
		return "", false, err
	}
	ev, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
	if err != nil {
		return "", false, err
	}
	seeded, ok := ev.(domain.FleetSeeded)
	if !ok || len(seeded.DeviceIDs) != 1 {
		return "", false, fmt.Errorf("%s holds %s, not one device", domain.FulfilmentDeviceStream(fulfilmentID), evs[0].Type)
	}
	return seeded.DeviceIDs[0], true, nil
}
