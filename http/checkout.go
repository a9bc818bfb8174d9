package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// Headers of the checkout route (spec 4.1, 9.2).
const (
	headerIdempotencyKey     = "Idempotency-Key"
	headerIdempotentReplayed = "Idempotent-Replayed"
	headerStepUp             = "x-service-step-up"
)

// registerCheckoutRoutes mounts the price list (GET /v1/skus) and
// admission (GET /v1/admission) in every mode, and POST
// /v1/checkout-sessions on a hosted deployment only: a local one does not
// mount it, so it answers not_found like any path it does not serve (spec
// 1, 4.1). Who may call each is the handler's to check. An OAuth app may
// read the price list and start a prepaid checkout (both on appRoutes).
func (s *Server) registerCheckoutRoutes(r *mux.Router) {
	r.Handle("/skus", kernel.HandlerFunc(s.getPriceList)).Methods(http.MethodGet)
	r.Handle("/admission", kernel.HandlerFunc(s.getAdmission)).Methods(http.MethodGet)
	if s.mode == "hosted" {
		r.Handle("/checkout-sessions", kernel.HandlerFunc(s.startCheckout)).Methods(http.MethodPost)
	}
}

func (s *Server) getPriceList(w http.ResponseWriter, r *http.Request) error {
	l, err := s.app.Provisioning.GetPriceList.Handle(r.Context(), provisioning.GetPriceList{Auth: authOf(r)})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewPriceList(l))
}

func (s *Server) getAdmission(w http.ResponseWriter, r *http.Request) error {
	a, err := s.app.Provisioning.GetAdmission.Handle(r.Context(), provisioning.GetAdmission{Auth: authOf(r), CheckoutServed: s.mode == "hosted"})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAdmission(a))
}

// startCheckout reads the optional PurchaseChoice body (unreadable JSON
// is refused here, 400; every other check is the command's, in the order
// it documents) and the Idempotency-Key and x-service-step-up headers.
func (s *Server) startCheckout(w http.ResponseWriter, r *http.Request) error {
	body, err := kernel.ReadBody(r)
	if err != nil {
		return err
	}
	req, err := domain.ReadPurchaseRequest(body)
	if err != nil {
		return err
	}
	key, err := idempotencyKeyOf(r)
	if err != nil {
		return err
	}
	cmd := provisioning.StartCheckout{Auth: authOf(r), Request: req, StepUp: r.Header.Get(headerStepUp), IdempotencyKey: key}
	a, err := s.app.Provisioning.StartCheckout.Handle(r.Context(), cmd)
	if domain.Replayed(err) {
		// The first attempt's refusal, answered again for its key.
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	if err != nil {
		return err
	}
	if a.Replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCheckoutSession(a))
}

// idempotencyKeyOf reads the Idempotency-Key header of checkout and of a
// pool take: "" when none was sent; more than one, or one that is not 1 to
// 255 printable ASCII characters, is 400 invalid_argument.
func idempotencyKeyOf(r *http.Request) (string, error) {
	keys := r.Header.Values(headerIdempotencyKey)
	switch {
	case len(keys) > 1:
		return "", domain.Errorf(domain.CodeInvalidArgument, "send at most one Idempotency-Key header").With("field", headerIdempotencyKey)
	case len(keys) == 0:
		return "", nil
	}
	if err := domain.CheckCheckoutKey(keys[0]); err != nil {
		return "", err
	}
	return keys[0], nil
}
