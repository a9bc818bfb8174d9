package wire

import (
	"slices"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
)

// The shapes of the price list (GET /v1/skus), admission (GET
// /v1/admission) and a started checkout (POST /v1/checkout-sessions, spec
// 2.2). Amounts are integers in the smallest currency unit of the list's
// currency; times are written by domain.FormatWebhookTime.

// CheckoutSession is a purchase started (spec 2.2): exactly these
// members, no other. quantity and fulfilmentIds are absent for
// pay-as-you-go, which buys no phone.
type CheckoutSession struct {
	CheckoutURL   string   `json:"checkoutUrl"`
	OrderID       string   `json:"orderId"`
	Quantity      int      `json:"quantity,omitempty"`
	FulfilmentIDs []string `json:"fulfilmentIds,omitempty"`
	ExpiresAt     string   `json:"expiresAt"`
}

// NewCheckoutSession returns a as the API shows it.
func NewCheckoutSession(a provisioning.CheckoutAnswer) CheckoutSession {
	return CheckoutSession{CheckoutURL: a.CheckoutURL, OrderID: a.OrderID, Quantity: a.Quantity,
		FulfilmentIDs: slices.Clone(a.FulfilmentIDs), ExpiresAt: domain.FormatWebhookTime(a.ExpiresAt)}
}

// PriceList is the price list: every row the deployment prices.
type PriceList struct {
	Currency string `json:"currency"`
	// Default is what a checkout without a body buys; null when none.
	Default *PriceChoice `json:"default"`
	Skus    []PriceRow   `json:"skus"`
}

// PriceChoice names a sku and billing pair.
type PriceChoice struct {
	Sku     string `json:"sku"`
	Billing string `json:"billing"`
}

// PriceRow is one row: a sku bought with one billing mode.
type PriceRow struct {
	Sku      string `json:"sku"`
	Billing  string `json:"billing"`
	Name     string `json:"name"`
	Currency string `json:"currency"`
	// UnitAmount and QuoteID are present when the row is bought without
	// a model.
	UnitAmount    *int64       `json:"unitAmount,omitempty"`
	QuoteID       string       `json:"quoteId,omitempty"`
	MaxQuantity   int          `json:"maxQuantity"`
	Backorderable bool         `json:"backorderable"`
	ShipsNow      bool         `json:"shipsNow"`
	ModelRequired bool         `json:"modelRequired"`
	Models        []PriceModel `json:"models"`
}

// PriceModel is a model listed on a row.
type PriceModel struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Listed bool   `json:"listed"`
	// UnitAmount and QuoteID are absent while the price is unavailable.
	UnitAmount    *int64        `json:"unitAmount,omitempty"`
	QuoteID       string        `json:"quoteId,omitempty"`
	MaxQuantity   int           `json:"maxQuantity"`
	Backorderable bool          `json:"backorderable"`
	ShipsNow      bool          `json:"shipsNow"`
	DefaultRegion *string       `json:"defaultRegion"`
	Regions       []PriceRegion `json:"regions"`
}

// PriceRegion is a region a model can be placed in.
type PriceRegion struct {
	Code          string `json:"code"`
	ShipsNow      bool   `json:"shipsNow"`
	Backorderable bool   `json:"backorderable"`
}

// NewPriceList returns l as the API shows it.
func NewPriceList(l provisioning.PriceList) PriceList {
	out := PriceList{Currency: l.Currency, Skus: each(l.Rows, func(r provisioning.PriceListRow) PriceRow {
		return PriceRow{Sku: r.Sku, Billing: r.Billing, Name: r.Name, Currency: l.Currency, UnitAmount: r.Amount,
			QuoteID: r.QuoteID, MaxQuantity: r.MaxQuantity, Backorderable: r.Backorderable, ShipsNow: r.ShipsNow,
			ModelRequired: r.NeedsModel, Models: each(r.Models, newPriceModel)}
	})}
	if l.Default != nil {
		out.Default = &PriceChoice{Sku: l.Default.Sku, Billing: l.Default.Billing}
	}
	return out
}

func newPriceModel(m provisioning.PriceListModel) PriceModel {
	out := PriceModel{ID: m.ID, Name: m.Name, Listed: m.Listed, UnitAmount: m.Amount, QuoteID: m.QuoteID,
		MaxQuantity: m.MaxQuantity, Backorderable: m.Backorderable, ShipsNow: m.ShipsNow,
		Regions: each(m.Regions, func(g provisioning.PriceListRegion) PriceRegion {
			return PriceRegion{Code: g.Code, ShipsNow: g.ShipsNow, Backorderable: g.Backorderable}
		})}
	if m.DefaultRegion != "" {
		out.DefaultRegion = &m.DefaultRegion
	}
	return out
}

// Admission is an organisation's onboarding and purchase status.
type Admission struct {
	Provisioned       bool                 `json:"provisioned"`
	PaygAccess        bool                 `json:"paygAccess"`
	OpenCheckout      *AdmissionCheckout   `json:"openCheckout"`
	Fulfilments       AdmissionFulfilments `json:"fulfilments"`
	CheckoutAvailable bool                 `json:"checkoutAvailable"`
	// CheckoutBlocked says why checkoutAvailable is false; null when it
	// is true.
	CheckoutBlocked *string `json:"checkoutBlocked"`
}

// AdmissionCheckout is the checkout attempt whose page is payable now.
type AdmissionCheckout struct {
	OrderID   string `json:"orderId"`
	ExpiresAt string `json:"expiresAt"`
}

// AdmissionFulfilments counts the organisation's phones by state.
type AdmissionFulfilments struct {
	Provisioned          int `json:"provisioned"`
	AwaitingProvisioning int `json:"awaitingProvisioning"`
	Cancelled            int `json:"cancelled"`
}

// NewAdmission returns a as the API shows it.
func NewAdmission(a provisioning.Admission) Admission {
	out := Admission{Provisioned: a.Provisioned, PaygAccess: a.PaygAccess, CheckoutAvailable: a.CheckoutAvailable,
		Fulfilments: AdmissionFulfilments{Provisioned: a.Fulfilments.Provisioned,
			AwaitingProvisioning: a.Fulfilments.AwaitingProvisioning, Cancelled: a.Fulfilments.Cancelled}}
	if a.OpenCheckout != nil {
		out.OpenCheckout = &AdmissionCheckout{OrderID: a.OpenCheckout.OrderID, ExpiresAt: domain.FormatWebhookTime(a.OpenCheckout.ExpiresAt)}
	}
	if a.CheckoutBlocked != "" {
		out.CheckoutBlocked = &a.CheckoutBlocked
	}
	return out
}
