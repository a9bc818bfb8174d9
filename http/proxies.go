package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerProxyRoutes mounts managed proxies (spec 4.5): products, quotes,
// orders, proxies and operations, in every mode (an order on a deployment
// without a payment provider answers checkout_unavailable). Who may call
// each is the command's to check; OAuth apps are refused by the app gate,
// which names the console's Proxies page.
func (s *Server) registerProxyRoutes(r *mux.Router) {
	r.Handle("/proxy-products", kernel.HandlerFunc(s.listProxyProducts)).Methods(http.MethodGet)
	r.Handle("/proxy-quotes", kernel.HandlerFunc(s.quoteProxy)).Methods(http.MethodPost)
	r.Handle("/proxy-orders", kernel.HandlerFunc(s.placeProxyOrder)).Methods(http.MethodPost)
	r.Handle("/proxy-orders", kernel.HandlerFunc(s.listProxyOrders)).Methods(http.MethodGet)
	r.Handle("/proxy-orders/{orderId}", kernel.HandlerFunc(s.getProxyOrder)).Methods(http.MethodGet)
	r.Handle("/proxy-orders/{orderId}/cancel", kernel.HandlerFunc(s.cancelProxyOrder)).Methods(http.MethodPost)
	r.Handle("/proxies", kernel.HandlerFunc(s.listProxies)).Methods(http.MethodGet)
	r.Handle("/proxies/{proxyId}", kernel.HandlerFunc(s.getProxy)).Methods(http.MethodGet)
	r.Handle("/proxies/{proxyId}/credentials", kernel.HandlerFunc(s.revealProxyCredentials)).Methods(http.MethodPost)
	r.Handle("/proxy-operations", kernel.HandlerFunc(s.requestProxyOperation)).Methods(http.MethodPost)
	r.Handle("/proxy-operations", kernel.HandlerFunc(s.listProxyOperations)).Methods(http.MethodGet)
	r.Handle("/proxy-operations/{operationId}", kernel.HandlerFunc(s.getProxyOperation)).Methods(http.MethodGet)
}

func (s *Server) listProxyProducts(w http.ResponseWriter, r *http.Request) error {
	l, err := s.app.Proxies.ListProxyProducts.Handle(r.Context(), proxies.ListProxyProducts{Auth: authOf(r)})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyProductList(l))
}

type proxyQuoteRequest struct {
	ProductID string `json:"productId"`
}

func (s *Server) quoteProxy(w http.ResponseWriter, r *http.Request) error {
	var req proxyQuoteRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	q, err := s.app.Proxies.QuoteProxy.Handle(r.Context(), proxies.QuoteProxy{Auth: authOf(r), ProductID: req.ProductID})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyQuote(q))
}

type proxyOrderRequest struct {
	ProductID string  `json:"productId"`
	QuoteID   *string `json:"quoteId"`
}

// idempotencyKey reads the one Idempotency-Key header ("" when none).
func idempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values(headerIdempotencyKey)
	switch len(keys) {
	case 0:
		return "", nil
	case 1:
		return keys[0], domain.CheckCheckoutKey(keys[0])
	}
	return "", domain.Errorf(domain.CodeInvalidArgument, "send at most one Idempotency-Key header").With("field", headerIdempotencyKey)
}

func (s *Server) placeProxyOrder(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req proxyOrderRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	placed, err := s.app.Proxies.PlaceProxyOrder.Handle(r.Context(), proxies.PlaceProxyOrder{Auth: authOf(r), ProductID: req.ProductID,
		QuoteID: req.QuoteID, IdempotencyKey: key, StepUp: r.Header.Get(headerStepUp)})
	if domain.Replayed(err) {
		// The first order's final refusal, answered again for its key.
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	if err != nil {
		return err
	}
	if placed.Replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOrder(placed.Order))
}

func (s *Server) listProxyOrders(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r.URL.Query(), 200)
	if err != nil {
		return err
	}
	vs, err := s.app.Proxies.ListProxyOrders.Handle(r.Context(), proxies.ListProxyOrders{Auth: authOf(r), Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOrderList(vs))
}

func (s *Server) getProxyOrder(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Proxies.GetProxyOrder.Handle(r.Context(), proxies.GetProxyOrder{Auth: authOf(r), OrderID: mux.Vars(r)["orderId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOrderView(v))
}

func (s *Server) cancelProxyOrder(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Proxies.CancelProxyOrder.Handle(r.Context(), proxies.CancelProxyOrder{Auth: authOf(r), OrderID: mux.Vars(r)["orderId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOrderView(v))
}

func (s *Server) listProxies(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r.URL.Query(), 200)
	if err != nil {
		return err
	}
	vs, err := s.app.Proxies.ListProxies.Handle(r.Context(), proxies.ListProxies{Auth: authOf(r), Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyList(vs))
}

func (s *Server) getProxy(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Proxies.GetProxy.Handle(r.Context(), proxies.GetProxy{Auth: authOf(r), ProxyID: mux.Vars(r)["proxyId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxy(v))
}

func (s *Server) revealProxyCredentials(w http.ResponseWriter, r *http.Request) error {
	c, err := s.app.Proxies.RevealProxyCredentials.Handle(r.Context(),
		proxies.RevealProxyCredentials{Auth: authOf(r), ProxyID: mux.Vars(r)["proxyId"]})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.ProxyCredentials{Username: c.Username, Password: c.Password})
}

type proxyOperationRequest struct {
	ProxyID   string   `json:"proxyId"`
	Kind      string   `json:"kind"`
	DeviceIDs []string `json:"deviceIds"`
}

func (s *Server) requestProxyOperation(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req proxyOperationRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	op, err := s.app.Proxies.RequestProxyOperation.Handle(r.Context(), proxies.RequestProxyOperation{Auth: authOf(r),
		ProxyID: req.ProxyID, Kind: req.Kind, DeviceIDs: req.DeviceIDs, IdempotencyKey: key, StepUp: r.Header.Get(headerStepUp)})
	if err != nil {
		return err
	}
	if op.Replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusAccepted, wire.NewRequestedProxyOperation(op))
}

func (s *Server) listProxyOperations(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r.URL.Query(), 200)
	if err != nil {
		return err
	}
	vs, err := s.app.Proxies.ListProxyOperations.Handle(r.Context(), proxies.ListProxyOperations{Auth: authOf(r),
		ProxyID: r.URL.Query().Get("proxyId"), Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOperationList(vs))
}

func (s *Server) getProxyOperation(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Proxies.GetProxyOperation.Handle(r.Context(),
		proxies.GetProxyOperation{Auth: authOf(r), OperationID: mux.Vars(r)["operationId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProxyOperationView(v))
}
