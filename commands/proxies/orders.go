package proxies

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListProxyOrders lists the organisation's proxy orders, newest first (GET
// /v1/proxy-orders).
type ListProxyOrders struct {
	Auth  domain.Auth
	Limit int
}

// ListProxyOrdersHandler handles ListProxyOrders.
type ListProxyOrdersHandler struct{ *Proxies }

// Handle answers any member.
func (h ListProxyOrdersHandler) Handle(ctx context.Context, q ListProxyOrders) ([]projections.ProxyOrderView, error) {
	if err := mayRead(q.Auth); err != nil {
		return nil, err
	}
	return h.queries.ListProxyOrders(ctx, q.Auth.OrgID, limitOf(q.Limit))
}

// limitOf bounds a list's page (default 50, at most 200).
func limitOf(n int) int {
	if n <= 0 {
		return 50
	}
	return min(n, 200)
}

// GetProxyOrder reads one order (GET /v1/proxy-orders/{orderId}).
type GetProxyOrder struct {
	Auth    domain.Auth
	OrderID string
}

// GetProxyOrderHandler handles GetProxyOrder.
type GetProxyOrderHandler struct{ *Proxies }

// Handle answers any member; another organisation's order is not_found,
// as a missing one.
func (h GetProxyOrderHandler) Handle(ctx context.Context, q GetProxyOrder) (projections.ProxyOrderView, error) {
	if err := mayRead(q.Auth); err != nil {
		return projections.ProxyOrderView{}, err
	}
	v, ok, err := h.queries.GetProxyOrder(ctx, q.Auth.OrgID, q.OrderID)
	if err == nil && !ok {
		err = domain.ErrProxyOrderNotFound(q.OrderID)
	}
	return v, err
}

// CancelProxyOrder stops a paid order's subscription at the end of the
// period already paid (POST /v1/proxy-orders/{orderId}/cancel); the proxy
// serves until the provider ends the subscription.
type CancelProxyOrder struct {
	Auth    domain.Auth
	OrderID string
}

// CancelProxyOrderHandler handles CancelProxyOrder.
type CancelProxyOrderHandler struct{ *Proxies }

// Handle: admins (and keys with orders:place) only; an order not paid is
// 409 wrong_state naming its state; a repeat changes nothing.
func (h CancelProxyOrderHandler) Handle(ctx context.Context, cmd CancelProxyOrder) (projections.ProxyOrderView, error) {
	a := cmd.Auth
	if err := mayPay(a, "cancel proxy orders"); err != nil {
		return projections.ProxyOrderView{}, err
	}
	acct, _, err := h.accounts.Load(ctx, a.OrgID)
	if err != nil {
		return projections.ProxyOrderView{}, storeDown(err)
	}
	o, ok := acct.Order(cmd.OrderID)
	switch {
	case !ok:
		return projections.ProxyOrderView{}, domain.ErrProxyOrderNotFound(cmd.OrderID)
	case o.State != domain.ProxyOrderPaidState:
		return projections.ProxyOrderView{}, domain.Errorf(domain.CodeWrongState, "proxy order %s is %s; only a paid order can be cancelled", o.OrderID, o.State).
			With("state", o.State)
	case !o.CancelAtPeriodEnd:
		if h.cfg.Payments == nil {
			return projections.ProxyOrderView{}, domain.Errorf(domain.CodeServiceUnavailable, "this deployment has no payment provider configured")
		}
		if o.SubscriptionID != "" {
			if err := h.cfg.Payments.CancelSubscription(ctx, o.SubscriptionID, true, "phonefleet-proxy-cancel-"+o.OrderID); err != nil {
				return projections.ProxyOrderView{}, domain.Errorf(domain.CodeServiceUnavailable,
					"the payment provider did not take the cancellation; nothing changed, try again").WithRetryable(true).Wrap(err)
			}
		}
		if _, err := h.decide(ctx, a.OrgID, func(acct *domain.ProxyAccount) ([]domain.Event, error) {
			if o, ok := acct.Order(cmd.OrderID); !ok || o.CancelAtPeriodEnd {
				return nil, nil
			}
			return []domain.Event{domain.ProxyOrderCancelScheduled{OrderID: cmd.OrderID, By: domain.ActorOf(a), At: h.now()}}, nil
		}); err != nil {
			return projections.ProxyOrderView{}, storeDown(err)
		}
	}
	v, ok, err := h.queries.GetProxyOrder(ctx, a.OrgID, cmd.OrderID)
	if err == nil && !ok {
		err = domain.ErrProxyOrderNotFound(cmd.OrderID)
	}
	return v, err
}
