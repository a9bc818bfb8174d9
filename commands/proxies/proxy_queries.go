package proxies

import (
	"context"
	"crypto/subtle"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListProxies lists the organisation's proxies (GET /v1/proxies).
type ListProxies struct {
	Auth  domain.Auth
	Limit int
}

// ListProxiesHandler handles ListProxies.
type ListProxiesHandler struct{ *Proxies }

// Handle answers any member.
func (h ListProxiesHandler) Handle(ctx context.Context, q ListProxies) ([]projections.ProxyView, error) {
	if err := mayRead(q.Auth); err != nil {
		return nil, err
	}
	return h.queries.ListProxies(ctx, q.Auth.OrgID, limitOf(q.Limit))
}

// GetProxy reads one proxy (GET /v1/proxies/{proxyId}).
type GetProxy struct {
	Auth    domain.Auth
	ProxyID string
}

// GetProxyHandler handles GetProxy.
type GetProxyHandler struct{ *Proxies }

// Handle answers any member; another organisation's proxy is not_found.
func (h GetProxyHandler) Handle(ctx context.Context, q GetProxy) (projections.ProxyView, error) {
	if err := mayRead(q.Auth); err != nil {
		return projections.ProxyView{}, err
	}
	v, ok, err := h.queries.GetProxy(ctx, q.Auth.OrgID, q.ProxyID)
	if err == nil && !ok {
		err = domain.ErrProxyNotFound(q.ProxyID)
	}
	return v, err
}

// AuthenticateProxy checks the credentials presented to the forward proxy
// (Proxy-Authorization Basic). It answers the proxy's id, "" when they
// are no active proxy's. A system query: the forward proxy's caller is a
// device's network stack, not a principal.
type AuthenticateProxy struct {
	Username, Password string
}

// AuthenticateProxyHandler handles AuthenticateProxy.
type AuthenticateProxyHandler struct{ *Proxies }

// Handle compares in constant time against the sealed password of the
// active proxy the username names (a rotated or revoked proxy's old
// credentials are refused once the read model has the change, which the
// operation waits for before it answers succeeded).
func (h AuthenticateProxyHandler) Handle(ctx context.Context, q AuthenticateProxy) (string, error) {
	c, ok, err := h.queries.ActiveProxyByUsername(ctx, q.Username)
	if err != nil || !ok {
		return "", err
	}
	pass, err := domain.OpenProxyPassword(h.cfg.Box, c.ProxyID, c.SealedPassword)
	if err != nil {
		return "", err
	}
	if subtle.ConstantTimeCompare([]byte(pass), []byte(q.Password)) != 1 {
		return "", nil
	}
	return c.ProxyID, nil
}

// DeviceProxy names the proxy a device of the caller's organisation is
// behind ("" when none). The device views add it; the caller has read the
// device already.
type DeviceProxy struct {
	Auth     domain.Auth
	DeviceID string
}

// DeviceProxyHandler handles DeviceProxy.
type DeviceProxyHandler struct{ *Proxies }

// Handle reads the assignment.
func (h DeviceProxyHandler) Handle(ctx context.Context, q DeviceProxy) (string, error) {
	if !q.Auth.CanSeeDevice(q.DeviceID) {
		return "", nil
	}
	return h.queries.ProxyOfDevice(ctx, q.Auth.OrgID, q.DeviceID)
}

// ProxiesAt names the proxy each receipt's device was behind when it
// acted (the receipt views add it); "" for a device that connected
// directly. The caller read the receipts already.
type ProxiesAt struct {
	Auth domain.Auth
	At   []projections.DeviceAt
}

// ProxiesAtHandler handles ProxiesAt.
type ProxiesAtHandler struct{ *Proxies }

// Handle reads the assignment history of the caller's organisation.
func (h ProxiesAtHandler) Handle(ctx context.Context, q ProxiesAt) ([]string, error) {
	return h.queries.ProxiesAt(ctx, q.Auth.OrgID, q.At)
}
