package proxies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"

	"phonefleet/domain"
	"phonefleet/projections"
)

// RequestProxyOperation asks for an operation on a proxy (POST
// /v1/proxy-operations): assign it to devices, unassign it from them, or
// rotate its credentials. It is recorded pending and performed by the
// proxy-operations worker; GET /v1/proxy-operations/{id} follows it.
type RequestProxyOperation struct {
	Auth      domain.Auth
	ProxyID   string
	Kind      string
	DeviceIDs []string
	// IdempotencyKey is the Idempotency-Key header ("" when none): a
	// repeat within 24 hours answers the first operation.
	IdempotencyKey string
	// StepUp is the x-service-step-up header (renew, where reverification
	// is configured).
	StepUp string
}

// ProxyCredentials are a proxy's credentials in clear: answered once,
// when issued and on rotation.
type ProxyCredentials struct {
	Username, Password string
}

// RequestedOperation is an operation recorded, with a rotation's new
// credentials.
type RequestedOperation struct {
	Operation   domain.ProxyOperation
	Credentials *ProxyCredentials
	Replayed    bool
}

// RequestProxyOperationHandler handles RequestProxyOperation.
type RequestProxyOperationHandler struct{ *Proxies }

// Handle: devices:act (any member holding it; assigning and rotating cost
// nothing); the devices must be the caller's (device_unavailable
// not_found otherwise, as missing ones); the proxy the organisation's and
// active (not_found; 409 wrong_state).
func (h RequestProxyOperationHandler) Handle(ctx context.Context, cmd RequestProxyOperation) (RequestedOperation, error) {
	a := cmd.Auth
	if cmd.IdempotencyKey != "" {
		if err := domain.CheckCheckoutKey(cmd.IdempotencyKey); err != nil {
			return RequestedOperation{}, err
		}
	}
	if err := a.DenyApp("proxy operations", "the console's Proxies page"); err != nil {
		return RequestedOperation{}, err
	}
	if cmd.Kind == domain.ProxyOpRenew {
		// Renewing costs money: who may pay, with a fresh identity check
		// where configured.
		if err := mayPay(a, "renew proxies"); err != nil {
			return RequestedOperation{}, err
		}
		if err := domain.Reverify(ctx, h.cfg.RequireReverification, h.cfg.StepUp, a, cmd.StepUp, "this proxy purchase", h.now()); err != nil {
			return RequestedOperation{}, err
		}
	} else if err := a.Require(domain.ScopeDevicesAct); err != nil {
		return RequestedOperation{}, err
	}
	devices := slices.Clone(cmd.DeviceIDs)
	slices.Sort(devices)
	devices = slices.Compact(devices)
	key := domain.DigestKey(cmd.IdempotencyKey)
	digest := opDigest(cmd.ProxyID, cmd.Kind, devices)
	now := h.now()
	acct, _, err := h.accounts.Load(ctx, a.OrgID)
	if err != nil {
		return RequestedOperation{}, storeDown(err)
	}
	if op, err := acct.UseOperationKey(key, digest, now); err != nil {
		return RequestedOperation{}, err
	} else if op != nil {
		return h.answer(*op, true)
	}
	for _, d := range devices {
		if _, err := h.cfg.Devices.Visible(ctx, a, d); err != nil {
			return RequestedOperation{}, err
		}
	}
	req := domain.ProxyOperationRequested{OperationID: domain.NewID(domain.PrefixProxyOp), ProxyID: cmd.ProxyID, Kind: cmd.Kind,
		DeviceIDs: devices, IdempotencyKey: key, RequestDigest: digest, By: domain.ActorOf(a), At: now}
	if cmd.Kind == domain.ProxyOpRotate {
		user, pass := domain.NewProxyCredentials()
		req.Username, req.SealedPassword = user, domain.SealProxyPassword(h.cfg.Box, cmd.ProxyID, pass)
	}
	var earlier *domain.ProxyOperation
	after, err := h.decide(ctx, a.OrgID, func(acct *domain.ProxyAccount) ([]domain.Event, error) {
		op, err := acct.UseOperationKey(key, digest, now)
		if err != nil || op != nil {
			earlier = op
			return nil, err
		}
		return acct.RequestOperation(req)
	})
	if err != nil {
		return RequestedOperation{}, storeDown(err)
	}
	if earlier != nil {
		return h.answer(*earlier, true)
	}
	if h.cfg.Requested != nil {
		h.cfg.Requested()
	}
	op, _ := after.Operation(req.OperationID)
	return h.answer(*op, false)
}

func (h RequestProxyOperationHandler) answer(op domain.ProxyOperation, replayed bool) (RequestedOperation, error) {
	out := RequestedOperation{Operation: op, Replayed: replayed}
	if op.Kind == domain.ProxyOpRotate {
		pass, err := domain.OpenProxyPassword(h.cfg.Box, op.ProxyID, op.SealedPassword)
		if err != nil {
			return RequestedOperation{}, err
		}
		out.Credentials = &ProxyCredentials{Username: op.Username, Password: pass}
	}
	return out, nil
}

func opDigest(proxyID, kind string, devices []string) string {
	s := sha256.Sum256([]byte("proxy-operation\x00" + proxyID + "\x00" + kind + "\x00" + strings.Join(devices, ",")))
	return hex.EncodeToString(s[:])
}

// ListProxyOperations lists operations, newest first, of one proxy when
// ProxyID is set (GET /v1/proxy-operations).
type ListProxyOperations struct {
	Auth    domain.Auth
	ProxyID string
	Limit   int
}

// ListProxyOperationsHandler handles ListProxyOperations.
type ListProxyOperationsHandler struct{ *Proxies }

// Handle answers any member.
func (h ListProxyOperationsHandler) Handle(ctx context.Context, q ListProxyOperations) ([]projections.ProxyOperationView, error) {
	if err := mayRead(q.Auth); err != nil {
		return nil, err
	}
	return h.queries.ListProxyOperations(ctx, q.Auth.OrgID, q.ProxyID, limitOf(q.Limit))
}

// GetProxyOperation reads one operation (GET
// /v1/proxy-operations/{operationId}).
type GetProxyOperation struct {
	Auth        domain.Auth
	OperationID string
}

// GetProxyOperationHandler handles GetProxyOperation.
type GetProxyOperationHandler struct{ *Proxies }

// Handle answers any member; another organisation's is not_found.
func (h GetProxyOperationHandler) Handle(ctx context.Context, q GetProxyOperation) (projections.ProxyOperationView, error) {
	if err := mayRead(q.Auth); err != nil {
		return projections.ProxyOperationView{}, err
	}
	v, ok, err := h.queries.GetProxyOperation(ctx, q.Auth.OrgID, q.OperationID)
	if err == nil && !ok {
		err = domain.Errorf(domain.CodeNotFound, "no proxy operation %s", q.OperationID).With("resource", "proxy_operation")
	}
	return v, err
}

// PerformProxyOperations is the proxy-operations worker's pass: it
// performs every pending operation, oldest first, and answers how many it
// finished.
type PerformProxyOperations struct{}

// PerformProxyOperationsHandler handles PerformProxyOperations.
type PerformProxyOperationsHandler struct{ *Proxies }

// Handle performs each pending operation: the devices are configured
// through the fleet's queue (outside any transaction), then the outcome is
// recorded: proxy.assigned / proxy.unassigned per device done,
// proxy.credentials_rotated, and proxy.operation_finished (succeeded, or
// failed with the device's or supplier's error code and reason). An
// operation already finished (another instance, a retry) is left alone.
func (h PerformProxyOperationsHandler) Handle(ctx context.Context, _ PerformProxyOperations) (int, error) {
	pending, err := h.queries.PendingProxyOperations(ctx, 50)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range pending {
		done, err := h.perform(ctx, v.OrgID, v.OperationID)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, nil
}

func (h PerformProxyOperationsHandler) perform(ctx context.Context, orgID, opID string) (bool, error) {
	acct, _, err := h.accounts.Load(ctx, orgID)
	if err != nil {
		return false, err
	}
	op, ok := acct.Operation(opID)
	if !ok || op.State != domain.ProxyOpPending {
		return false, nil
	}
	p, _ := acct.Proxy(op.ProxyID)
	var evs []domain.Event
	var failure error
	switch {
	case p == nil:
		failure = domain.ErrProxyNotFound(op.ProxyID)
	case op.Kind == domain.ProxyOpAssign:
		if p.State != domain.ProxyActive {
			failure = domain.Errorf(domain.CodeWrongState, "proxy %s is %s", p.ProxyID, p.State)
			break
		}
		np, err := h.networkProxy(p.ProxyIssued, p.Username, p.SealedPassword)
		if err != nil {
			return false, err
		}
		for _, d := range op.DeviceIDs {
			if err := h.cfg.Devices.SetNetworkProxy(ctx, d, np); err != nil {
				failure = err
				break
			}
			evs = append(evs, domain.ProxyAssigned{ProxyID: p.ProxyID, DeviceID: d, OperationID: op.OperationID, At: h.now()})
		}
	case op.Kind == domain.ProxyOpUnassign:
		for _, d := range op.DeviceIDs {
			if !slices.Contains(p.Devices, d) {
				continue // moved to another proxy meanwhile: leave its setting
			}
			if err := h.cfg.Devices.SetNetworkProxy(ctx, d, nil); err != nil {
				failure = err
				break
			}
			evs = append(evs, domain.ProxyUnassigned{ProxyID: p.ProxyID, DeviceID: d, OperationID: op.OperationID, At: h.now()})
		}
	case op.Kind == domain.ProxyOpRotate:
		if p.State != domain.ProxyActive {
			failure = domain.Errorf(domain.CodeWrongState, "proxy %s is %s", p.ProxyID, p.State)
			break
		}
		pass, err := domain.OpenProxyPassword(h.cfg.Box, p.ProxyID, op.SealedPassword)
		if err != nil {
			return false, err
		}
		if err := h.cfg.Supplier.Rotate(ctx, p.ProxyID, op.Username, pass); err != nil {
			failure = err
			break
		}
		// The new credentials first: from here the old ones are refused.
		if _, err := h.decide(ctx, orgID, func(a *domain.ProxyAccount) ([]domain.Event, error) {
			if o, ok := a.Operation(opID); !ok || o.State != domain.ProxyOpPending {
				return nil, nil
			}
			return []domain.Event{domain.ProxyCredentialsRotated{ProxyID: p.ProxyID, Username: op.Username, SealedPassword: op.SealedPassword,
				OperationID: opID, At: h.now()}}, nil
		}); err != nil {
			return false, err
		}
		np := &domain.NetworkProxy{ProxyID: p.ProxyID, Host: p.Host, Port: p.Port, Username: op.Username, Password: pass}
		for _, d := range p.Devices {
			if err := h.cfg.Devices.SetNetworkProxy(ctx, d, np); err != nil {
				failure = err
				break
			}
		}
	case op.Kind == domain.ProxyOpRenew:
		o, _ := acct.Order(p.OrderID)
		switch {
		case o == nil || !o.CancelAtPeriodEnd:
			// Nothing to withdraw any more (renewed meanwhile).
		case h.cfg.Payments == nil:
			failure = domain.Errorf(domain.CodeServiceUnavailable, "this deployment has no payment provider configured")
		default:
			if o.SubscriptionID != "" {
				if err := h.cfg.Payments.ResumeSubscription(ctx, o.SubscriptionID, "phonefleet-proxy-renew-"+opID); err != nil {
					failure = domain.Errorf(domain.CodeServiceUnavailable, "the payment provider did not take the renewal: %v", err)
					break
				}
			}
			evs = append(evs, domain.ProxyOrderRenewed{OrderID: o.OrderID, OperationID: opID, At: h.now()})
		}
	}
	fin := domain.ProxyOperationFinished{OperationID: opID, State: domain.ProxyOpSucceeded}
	if failure != nil {
		fin.State, fin.Code, fin.Reason = domain.ProxyOpFailed, string(domain.CodeInternal), failure.Error()
		var de *domain.Error
		if errors.As(failure, &de) {
			fin.Code, fin.Reason = string(de.Code), de.Message
		}
	}
	_, err = h.decide(ctx, orgID, func(a *domain.ProxyAccount) ([]domain.Event, error) {
		if o, ok := a.Operation(opID); !ok || o.State != domain.ProxyOpPending {
			return nil, nil
		}
		fin.At = h.now()
		return append(slices.Clone(evs), fin), nil
	})
	return err == nil, err
}

// networkProxy is a proxy's endpoint with its credentials in clear, as a
// device is configured with it.
func (h PerformProxyOperationsHandler) networkProxy(p domain.ProxyIssued, username string, sealed []byte) (*domain.NetworkProxy, error) {
	pass, err := domain.OpenProxyPassword(h.cfg.Box, p.ProxyID, sealed)
	if err != nil {
		return nil, err
	}
	return &domain.NetworkProxy{ProxyID: p.ProxyID, Host: p.Host, Port: p.Port, Username: username, Password: pass}, nil
}
