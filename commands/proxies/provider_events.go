package proxies

import (
	"context"
	"encoding/json"
	"errors"

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

// Handle verifies a delivery about a proxy order and applies it once:
//   - checkout.session.completed paid, checkout.session.async_payment_succeeded:
//     proxy.order_paid and proxy.issued (the supplier issues the proxy; no
//     proxy exists before the payment is verified);
//   - checkout.session.expired, checkout.session.async_payment_failed:
//     proxy.order_failed (expired);
//   - customer.subscription.deleted: proxy.order_ended and the proxy
//     revoked, its devices taken off it (unassign operations, by the
//     system).
//
// Anything else is marked applied and ignored. Errors: invalid_signature,
// invalid_event, not_settled (an order this service has not recorded yet;
// the provider delivers it again), service_unavailable (no webhook secret;
// the supplier or the store down).
func (h ReceiveProviderEventHandler) Handle(ctx context.Context, cmd ReceiveProviderEvent) (ProviderEventOutcome, error) {
	if !IsProxyEvent(cmd.Payload) {
		return ProviderEventOutcome{}, nil
	}
	if h.cfg.WebhookSecret == "" {
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeServiceUnavailable,
			"this deployment receives no payment provider events (no webhook secret is configured)")
	}
	ev, err := payments.VerifyWebhook(cmd.Payload, cmd.Signature, h.cfg.WebhookSecret, h.cfg.Now())
	switch {
	case errors.Is(err, payments.ErrInvalidSignature):
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeInvalidSignature,
			"the Stripe-Signature header does not verify (wrong secret, altered body or a timestamp out of tolerance)").
			WithRetryable(false).Wrap(err)
	case errors.Is(err, payments.ErrInvalidEvent):
		return ProviderEventOutcome{}, domain.Errorf(domain.CodeInvalidEvent, "the event is signed but cannot be read").WithRetryable(false).Wrap(err)
	case err != nil:
		return ProviderEventOutcome{}, err
	}
	return h.apply(eventstore.CausedBy(ctx, ev.ID), ev)
}

func (h ReceiveProviderEventHandler) apply(ctx context.Context, ev payments.Event) (ProviderEventOutcome, error) {
	r := ProviderEventOutcome{Ours: true, EventID: ev.ID, Type: ev.Type}
	meta := ev.ObjectMetadata()
	orgID, orderID := meta[payments.MetaOrgID], meta[payments.MetaOrderID]
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
			now := h.now()
			evs := []domain.Event{domain.ProxyOrderEnded{OrderID: o.OrderID, Reason: "subscription_ended", At: now}}
			if p, ok := a.Proxy(o.ProxyID); ok && len(p.Devices) > 0 {
				evs = append(evs, domain.ProxyOperationRequested{OperationID: domain.NewID(domain.PrefixProxyOp), ProxyID: p.ProxyID,
					Kind: domain.ProxyOpUnassign, DeviceIDs: append([]string(nil), p.Devices...), RequestDigest: "system",
					By: domain.Actor{Kind: "system", ID: "payment-webhook"}, At: now})
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
