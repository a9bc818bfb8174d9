package domain

import "time"

// proxyEvents are the events of managed proxies: an organisation's proxy
// orders, the proxies they issue and the operations on them, in one stream
// per organisation (ProxyStream), so an order's Idempotency-Key, a proxy's
// assignments and its operations are decided against one consistent
// state.
var proxyEvents = []EventDef{
	Def[ProxyOrderStarted](1, nil),
	Def[ProxyOrderOpened](1, nil),
	Def[ProxyOrderFailed](1, nil),
	Def[ProxyOrderPaid](1, nil),
	Def[ProxyIssued](1, nil),
	Def[ProxyOrderCancelScheduled](1, nil),
	Def[ProxyOrderEnded](1, nil),
	Def[ProxyOperationRequested](1, nil),
	Def[ProxyOperationFinished](1, nil),
	Def[ProxyAssigned](1, nil),
	Def[ProxyUnassigned](1, nil),
	Def[ProxyCredentialsRotated](1, nil),
	Def[ProxyCredentialsRevealed](1, nil),
	Def[ProxyOrderRenewed](1, nil),
	Def[ProxyOrderRefunded](1, nil),
	Def[ProxyOrderDisputed](1, nil),
}

// ProxyStream is the stream of an organisation's managed proxies.
func ProxyStream(orgID string) string { return "proxies-" + orgID }

// ProxyOrderStarted records an order for one proxy of a product, priced
// as quoted; its payment page is opened next (ProxyOrderOpened). ProxyID
// is the id the proxy will have once paid.
type ProxyOrderStarted struct {
	OrgID          string       `json:"orgId"`
	OrderID        string       `json:"orderId"`
	ProxyID        string       `json:"proxyId"`
	Product        ProxyProduct `json:"product"`
	Currency       string       `json:"currency"`
	QuoteID        string       `json:"quoteId"`
	IdempotencyKey string       `json:"idempotencyKey,omitempty"`
	RequestDigest  string       `json:"requestDigest"`
	By             Actor        `json:"by"`
	At             time.Time    `json:"at"`
	// Claim is the order's attempt claim, held by the process running it
	// (AttemptClaim); empty on orders recorded before claims were taken.
	Claim string `json:"claim,omitempty"`
}

// EventName implements Event.
func (ProxyOrderStarted) EventName() string { return "proxy.order_started" }

// ProxyOrderOpened records the order's hosted payment page.
type ProxyOrderOpened struct {
	OrderID     string    `json:"orderId"`
	SessionID   string    `json:"sessionId"`
	CheckoutURL string    `json:"checkoutUrl"`
	CustomerID  string    `json:"customerId,omitempty"`
	ExpiresAt   time.Time `json:"expiresAt"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderOpened) EventName() string { return "proxy.order_opened" }

// ProxyOrderFailed records that an order made no payable page, or that its
// page expired unpaid. Final (a refusal that is not retryable) keeps its
// Idempotency-Key: the refusal is the key's answer for the key's window,
// as checkout's (CheckoutFailed.Final). Otherwise the key is free again.
type ProxyOrderFailed struct {
	OrderID string    `json:"orderId"`
	Code    string    `json:"code"`
	Message string    `json:"message"`
	Final   bool      `json:"final,omitempty"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderFailed) EventName() string { return "proxy.order_failed" }

// ProxyOrderPaid records the provider's verified payment of an order (its
// signed webhook event).
type ProxyOrderPaid struct {
	OrderID         string    `json:"orderId"`
	SubscriptionID  string    `json:"subscriptionId,omitempty"`
	ProviderEventID string    `json:"providerEventId"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderPaid) EventName() string { return "proxy.order_paid" }

// ProxyIssued records a proxy the supplier issued for a paid order: its
// endpoint and credentials (the password sealed under the server key, as
// webhook secrets are; shown in clear once, in the answer that issued it).
type ProxyIssued struct {
	ProxyID        string    `json:"proxyId"`
	OrderID        string    `json:"orderId"`
	ProductID      string    `json:"productId"`
	Kind           string    `json:"kind"`
	Country        string    `json:"country"`
	Protocol       string    `json:"protocol"`
	Host           string    `json:"host"`
	Port           int       `json:"port"`
	Username       string    `json:"username"`
	SealedPassword []byte    `json:"sealedPassword"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyIssued) EventName() string { return "proxy.issued" }

// ProxyOrderCancelScheduled records that an order's subscription stops at
// the end of the period already paid; the proxy serves until then.
type ProxyOrderCancelScheduled struct {
	OrderID string    `json:"orderId"`
	By      Actor     `json:"by"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderCancelScheduled) EventName() string { return "proxy.order_cancel_scheduled" }

// ProxyOrderEnded records that a paid order ended (its subscription ended
// at the provider); its proxy is revoked and refuses its credentials.
type ProxyOrderEnded struct {
	OrderID string    `json:"orderId"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderEnded) EventName() string { return "proxy.order_ended" }

// ProxyOperationRequested records an operation on a proxy, performed later
// by the proxy-operations worker. A rotation carries its new credentials
// (sealed), made when it was asked for so its answer can show them once.
type ProxyOperationRequested struct {
	OperationID    string    `json:"operationId"`
	ProxyID        string    `json:"proxyId"`
	Kind           string    `json:"kind"`
	DeviceIDs      []string  `json:"deviceIds,omitempty"`
	Username       string    `json:"username,omitempty"`
	SealedPassword []byte    `json:"sealedPassword,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	RequestDigest  string    `json:"requestDigest"`
	By             Actor     `json:"by"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOperationRequested) EventName() string { return "proxy.operation_requested" }

// ProxyOperationFinished records an operation's outcome: succeeded, or
// failed with an error code and a reason.
type ProxyOperationFinished struct {
	OperationID string    `json:"operationId"`
	State       string    `json:"state"`
	Code        string    `json:"code,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOperationFinished) EventName() string { return "proxy.operation_finished" }

// ProxyAssigned records that a device was put behind a proxy (its network
// setting applied).
type ProxyAssigned struct {
	ProxyID     string    `json:"proxyId"`
	DeviceID    string    `json:"deviceId"`
	OperationID string    `json:"operationId"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyAssigned) EventName() string { return "proxy.assigned" }

// ProxyUnassigned records that a device was taken off a proxy (direct
// again).
type ProxyUnassigned struct {
	ProxyID     string    `json:"proxyId"`
	DeviceID    string    `json:"deviceId"`
	OperationID string    `json:"operationId"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyUnassigned) EventName() string { return "proxy.unassigned" }

// ProxyCredentialsRotated records a proxy's new credentials: the old ones
// are refused from then on.
type ProxyCredentialsRotated struct {
	ProxyID        string    `json:"proxyId"`
	Username       string    `json:"username"`
	SealedPassword []byte    `json:"sealedPassword"`
	OperationID    string    `json:"operationId"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyCredentialsRotated) EventName() string { return "proxy.credentials_rotated" }

// ProxyCredentialsRevealed records that an issued proxy's password was
// shown, its one showing: later reads never show it (a rotation shows the
// new one, once, in its answer).
type ProxyCredentialsRevealed struct {
	ProxyID string    `json:"proxyId"`
	By      Actor     `json:"by"`
	At      time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyCredentialsRevealed) EventName() string { return "proxy.credentials_revealed" }

// ProxyOrderRenewed records that a cancellation scheduled at the period's
// end was withdrawn at the provider: the order renews again.
type ProxyOrderRenewed struct {
	OrderID     string    `json:"orderId"`
	OperationID string    `json:"operationId"`
	At          time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderRenewed) EventName() string { return "proxy.order_renewed" }

// ProxyOrderRefunded records the provider's refund of a payment of a paid
// order (charge.refunded): AmountRefunded of the charge's Amount so far.
// Full, the whole charge refunded, also ends the order (ProxyOrderEnded
// refunded, in the same unit); a partial refund leaves it standing.
type ProxyOrderRefunded struct {
	OrderID         string    `json:"orderId"`
	ChargeID        string    `json:"chargeId"`
	Amount          int64     `json:"amount"`
	AmountRefunded  int64     `json:"amountRefunded"`
	Currency        string    `json:"currency"`
	Full            bool      `json:"full"`
	ProviderEventID string    `json:"providerEventId"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderRefunded) EventName() string { return "proxy.order_refunded" }

// ProxyOrderDisputed records a dispute of a payment of a paid order: its
// opening (charge.dispute.created, which also ends the order: disputed)
// and its closing (charge.dispute.closed: won or lost, which changes
// nothing else; an ended order stays ended).
type ProxyOrderDisputed struct {
	OrderID         string    `json:"orderId"`
	DisputeID       string    `json:"disputeId"`
	ChargeID        string    `json:"chargeId"`
	Status          string    `json:"status"`
	Reason          string    `json:"reason,omitempty"`
	Amount          int64     `json:"amount"`
	Currency        string    `json:"currency"`
	ProviderEventID string    `json:"providerEventId"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (ProxyOrderDisputed) EventName() string { return "proxy.order_disputed" }
