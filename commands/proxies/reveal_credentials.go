package proxies

import (
	"context"

	"phonefleet/domain"
)

// RevealProxyCredentials shows an issued proxy's credentials, once (POST
// /v1/proxies/{proxyId}/credentials): the proxy is issued by the
// provider's payment event, which no person sees, so its first showing is
// asked for. Afterwards the password is never shown again; a rotation
// makes new credentials and shows them in its answer.
type RevealProxyCredentials struct {
	Auth    domain.Auth
	ProxyID string
}

// RevealProxyCredentialsHandler handles RevealProxyCredentials.
type RevealProxyCredentialsHandler struct{ *Proxies }

// Handle: admins (and keys with orders:place) only; another organisation's
// proxy is not_found; a proxy whose credentials were shown already is 409
// wrong_state (state revealed).
func (h RevealProxyCredentialsHandler) Handle(ctx context.Context, cmd RevealProxyCredentials) (ProxyCredentials, error) {
	a := cmd.Auth
	if err := mayPay(a, "read proxy credentials"); err != nil {
		return ProxyCredentials{}, err
	}
	var creds ProxyCredentials
	_, err := h.decide(ctx, a.OrgID, func(acct *domain.ProxyAccount) ([]domain.Event, error) {
		p, ok := acct.Proxy(cmd.ProxyID)
		switch {
		case !ok:
			return nil, domain.ErrProxyNotFound(cmd.ProxyID)
		case p.Revealed:
			return nil, domain.Errorf(domain.CodeWrongState,
				"the credentials of proxy %s were shown already; rotate them (POST /v1/proxy-operations, kind rotate) to get new ones", p.ProxyID).
				With("state", "revealed")
		case p.State != domain.ProxyActive:
			return nil, domain.Errorf(domain.CodeWrongState, "proxy %s is %s", p.ProxyID, p.State).With("state", p.State)
		}
		pass, err := domain.OpenProxyPassword(h.cfg.Box, p.ProxyID, p.SealedPassword)
		if err != nil {
			return nil, err
		}
		creds = ProxyCredentials{Username: p.Username, Password: pass}
		return []domain.Event{domain.ProxyCredentialsRevealed{ProxyID: p.ProxyID, By: domain.ActorOf(a), At: h.now()}}, nil
	})
	if err != nil {
		return ProxyCredentials{}, storeDown(err)
	}
	return creds, nil
}
