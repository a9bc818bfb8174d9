package provisioning

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// GetPriceList reads the price list with live inventory (GET /v1/skus).
type GetPriceList struct {
	Auth domain.Auth
}

// PriceList is the deployment's price list: every row (a sku and billing
// pair it prices), in sku then billing order.
type PriceList struct {
	// Currency is the ISO 4217 code, lower case, of every amount.
	Currency string
	// Default is what a checkout without a body buys; nil when none.
	Default *domain.CatalogChoice
	Rows    []PriceListRow
}

// PriceListRow is one row of the price list.
type PriceListRow struct {
	Sku, Billing, Name string
	// Amount is the price of one unit bought without a model, in the
	// smallest currency unit; nil when the row needs a model or its price
	// is unavailable now.
	Amount *int64
	// QuoteID is the quote of Amount (empty without one).
	QuoteID       string
	MaxQuantity   int
	Backorderable bool
	// ShipsNow reports whether a purchase on the row is delivered at once:
	// for a row bought without a model, a unit of the sku is free; for a
	// row that needs a model, one of its models ships now.
	ShipsNow bool
	// NeedsModel reports whether a purchase on the row must name a model.
	NeedsModel bool
	Models     []PriceListModel
}

// PriceListModel is a model as listed on a row.
type PriceListModel struct {
	ID, Name string
	// Listed is false while the supplier listing has not succeeded; such
	// a model cannot be bought yet.
	Listed bool
	// Amount is the model's price on the row; nil while unavailable.
	Amount *int64
	// QuoteID is the quote a checkout of the model must send (empty
	// without a price).
	QuoteID string
	// MaxQuantity is how many one purchase on this row may hold.
	MaxQuantity   int
	Backorderable bool
	// ShipsNow: a unit is free in the default region (or, for a model
	// without regions, of the model).
	ShipsNow      bool
	DefaultRegion string
	Regions       []PriceListRegion
}

// PriceListRegion is a region a model can be placed in.
type PriceListRegion struct {
	Code          string
	ShipsNow      bool
	Backorderable bool
}

// GetPriceListHandler handles GetPriceList.
type GetPriceListHandler struct{ *Provisioning }

// Handle answers GetPriceList for any credential of the
// organisation (OAuth apps included, spec 5.2). Every amount and quote is
// the catalog's; shipsNow is the catalog's capacity less the live
// fulfilments of each slot. When the inventory cannot be read, 503
// admission_unavailable (retryable).
func (p GetPriceListHandler) Handle(ctx context.Context, q GetPriceList) (PriceList, error) {
	if q.Auth.OrgID == "" {
		return PriceList{}, domain.Errorf(domain.CodePermissionDenied, "the price list is read by a credential of an organisation")
	}
	inUse, err := projections.UnitsInUse(ctx, p.pool)
	if err != nil {
		return PriceList{}, domain.Errorf(domain.CodeAdmissionUnavailable, "the inventory cannot be read now").WithRetryable(true).Wrap(err)
	}
	cat := p.cfg.Catalog
	out := PriceList{Currency: cat.Currency, Default: cat.Default, Rows: []PriceListRow{}}
	for _, row := range cat.Rows() {
		r := PriceListRow{Sku: row.Sku, Billing: row.Billing, Name: row.Name, Amount: row.Amount,
			MaxQuantity: row.MaxQuantity, Backorderable: row.Backorderable, NeedsModel: row.NeedsModel(), Models: []PriceListModel{}}
		if row.Amount != nil {
			r.QuoteID = domain.QuoteID(cat.Currency, row.Sku, row.Billing, "", *row.Amount)
			free, _, _ := cat.Free(row.Sku, "", "", inUse)
			r.ShipsNow = free > 0
		}
		for _, m := range row.Models {
			lm := PriceListModel{ID: m.ID, Name: m.Name, Listed: m.Listed, Amount: m.Amount,
				MaxQuantity: row.QuantityLimit(m), Backorderable: m.Backorderable, DefaultRegion: m.DefaultRegion,
				Regions: []PriceListRegion{}}
			if m.Amount != nil {
				lm.QuoteID = domain.QuoteID(cat.Currency, row.Sku, row.Billing, m.ID, *m.Amount)
			}
			if len(m.Regions) == 0 {
				free, _, _ := cat.Free(row.Sku, m.ID, "", inUse)
				lm.ShipsNow = free > 0
			}
			for _, g := range m.Regions {
				free, backorderable, _ := cat.Free(row.Sku, m.ID, g.Code, inUse)
				lm.Regions = append(lm.Regions, PriceListRegion{Code: g.Code, ShipsNow: free > 0, Backorderable: backorderable})
				if g.Code == m.DefaultRegion {
					lm.ShipsNow = free > 0
				}
			}
			if r.NeedsModel && m.Listed && m.Amount != nil && lm.ShipsNow {
				r.ShipsNow = true
			}
			r.Models = append(r.Models, lm)
		}
		out.Rows = append(out.Rows, r)
	}
	return out, nil
}
