package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerBillingRoutes mounts the billing routes (spec 4.5): the
// organisation's next invoice and the payment provider's billing portal.
// They are hosted-only: a local deployment does not mount them, so they
// answer 404 not_found there as any path not served (spec 1). Who may use
// them is the application's to check (signed-in people only; the portal
// an admin); OAuth apps are refused by the app gate before them.
func (s *Server) registerBillingRoutes(r *mux.Router) {
	if s.mode != "hosted" {
		return
	}
	r.Handle("/billing/upcoming", kernel.HandlerFunc(s.getUpcomingInvoice)).Methods(http.MethodGet)
	r.Handle("/billing/portal-sessions", kernel.HandlerFunc(s.openBillingPortal)).Methods(http.MethodPost)
}

// getUpcomingInvoice answers GET /v1/billing/upcoming.
func (s *Server) getUpcomingInvoice(w http.ResponseWriter, r *http.Request) error {
	inv, err := s.app.Provisioning.GetUpcomingInvoice.Handle(r.Context(), provisioning.GetUpcomingInvoice{Auth: authOf(r)})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewUpcomingInvoice(inv))
}

// openBillingPortal answers POST /v1/billing/portal-sessions. It reads no
// body.
func (s *Server) openBillingPortal(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.app.Provisioning.OpenBillingPortal.Handle(r.Context(), provisioning.OpenBillingPortal{Auth: authOf(r)})
	if err != nil {
		return err
	}
	// The address is a single-use credential to the customer's billing.
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.BillingPortalSession{URL: ps.URL})
}
