package domain

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Managed proxies (spec 1 item 8, 4.5): products from the deployment's
// catalog, quoted, ordered and paid through the payment provider; the
// proxy a paid order issues; operations assigning it to devices, taking it
// off them and rotating its credentials.

// Proxy kinds, protocols, and the ids' prefixes.
const (
	ProxyKindFixed     = "fixed"
	ProxyKindRotating  = "rotating"
	ProxyProtocolHTTP  = "http"
	PrefixProxy        = "prx"
	PrefixProxyOrder   = "pxo"
	PrefixProxyOp      = "pxop"
	ProxyBillingPeriod = "month"
)

// ProxyProduct is one managed proxy product of the catalog: a kind, a
// country, a protocol and a monthly price (the smallest currency unit).
type ProxyProduct struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Kind         string `json:"kind"`
	Country      string `json:"country"`
	Protocol     string `json:"protocol"`
	MonthlyPrice int64  `json:"monthlyPrice"`
}

var proxyProductID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func checkProxyProducts(ps []ProxyProduct) error {
	seen := map[string]bool{}
	for _, p := range ps {
		switch {
		case !proxyProductID.MatchString(p.ID):
			return fmt.Errorf("proxy product id %q: want lower-case letters, digits and dashes", p.ID)
		case seen[p.ID]:
			return fmt.Errorf("proxy product %q listed twice", p.ID)
		case p.Name == "":
			return fmt.Errorf("proxy product %s: name is required", p.ID)
		case p.Kind != ProxyKindFixed && p.Kind != ProxyKindRotating:
			return fmt.Errorf("proxy product %s: kind must be fixed or rotating", p.ID)
		case !regionCode.MatchString(p.Country):
			return fmt.Errorf("proxy product %s: country must be a two-letter code", p.ID)
		case p.Protocol != ProxyProtocolHTTP:
			return fmt.Errorf("proxy product %s: protocol must be http", p.ID)
		case p.MonthlyPrice <= 0:
			return fmt.Errorf("proxy product %s: monthlyPrice must be positive", p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}

// ProxyProduct returns a proxy product by id.
func (c *Catalog) ProxyProduct(id string) (ProxyProduct, bool) {
	i := slices.IndexFunc(c.Proxies, func(p ProxyProduct) bool { return p.ID == id })
	if i < 0 {
		return ProxyProduct{}, false
	}
	return c.Proxies[i], true
}

// ProxyQuoteID is the digest of a proxy product's current price: a
// changed price (or product) changes it, so an order carrying an old one
// is refused with quote_changed.
func ProxyQuoteID(currency string, p ProxyProduct) string {
	return QuoteID(currency, "proxy:"+p.ID, ProxyBillingPeriod, p.Kind+"/"+p.Country+"/"+p.Protocol, p.MonthlyPrice)
}

// NewProxyCredentials returns a fresh username and password for a proxy.
func NewProxyCredentials() (username, password string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "px-" + hex.EncodeToString(b[:6]), hex.EncodeToString(b[6:])
}

// SealProxyPassword seals a proxy's password under the server key, bound
// to the proxy (a sealed password copied to another proxy does not open).
func SealProxyPassword(box *SecretBox, proxyID, password string) []byte {
	return box.Seal("proxy:"+proxyID, password)
}

// OpenProxyPassword opens a sealed proxy password.
func OpenProxyPassword(box *SecretBox, proxyID string, sealed []byte) (string, error) {
	return box.Open("proxy:"+proxyID, sealed)
}

// Proxy order states.
const (
	ProxyOrderRunning         = "running"
	ProxyOrderAwaitingPayment = "awaiting_payment"
	ProxyOrderPaidState       = "paid"
	ProxyOrderFailedState     = "failed"
	ProxyOrderEndedState      = "ended"
)

// Proxy states and operation kinds and states.
const (
	ProxyActive  = "active"
	ProxyRevoked = "revoked"

	ProxyOpAssign   = "assign"
	ProxyOpUnassign = "unassign"
	ProxyOpRotate   = "rotate"
	// ProxyOpRenew withdraws a cancellation scheduled at the period's end
	// (it costs money: admins only).
	ProxyOpRenew = "renew"

	ProxyOpPending   = "pending"
	ProxyOpSucceeded = "succeeded"
	ProxyOpFailed    = "failed"
)

// MaxProxyOperationDevices bounds deviceIds of one operation.
const MaxProxyOperationDevices = 20

// ProxyOrder is one order as its events left it.
type ProxyOrder struct {
	ProxyOrderStarted
	State                                  string
	SessionID, CheckoutURL, CustomerID     string
	ExpiresAt                              time.Time
	SubscriptionID                         string
	PaidAt                                 *time.Time
	CancelAtPeriodEnd                      bool
	EndedReason, FailedCode, FailedMessage string
	// FailedFinal says the failure is its key's answer
	// (ProxyOrderFailed.Final).
	FailedFinal bool
	// Refund and Dispute are the latest the provider reported of the
	// order's payment (nil: none).
	Refund  *ProxyOrderRefunded
	Dispute *ProxyOrderDisputed
}

// Proxy is one issued proxy.
type Proxy struct {
	ProxyIssued
	State   string
	Devices []string
	// Revealed is set once the password was shown (revealed after issue,
	// or answered by a rotation).
	Revealed bool
}

// ProxyOperation is one operation as its events left it.
type ProxyOperation struct {
	ProxyOperationRequested
	State      string
	Code       string
	Reason     string
	FinishedAt *time.Time
}

// ProxyAccount is an organisation's managed proxies: orders, proxies and
// operations.
type ProxyAccount struct {
	OrgID      string
	Orders     []ProxyOrder
	Proxies    []Proxy
	Operations []ProxyOperation
}

// Order returns an order by id.
func (a *ProxyAccount) Order(id string) (*ProxyOrder, bool) {
	for i := range a.Orders {
		if a.Orders[i].OrderID == id {
			return &a.Orders[i], true
		}
	}
	return nil, false
}

// Proxy returns a proxy by id.
func (a *ProxyAccount) Proxy(id string) (*Proxy, bool) {
	for i := range a.Proxies {
		if a.Proxies[i].ProxyID == id {
			return &a.Proxies[i], true
		}
	}
	return nil, false
}

// Operation returns an operation by id.
func (a *ProxyAccount) Operation(id string) (*ProxyOperation, bool) {
	for i := range a.Operations {
		if a.Operations[i].OperationID == id {
			return &a.Operations[i], true
		}
	}
	return nil, false
}

// ProxyOfDevice returns the proxy a device is behind, if any.
func (a *ProxyAccount) ProxyOfDevice(deviceID string) (*Proxy, bool) {
	for i := range a.Proxies {
		if slices.Contains(a.Proxies[i].Devices, deviceID) {
			return &a.Proxies[i], true
		}
	}
	return nil, false
}

// Apply folds one event.
func (a *ProxyAccount) Apply(e Event) {
	switch e := e.(type) {
	case ProxyOrderStarted:
		a.OrgID = e.OrgID
		a.Orders = append(a.Orders, ProxyOrder{ProxyOrderStarted: e, State: ProxyOrderRunning})
	case ProxyOrderOpened:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.SessionID, o.CheckoutURL, o.CustomerID, o.ExpiresAt = ProxyOrderAwaitingPayment, e.SessionID, e.CheckoutURL, e.CustomerID, e.ExpiresAt
		}
	case ProxyOrderFailed:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.FailedCode, o.FailedMessage, o.FailedFinal = ProxyOrderFailedState, e.Code, e.Message, e.Final
		}
	case ProxyOrderPaid:
		if o, ok := a.Order(e.OrderID); ok {
			at := e.At
			o.State, o.SubscriptionID, o.PaidAt = ProxyOrderPaidState, e.SubscriptionID, &at
		}
	case ProxyIssued:
		a.Proxies = append(a.Proxies, Proxy{ProxyIssued: e, State: ProxyActive})
	case ProxyOrderCancelScheduled:
		if o, ok := a.Order(e.OrderID); ok {
			o.CancelAtPeriodEnd = true
		}
	case ProxyOrderRenewed:
		if o, ok := a.Order(e.OrderID); ok {
			o.CancelAtPeriodEnd = false
		}
	case ProxyOrderRefunded:
		if o, ok := a.Order(e.OrderID); ok {
			o.Refund = &e
		}
	case ProxyOrderDisputed:
		if o, ok := a.Order(e.OrderID); ok {
			o.Dispute = &e
		}
	case ProxyOrderEnded:
		if o, ok := a.Order(e.OrderID); ok {
			o.State, o.EndedReason = ProxyOrderEndedState, e.Reason
			if p, ok := a.Proxy(o.ProxyID); ok {
				p.State = ProxyRevoked
			}
		}
	case ProxyOperationRequested:
		a.Operations = append(a.Operations, ProxyOperation{ProxyOperationRequested: e, State: ProxyOpPending})
	case ProxyOperationFinished:
		if op, ok := a.Operation(e.OperationID); ok {
			at := e.At
			op.State, op.Code, op.Reason, op.FinishedAt = e.State, e.Code, e.Reason, &at
		}
	case ProxyAssigned:
		// A device is behind one proxy at a time: assigning moves it.
		for i := range a.Proxies {
			a.Proxies[i].Devices = slices.DeleteFunc(a.Proxies[i].Devices, func(d string) bool { return d == e.DeviceID })
		}
		if p, ok := a.Proxy(e.ProxyID); ok {
			p.Devices = append(p.Devices, e.DeviceID)
		}
	case ProxyUnassigned:
		if p, ok := a.Proxy(e.ProxyID); ok {
			p.Devices = slices.DeleteFunc(p.Devices, func(d string) bool { return d == e.DeviceID })
		}
	case ProxyCredentialsRotated:
		if p, ok := a.Proxy(e.ProxyID); ok {
			p.Username, p.SealedPassword, p.Revealed = e.Username, e.SealedPassword, true
		}
	case ProxyCredentialsRevealed:
		if p, ok := a.Proxy(e.ProxyID); ok {
			p.Revealed = true
		}
	}
}

// UseOrderKey applies checkout's Idempotency-Key rules (HeldKey) to a
// new order: a repeat within 24 hours answers the first order, or its
// final refusal (replay); a different request under the key is
// idempotency_conflict (not retryable); a first attempt still running is
// idempotency_conflict (retryable), taken over once its process abandoned
// it (AttemptAbandoned, with held read for the running orders' claims). An
// order failed in a way a retry may cure (not Final, or its page expired
// unpaid) frees its key.
func (a *ProxyAccount) UseOrderKey(key, digest string, now time.Time, held ClaimsHeld) (*ProxyOrder, KeyUse, error) {
	i, use, err := HeldKey(len(a.Orders), func(i int) KeyAttempt {
		o := &a.Orders[i]
		k := o.KeyAttempt()
		k.Abandoned = k.Running && AttemptAbandoned(o.At, o.Claim, held, now)
		return k
	}, key, digest, "proxy order", now)
	if i < 0 {
		return nil, use, err
	}
	return &a.Orders[i], use, err
}

// KeyAttempt is what the Idempotency-Key rules read of the order.
func (o *ProxyOrder) KeyAttempt() KeyAttempt {
	return KeyAttempt{Key: o.IdempotencyKey, Request: o.RequestDigest, At: o.At, Running: o.State == ProxyOrderRunning,
		Freed: o.State == ProxyOrderFailedState && !o.FailedFinal}
}

// RunningClaims lists the claims of the orders still running (those
// recorded with one), to read which are held before deciding.
func (a *ProxyAccount) RunningClaims() []string {
	return runningClaims(a.Orders, func(o ProxyOrder) (string, bool) { return o.Claim, o.State == ProxyOrderRunning })
}

// UseOperationKey applies the same rules to a new operation: a repeat
// within 24 hours answers the first operation; a different request under
// the key is idempotency_conflict.
func (a *ProxyAccount) UseOperationKey(key, digest string, now time.Time) (*ProxyOperation, error) {
	if key == "" {
		return nil, nil
	}
	for i := len(a.Operations) - 1; i >= 0; i-- {
		op := &a.Operations[i]
		if op.IdempotencyKey != key || now.Sub(op.At) >= CheckoutKeyWindow {
			continue
		}
		if op.RequestDigest != digest {
			return nil, Errorf(CodeIdempotencyConflict,
				"this Idempotency-Key was used for a different proxy operation in the last 24 hours; use a new key for a new operation").WithRetryable(false)
		}
		return op, nil
	}
	return nil, nil
}

// ErrProxyNotFound is the answer for a proxy that is absent or another
// organisation's.
func ErrProxyNotFound(id string) *Error {
	return Errorf(CodeNotFound, "no proxy %s", id).With("resource", "proxy")
}

// ErrProxyOrderNotFound is the answer for an order that is absent or
// another organisation's.
func ErrProxyOrderNotFound(id string) *Error {
	return Errorf(CodeNotFound, "no proxy order %s", id).With("resource", "proxy_order")
}

// RequestOperation decides a new operation on a proxy: the proxy must be
// active; assign and unassign name 1 to 20 devices (unassign: devices
// behind this proxy); rotate names none.
func (a *ProxyAccount) RequestOperation(req ProxyOperationRequested) ([]Event, error) {
	p, ok := a.Proxy(req.ProxyID)
	if !ok {
		return nil, ErrProxyNotFound(req.ProxyID)
	}
	if p.State != ProxyActive {
		return nil, Errorf(CodeWrongState, "proxy %s is %s", p.ProxyID, p.State).With("state", p.State)
	}
	switch req.Kind {
	case ProxyOpAssign, ProxyOpUnassign:
		if len(req.DeviceIDs) == 0 || len(req.DeviceIDs) > MaxProxyOperationDevices {
			return nil, Errorf(CodeInvalidArgument, "%s names 1 to %d devices in deviceIds", req.Kind, MaxProxyOperationDevices).With("field", "deviceIds")
		}
		if req.Kind == ProxyOpUnassign {
			for _, d := range req.DeviceIDs {
				if !slices.Contains(p.Devices, d) {
					return nil, Errorf(CodeWrongState, "device %s is not behind proxy %s", d, p.ProxyID).With("state", "unassigned")
				}
			}
		}
	case ProxyOpRotate, ProxyOpRenew:
		if len(req.DeviceIDs) > 0 {
			return nil, Errorf(CodeInvalidArgument, "%s names no devices", req.Kind).With("field", "deviceIds")
		}
		if o, ok := a.Order(p.OrderID); req.Kind == ProxyOpRenew && (!ok || !o.CancelAtPeriodEnd) {
			return nil, Errorf(CodeWrongState, "proxy %s renews already; renew withdraws a cancellation at the period's end", p.ProxyID).
				With("state", "renewing")
		}
	default:
		return nil, Errorf(CodeInvalidArgument, "kind must be assign, unassign, rotate or renew").With("field", "kind")
	}
	return []Event{req}, nil
}

// ProxyEndpoint is where a supplier's proxy listens.
type ProxyEndpoint struct {
	Host string
	Port int
}
