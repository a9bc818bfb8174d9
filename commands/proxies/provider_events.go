package proxies

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
)

// ReceiveProviderEvent is one delivery of the payment provider's webhook
// (POST /webhooks/stripe): the raw body and its Stripe-Signature.
type ReceiveProviderEvent struct {
	Payload   []byte
	Signature string
}

// ProviderEventOutcome is what a delivery came to. Ours is false for an
// event about no proxy order (the webhook route hands it to provisioning);
// nothing was verified or recorded then.
type ProviderEventOutcome struct {
	Ours    bool
	EventID string
	Type    string
	// Outcome is applied, duplicate or ignored (as provisioning's).
	Outcome string
	OrderID string
}

// Outcomes.
const (
	OutcomeApplied   = "applied"
	OutcomeDuplicate = "duplicate"
	OutcomeIgnored   = "ignored"
)

// ReceiveProviderEventHandler handles ReceiveProviderEvent.
type ReceiveProviderEventHandler struct{ *Proxies }

// IsProxyEvent reads, without verifying it, whether a webhook body is
// about a proxy order (its object's metadata kind is proxy_order, as the
// order's payment page, subscription and payment intent carry).
func IsProxyEvent(payload []byte) bool {
	var body struct {
		Data struct {
			Object struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"object"`
		} `json:"data"`
	}
	return json.Unmarshal(payload, &body) == nil && body.Data.Object.Metadata[MetaKind] == MetaKindProxy
}

// isChargeEvent reads, without verifying it, whether a webhook body is a
// refund or a dispute of a charge: a subscription's charges carry none of
// the order's metadata, so whether one is about a proxy order is found
// through the charge's invoice's subscription (ourCharge).
func isChargeEvent(payload []byte) bool {
	var body struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(payload, &body) != nil {
		return false
	}
	switch body.Type {
	case payments.EventChargeRefunded, payments.EventDisputeCreated, payments.EventDisputeClosed:
		return true
	}
	return false
}

// Handle verifies a delivery about a proxy order and applies it once:
//   - checkout.session.completed paid, checkout.session.async_payment_succeeded:
//     proxy.order_paid and proxy.issued (the supplier issues the proxy; no
//     proxy exists before the payment is verified);
//   - checkout.session.expired, checkout.session.async_payment_failed:
//     proxy.order_failed (expired);
//   - customer.subscription.deleted: proxy.order_ended and the proxy
//     revoked, its devices taken off it (unassign operations, by the
//     system);
//   - charge.refunded: proxy.order_refunded; fully refunded, also
//     proxy.order_ended refunded and the proxy revoked as above (a partial
//     refund leaves the order standing);
//   - charge.dispute.created: proxy.order_disputed and proxy.order_ended
//     disputed, the proxy revoked; charge.dispute.closed:
//     proxy.order_disputed (won or lost) only.
//
// A refund or a dispute is about a proxy order when its object says so
// (metadata kind proxy_order) or when the charge's invoice's subscription
// is an order's (read from the provider: ourCharge); otherwise it is not
// ours and nothing is recorded (provisioning is asked). Anything else is
// marked applied and ignored. Errors: invalid_signature, invalid_event,
// not_settled (an order this service has not recorded yet; the provider
// delivers it again), service_unavailable (no webhook secret; the
// supplier, the provider or the store down).
func (h ReceiveProviderEventHandler) Handle(ctx context.Context, cmd ReceiveProviderEvent) (ProviderEventOutcome, error) {
	tagged := IsProxyEvent(cmd.Payload)
	if !tagged && !isChargeEvent(cmd.Payload) {
		return ProviderEventOutcome{}, nil
	}
	if h.cfg.WebhookSecret == "" {
		if !tagged {
			return ProviderEventOutcome{}, nil // provisioning answers it
		}
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeServiceUnavailable,
			"this deployment receives no payment provider events (no webhook secret is configured)")
	}
	ev, err := payments.VerifyWebhook(cmd.Payload, cmd.Signature, h.cfg.WebhookSecret, h.cfg.Now())
	switch {
	case err != nil && !tagged:
		return ProviderEventOutcome{}, nil // provisioning verifies it again and answers the same refusal
	case errors.Is(err, payments.ErrInvalidSignature):
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeInvalidSignature,
			"the Stripe-Signature header does not verify (wrong secret, altered body or a timestamp out of tolerance)").
			WithRetryable(false).Wrap(err)
	case errors.Is(err, payments.ErrInvalidEvent):
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeInvalidEvent, "the event is signed but cannot be read").WithRetryable(false).Wrap(err)
	case err != nil:
		return ProviderEventOutcome{}, err
	}
	ctx = eventstore.CausedBy(ctx, ev.ID)
	meta := ev.ObjectMetadata()
	orgID, orderID := meta[payments.MetaOrgID], meta[payments.MetaOrderID]
	if !tagged {
		if done, err := h.markerExists(ctx, domain.ProviderEventStream(ev.ID)); err != nil || done {
			// Applied already (by this capability or provisioning): the
			// same answer whichever applied it.
			return ProviderEventOutcome{Ours: true, EventID: ev.ID, Type: ev.Type, Outcome: OutcomeDuplicate}, storeDownIf(err)
		}
		var ok bool
		if orgID, orderID, ok, err = h.ourCharge(ctx, ev); err != nil || !ok {
			return ProviderEventOutcome{}, err
		}
	}
	return h.apply(ctx, ev, orgID, orderID)
}

// ourCharge finds the proxy order a refund or a dispute is about: the
// order whose subscription the charge's invoice is of. A charge of no
// invoice (a refund's charge names its invoice; a dispute names only its
// charge, read from the provider) is not a subscription's, so no proxy
// order's.
func (h ReceiveProviderEventHandler) ourCharge(ctx context.Context, ev payments.Event) (orgID, orderID string, ok bool, err error) {
	var chargeID string
	switch ev.Type {
	case payments.EventChargeRefunded:
		ch, err := ev.Charge()
		if err != nil {
			return "", "", false, invalidEvent(err)
		}
		if ch.InvoiceID == "" {
			return "", "", false, nil
		}
		chargeID = ch.ID
	default:
		d, err := ev.Dispute()
		if err != nil {
			return "", "", false, invalidEvent(err)
		}
		chargeID = d.ChargeID
	}
	if h.cfg.Payments == nil || chargeID == "" {
		return "", "", false, nil
	}
	sub, err := h.cfg.Payments.SubscriptionOfCharge(ctx, chargeID)
	if err != nil {
		return "", "", false, domain.Errorf(domain.CodeServiceUnavailable,
			"the payment provider cannot say which subscription charge %s paid; deliver the event again", chargeID).
			WithRetryable(true).Wrap(err)
	}
	orgID, orderID, ok, err = h.queries.ProxyOrderOfSubscription(ctx, sub)
	return orgID, orderID, ok, storeDownIf(err)
}

func invalidEvent(err error) error {
	return domain.Errorf(domain.CodeInvalidEvent, "the event is signed but cannot be read").WithRetryable(false).Wrap(err)
}

func (h ReceiveProviderEventHandler) apply(ctx context.Context, ev payments.Event, orgID, orderID string) (ProviderEventOutcome, error) {
	r := ProviderEventOutcome{Ours: true, EventID: ev.ID, Type: ev.Type}
	r.OrderID = orderID
	marker := domain.ProviderEventStream(ev.ID)
	if done, err := h.markerExists(ctx, marker); err != nil || done {
		r.Outcome = OutcomeDuplicate
		return r, storeDownIf(err)
	}
	var effect func(a *domain.ProxyAccount, o *domain.ProxyOrder, now domain.ProxyIssued) []domain.Event
	var issued domain.ProxyIssued
	switch ev.Type {
	case payments.EventCheckoutCompleted, payments.EventCheckoutAsyncPaymentSucceeded:
		s, err := ev.CheckoutSession()
		if err != nil {
			return r, domain.Errorf(domain.CodeInvalidEvent, "the event is signed but cannot be read").WithRetryable(false).Wrap(err)
		}
		if s.PaymentStatus != "paid" {
			break // an asynchronous payment still pending: its success comes later
		}
		acct, _, err := h.accounts.Load(ctx, orgID)
		if err != nil {
			return r, storeDown(err)
		}
		o, ok := acct.Order(orderID)
		if !ok || orgID == "" {
			return r, notSettled(orderID)
		}
		if o.State == domain.ProxyOrderRunning || o.State == domain.ProxyOrderAwaitingPayment || o.State == domain.ProxyOrderFailedState {
			// Issue the proxy before recording the payment, outside the
			// transaction; a proxy id is issued once (its order's).
			user, pass := domain.NewProxyCredentials()
			end, err := h.cfg.Supplier.Issue(ctx, o.ProxyID, o.Product, user, pass)
			if err != nil {
				return r, domain.Errorf(domain.CodeServiceUnavailable, "the proxy supplier cannot issue the proxy now; the provider delivers the payment again").
					WithRetryable(true).Wrap(err)
			}
			issued = domain.ProxyIssued{ProxyID: o.ProxyID, OrderID: o.OrderID, ProductID: o.Product.ID, Kind: o.Product.Kind,
				Country: o.Product.Country, Protocol: o.Product.Protocol, Host: end.Host, Port: end.Port, Username: user,
				SealedPassword: domain.SealProxyPassword(h.cfg.Box, o.ProxyID, pass)}
			subID := s.SubscriptionID
			effect = func(a *domain.ProxyAccount, o *domain.ProxyOrder, issued domain.ProxyIssued) []domain.Event {
				if o.State == domain.ProxyOrderPaidState || o.State == domain.ProxyOrderEndedState {
					return nil
				}
				issued.At = h.now()
				return []domain.Event{domain.ProxyOrderPaid{OrderID: o.OrderID, SubscriptionID: subID, ProviderEventID: ev.ID, At: issued.At}, issued}
			}
		}
	case payments.EventCheckoutExpired, payments.EventCheckoutAsyncPaymentFailed:
		effect = func(a *domain.ProxyAccount, o *domain.ProxyOrder, _ domain.ProxyIssued) []domain.Event {
			if o.State != domain.ProxyOrderAwaitingPayment && o.State != domain.ProxyOrderRunning {
				return nil
			}
			return []domain.Event{domain.ProxyOrderFailed{OrderID: o.OrderID, Code: "expired", Message: "the payment page expired unpaid", At: h.now()}}
		}
	case payments.EventSubscriptionDeleted:
		effect = func(a *domain.ProxyAccount, o *domain.ProxyOrder, _ domain.ProxyIssued) []domain.Event {
			if o.State != domain.ProxyOrderPaidState {
				return nil
			}
			return endOrder(a, o, "subscription_ended", h.now())
		}
	case payments.EventChargeRefunded:
		ch, err := ev.Charge()
		if err != nil {
			return r, invalidEvent(err)
		}
		effect = func(a *domain.ProxyAccount, o *domain.ProxyOrder, _ domain.ProxyIssued) []domain.Event {
			if o.PaidAt == nil || (o.Refund != nil && o.Refund.ChargeID == ch.ID && o.Refund.AmountRefunded >= ch.AmountRefunded) {
				return nil // never paid, or a refund already recorded delivered late
			}
			now := h.now()
			evs := []domain.Event{domain.ProxyOrderRefunded{OrderID: o.OrderID, ChargeID: ch.ID, Amount: ch.Amount,
				AmountRefunded: ch.AmountRefunded, Currency: ch.Currency, Full: ch.Refunded, ProviderEventID: ev.ID, At: now}}
			if ch.Refunded && o.State == domain.ProxyOrderPaidState {
				evs = append(evs, endOrder(a, o, domain.EndRefunded, now)...)
			}
			return evs
		}
	case payments.EventDisputeCreated, payments.EventDisputeClosed:
		d, err := ev.Dispute()
		if err != nil {
			return r, invalidEvent(err)
		}
		effect = func(a *domain.ProxyAccount, o *domain.ProxyOrder, _ domain.ProxyIssued) []domain.Event {
			if o.PaidAt == nil || (o.Dispute != nil && o.Dispute.DisputeID == d.ID && o.Dispute.Status == d.Status) {
				return nil
			}
			now := h.now()
			evs := []domain.Event{domain.ProxyOrderDisputed{OrderID: o.OrderID, DisputeID: d.ID, ChargeID: d.ChargeID, Status: d.Status,
				Reason: d.Reason, Amount: d.Amount, Currency: d.Currency, ProviderEventID: ev.ID, At: now}}
			if ev.Type == payments.EventDisputeCreated && o.State == domain.ProxyOrderPaidState {
				evs = append(evs, endOrder(a, o, domain.EndDisputed, now)...)
			}
			return evs
		}
	}
	r.Outcome = OutcomeIgnored
	if orgID == "" {
		return r, nil // names no organisation: nothing of ours to settle
	}
	var applied bool
	_, c, err := h.accounts.UpdateWith(ctx, orgID, func(a *domain.ProxyAccount, u *eventstore.Unit) ([]domain.Event, error) {
		applied = false
		if done, err := h.markerExists(ctx, marker); err != nil || done {
			return nil, err
		}
		var evs []domain.Event
		if effect != nil {
			o, ok := a.Order(orderID)
			if !ok {
				return nil, notSettled(orderID)
			}
			evs = effect(a, o, issued)
		}
		news, err := eventstore.Encode[domain.Event](domain.Events, orgID,
			domain.ProviderEventApplied{ProviderEventID: ev.ID, Type: ev.Type, OrgID: orgID, At: h.now()})
		if err != nil {
			return nil, err
		}
		u.Append(marker, eventstore.NoStream, news...)
		applied = len(evs) > 0
		return evs, nil
	})
	if err != nil {
		return r, storeDownIf(err)
	}
	if applied {
		r.Outcome = OutcomeApplied
		if h.cfg.Requested != nil {
			h.cfg.Requested()
		}
	}
	return r, awaitErr(h.Proxies, ctx, c)
}

// endOrder ends a paid order for reason: its proxy revoked (the order's
// end does it: its credentials are refused from then on) and its devices
// taken off it by the system, as a subscription's end does.
func endOrder(a *domain.ProxyAccount, o *domain.ProxyOrder, reason string, now time.Time) []domain.Event {
	evs := []domain.Event{domain.ProxyOrderEnded{OrderID: o.OrderID, Reason: reason, At: now}}
	if p, ok := a.Proxy(o.ProxyID); ok && len(p.Devices) > 0 {
		evs = append(evs, domain.ProxyOperationRequested{OperationID: domain.NewID(domain.PrefixProxyOp), ProxyID: p.ProxyID,
			Kind: domain.ProxyOpUnassign, DeviceIDs: append([]string(nil), p.Devices...), RequestDigest: "system",
			By: domain.Actor{Kind: "system", ID: "payment-webhook"}, At: now})
	}
	return evs
}

func (h ReceiveProviderEventHandler) markerExists(ctx context.Context, stream string) (bool, error) {
	evs, err := h.cfg.Store.Load(ctx, stream, 1)
	return len(evs) > 0, err
}

func notSettled(orderID string) error {
	return domain.Errorf(domain.CodeNotSettled, "proxy order %s is not recorded here yet; deliver the event again", orderID).WithRetryable(true)
}

func storeDownIf(err error) error {
	if err == nil {
		return nil
	}
	return storeDown(err)
}
