package proxies

import (
	"context"

	"phonefleet/domain"
)

// ListProxyProducts answers the proxy products of the deployment's catalog
// (GET /v1/proxy-products).
type ListProxyProducts struct {
	Auth domain.Auth
}

// ProductRow is one product with the quoteId of its current price.
type ProductRow struct {
	domain.ProxyProduct
	QuoteID string
}

// ProductList is the catalog's proxy products.
type ProductList struct {
	Currency string
	Products []ProductRow
}

// ListProxyProductsHandler handles ListProxyProducts.
type ListProxyProductsHandler struct{ *Proxies }

// Handle answers any member of an organisation.
func (h ListProxyProductsHandler) Handle(_ context.Context, q ListProxyProducts) (ProductList, error) {
	if err := mayRead(q.Auth); err != nil {
		return ProductList{}, err
	}
	cat := h.cfg.Catalog
	out := ProductList{Currency: cat.Currency, Products: []ProductRow{}}
	for _, p := range cat.Proxies {
		out.Products = append(out.Products, ProductRow{ProxyProduct: p, QuoteID: domain.ProxyQuoteID(cat.Currency, p)})
	}
	return out, nil
}

// QuoteProxy prices one proxy of a product (POST /v1/proxy-quotes).
type QuoteProxy struct {
	Auth      domain.Auth
	ProductID string
}

// Quote is a priced proxy: the quoteId an order carries, checked against
// the price at order time (quote_changed when it moved).
type Quote struct {
	QuoteID  string
	Product  domain.ProxyProduct
	Currency string
	// Amount is the monthly price, in the smallest currency unit.
	Amount int64
	// Period is the billing period ("month").
	Period string
}

// QuoteProxyHandler handles QuoteProxy.
type QuoteProxyHandler struct{ *Proxies }

// Handle answers any member; an unknown product is invalid_argument.
func (h QuoteProxyHandler) Handle(_ context.Context, q QuoteProxy) (Quote, error) {
	if err := mayRead(q.Auth); err != nil {
		return Quote{}, err
	}
	return h.quote(q.ProductID)
}

func (p *Proxies) quote(productID string) (Quote, error) {
	cat := p.cfg.Catalog
	prod, ok := cat.ProxyProduct(productID)
	if !ok {
		return Quote{}, domain.Errorf(domain.CodeInvalidArgument, "productId names no proxy product of this deployment (GET /v1/proxy-products lists them)").
			With("field", "productId")
	}
	return Quote{QuoteID: domain.ProxyQuoteID(cat.Currency, prod), Product: prod, Currency: cat.Currency, Amount: prod.MonthlyPrice,
		Period: domain.ProxyBillingPeriod}, nil
}
