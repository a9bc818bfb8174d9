package wire

import (
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of managed proxies (spec 4.5 names the families; the shapes
// are this deployment's, docs/decisions.md "Managed proxies"). Times are
// RFC 3339 UTC, as webhook payloads write them.

// ProxyProduct is one product of the catalog with its current quoteId.
type ProxyProduct struct {
	ProductID    string `json:"productId"`
	Name         string `json:"name"`
	Kind         string `json:"kind"`
	Country      string `json:"country"`
	Protocol     string `json:"protocol"`
	Currency     string `json:"currency"`
	MonthlyPrice int64  `json:"monthlyPrice"`
	QuoteID      string `json:"quoteId"`
}

// ProxyProductList answers GET /v1/proxy-products.
type ProxyProductList struct {
	Currency string         `json:"currency"`
	Products []ProxyProduct `json:"products"`
}

// NewProxyProductList returns l as the API shows it.
func NewProxyProductList(l proxies.ProductList) ProxyProductList {
	return ProxyProductList{Currency: l.Currency, Products: each(l.Products, func(p proxies.ProductRow) ProxyProduct {
		return ProxyProduct{ProductID: p.ID, Name: p.Name, Kind: p.Kind, Country: p.Country, Protocol: p.Protocol,
			Currency: l.Currency, MonthlyPrice: p.MonthlyPrice, QuoteID: p.QuoteID}
	})}
}

// ProxyQuote answers POST /v1/proxy-quotes.
type ProxyQuote struct {
	QuoteID string       `json:"quoteId"`
	Product ProxyProduct `json:"product"`
	// Amount is the monthly price in the smallest currency unit.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Period   string `json:"period"`
}

// NewProxyQuote returns q as the API shows it.
func NewProxyQuote(q proxies.Quote) ProxyQuote {
	p := q.Product
	return ProxyQuote{QuoteID: q.QuoteID, Amount: q.Amount, Currency: q.Currency, Period: q.Period,
		Product: ProxyProduct{ProductID: p.ID, Name: p.Name, Kind: p.Kind, Country: p.Country, Protocol: p.Protocol,
			Currency: q.Currency, MonthlyPrice: p.MonthlyPrice, QuoteID: q.QuoteID}}
}

// ProxyActor is who asked for an order or operation.
type ProxyActor struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// ProxyOrder is an order as the API shows it.
type ProxyOrder struct {
	OrderID           string     `json:"orderId"`
	ProxyID           string     `json:"proxyId"`
	ProductID         string     `json:"productId"`
	ProductName       string     `json:"productName"`
	Kind              string     `json:"kind"`
	Country           string     `json:"country"`
	Protocol          string     `json:"protocol"`
	Currency          string     `json:"currency"`
	MonthlyPrice      int64      `json:"monthlyPrice"`
	QuoteID           string     `json:"quoteId"`
	State             string     `json:"state"`
	CheckoutURL       *string    `json:"checkoutUrl"`
	ExpiresAt         *string    `json:"expiresAt"`
	CancelAtPeriodEnd bool       `json:"cancelAtPeriodEnd"`
	EndedReason       *string    `json:"endedReason"`
	CreatedBy         ProxyActor `json:"createdBy"`
	CreatedAt         string     `json:"createdAt"`
	PaidAt            *string    `json:"paidAt"`
	// Refund and Dispute are the latest the payment provider reported of
	// the order's payment; null when none.
	Refund  *ProxyOrderRefund  `json:"refund"`
	Dispute *ProxyOrderDispute `json:"dispute"`
}

// ProxyOrderRefund is the provider's refund of an order's payment: full
// (the order ended, refunded) or partial (the order stands).
type ProxyOrderRefund struct {
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amountRefunded"`
	Currency       string `json:"currency"`
	Full           bool   `json:"full"`
	RefundedAt     string `json:"refundedAt"`
}

// ProxyOrderDispute is a dispute of an order's payment: opening one ends
// the order (disputed); its closing (won or lost) is recorded.
type ProxyOrderDispute struct {
	Status     string  `json:"status"`
	Reason     *string `json:"reason"`
	Amount     int64   `json:"amount"`
	Currency   string  `json:"currency"`
	RecordedAt string  `json:"recordedAt"`
}

func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NewProxyOrderView returns a read model's order as the API shows it.
func NewProxyOrderView(v projections.ProxyOrderView) ProxyOrder {
	o := ProxyOrder{OrderID: v.OrderID, ProxyID: v.ProxyID, ProductID: v.ProductID, ProductName: v.ProductName, Kind: v.Kind,
		Country: v.Country, Protocol: v.Protocol, Currency: v.Currency, MonthlyPrice: v.MonthlyPrice, QuoteID: v.QuoteID, State: v.State,
		CancelAtPeriodEnd: v.CancelAtPeriodEnd, EndedReason: optionalString(v.EndedReason), CreatedBy: ProxyActor(v.By),
		CreatedAt: domain.FormatWebhookTime(v.CreatedAt), PaidAt: optionalTime(v.PaidAt)}
	if v.State == domain.ProxyOrderAwaitingPayment {
		o.CheckoutURL, o.ExpiresAt = optionalString(v.CheckoutURL), optionalTime(v.ExpiresAt)
	}
	if r := v.Refund; r != nil {
		o.Refund = &ProxyOrderRefund{Amount: r.Amount, AmountRefunded: r.AmountRefunded, Currency: r.Currency, Full: r.Full,
			RefundedAt: domain.FormatWebhookTime(r.At)}
	}
	if d := v.Dispute; d != nil {
		o.Dispute = &ProxyOrderDispute{Status: d.Status, Reason: optionalString(d.Reason), Amount: d.Amount, Currency: d.Currency,
			RecordedAt: domain.FormatWebhookTime(d.At)}
	}
	return o
}

// NewProxyOrder returns an order just placed as the API shows it.
func NewProxyOrder(o domain.ProxyOrder) ProxyOrder {
	v := projections.ProxyOrderView{OrderID: o.OrderID, OrgID: o.OrgID, ProxyID: o.ProxyID, ProductID: o.Product.ID,
		ProductName: o.Product.Name, Kind: o.Product.Kind, Country: o.Product.Country, Protocol: o.Product.Protocol, Currency: o.Currency,
		MonthlyPrice: o.Product.MonthlyPrice, QuoteID: o.QuoteID, State: o.State, CheckoutURL: o.CheckoutURL,
		SubscriptionID: o.SubscriptionID, CancelAtPeriodEnd: o.CancelAtPeriodEnd, EndedReason: o.EndedReason, By: o.By,
		CreatedAt: o.At, PaidAt: o.PaidAt}
	if !o.ExpiresAt.IsZero() {
		t := o.ExpiresAt
		v.ExpiresAt = &t
	}
	return NewProxyOrderView(v)
}

// ProxyOrderList answers GET /v1/proxy-orders.
type ProxyOrderList struct {
	Orders []ProxyOrder `json:"orders"`
}

// NewProxyOrderList returns views as the API lists them.
func NewProxyOrderList(vs []projections.ProxyOrderView) ProxyOrderList {
	return ProxyOrderList{Orders: each(vs, NewProxyOrderView)}
}

// ProxyEndpoint is where a proxy listens.
type ProxyEndpoint struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Proxy is an issued proxy as the API shows it (never its password).
type Proxy struct {
	ProxyID             string        `json:"proxyId"`
	OrderID             string        `json:"orderId"`
	ProductID           string        `json:"productId"`
	Kind                string        `json:"kind"`
	Country             string        `json:"country"`
	Protocol            string        `json:"protocol"`
	Endpoint            ProxyEndpoint `json:"endpoint"`
	Username            string        `json:"username"`
	State               string        `json:"state"`
	Devices             []string      `json:"devices"`
	CredentialsRevealed bool          `json:"credentialsRevealed"`
	IssuedAt            string        `json:"issuedAt"`
	RotatedAt           *string       `json:"rotatedAt"`
}

// NewProxy returns v as the API shows it.
func NewProxy(v projections.ProxyView) Proxy {
	p := Proxy{ProxyID: v.ProxyID, OrderID: v.OrderID, ProductID: v.ProductID, Kind: v.Kind, Country: v.Country, Protocol: v.Protocol,
		Endpoint: ProxyEndpoint{Host: v.Host, Port: v.Port}, Username: v.Username, State: v.State, Devices: v.Devices,
		CredentialsRevealed: v.Revealed, IssuedAt: domain.FormatWebhookTime(v.IssuedAt), RotatedAt: optionalTime(v.RotatedAt)}
	if p.Devices == nil {
		p.Devices = []string{}
	}
	return p
}

// ProxyList answers GET /v1/proxies.
type ProxyList struct {
	Proxies []Proxy `json:"proxies"`
}

// NewProxyList returns views as the API lists them.
func NewProxyList(vs []projections.ProxyView) ProxyList {
	return ProxyList{Proxies: each(vs, NewProxy)}
}

// ProxyCredentials are a proxy's credentials, shown once.
type ProxyCredentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// ProxyOperation is an operation as the API shows it; credentials appear
// only in the answer that asked for a rotation.
type ProxyOperation struct {
	OperationID string            `json:"operationId"`
	ProxyID     string            `json:"proxyId"`
	Kind        string            `json:"kind"`
	DeviceIDs   []string          `json:"deviceIds"`
	State       string            `json:"state"`
	Code        *string           `json:"code"`
	Reason      *string           `json:"reason"`
	RequestedBy ProxyActor        `json:"requestedBy"`
	RequestedAt string            `json:"requestedAt"`
	FinishedAt  *string           `json:"finishedAt"`
	Credentials *ProxyCredentials `json:"credentials,omitempty"`
}

// NewProxyOperationView returns a read model's operation as the API shows
// it.
func NewProxyOperationView(v projections.ProxyOperationView) ProxyOperation {
	o := ProxyOperation{OperationID: v.OperationID, ProxyID: v.ProxyID, Kind: v.Kind, DeviceIDs: v.DeviceIDs, State: v.State,
		Code: optionalString(v.Code), Reason: optionalString(v.Reason), RequestedBy: ProxyActor(v.By),
		RequestedAt: domain.FormatWebhookTime(v.RequestedAt), FinishedAt: optionalTime(v.FinishedAt)}
	if o.DeviceIDs == nil {
		o.DeviceIDs = []string{}
	}
	return o
}

// NewRequestedProxyOperation returns an operation just asked for.
func NewRequestedProxyOperation(r proxies.RequestedOperation) ProxyOperation {
	op := r.Operation
	o := NewProxyOperationView(projections.ProxyOperationView{OperationID: op.OperationID, OrgID: "", ProxyID: op.ProxyID, Kind: op.Kind,
		DeviceIDs: op.DeviceIDs, State: op.State, Code: op.Code, Reason: op.Reason, By: op.By, RequestedAt: op.At, FinishedAt: op.FinishedAt})
	if r.Credentials != nil {
		o.Credentials = &ProxyCredentials{Username: r.Credentials.Username, Password: r.Credentials.Password}
	}
	return o
}

// ProxyOperationList answers GET /v1/proxy-operations.
type ProxyOperationList struct {
	Operations []ProxyOperation `json:"operations"`
}

// NewProxyOperationList returns views as the API lists them.
func NewProxyOperationList(vs []projections.ProxyOperationView) ProxyOperationList {
	return ProxyOperationList{Operations: each(vs, NewProxyOperationView)}
}
