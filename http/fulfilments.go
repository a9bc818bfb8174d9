package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerFulfilmentRoutes mounts the fulfilment routes (spec 4.5), served
// in both modes: the organisation's phones bought, their estimate history
// and renewal status, and the customer's Cancel, Return and
// cancel-renewal. Who may call is the commands' to check (reads: a
// signed-in person, or a key with orders:place; changes: a signed-in
// admin); OAuth apps are refused by the app gate before them.
func (s *Server) registerFulfilmentRoutes(r *mux.Router) {
	r.Handle("/fulfilments", kernel.HandlerFunc(s.listFulfilments)).Methods(http.MethodGet)
	r.Handle("/fulfilments/{id}/estimate-history", kernel.HandlerFunc(s.getFulfilmentEstimates)).Methods(http.MethodGet)
	r.Handle("/fulfilments/{id}/renewal-status", kernel.HandlerFunc(s.getFulfilmentRenewal)).Methods(http.MethodGet)
	r.Handle("/fulfilments/{id}/cancel", kernel.HandlerFunc(s.cancelFulfilment)).Methods(http.MethodPost)
	r.Handle("/fulfilments/{id}/return", kernel.HandlerFunc(s.returnFulfilment)).Methods(http.MethodPost)
	r.Handle("/fulfilments/{id}/cancel-renewal", kernel.HandlerFunc(s.cancelFulfilmentRenewal)).Methods(http.MethodPost)
}

// listFulfilments answers ?state=, ?limit= (1 to 200, default 50) and
// ?cursor= (the previous page's nextCursor).
func (s *Server) listFulfilments(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	query := projections.FulfilmentQuery{State: q.Get("state")}
	var err error
	if query.Limit, err = pageLimit(q, projections.MaxPageLimit); err != nil {
		return err
	}
	if raw := q.Get("cursor"); raw != "" {
		c, ok := wire.DecodeFulfilmentCursor(raw)
		if !ok {
			return badCursor("cursor", "nextCursor")
		}
		query.Before = &c
	}
	page, err := s.app.Provisioning.ListFulfilments.Handle(r.Context(), provisioning.ListFulfilments{Auth: authOf(r), FulfilmentQuery: query})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilmentPage(page))
}

func (s *Server) getFulfilmentEstimates(w http.ResponseWriter, r *http.Request) error {
	e, err := s.app.Provisioning.GetFulfilmentEstimates.Handle(r.Context(),
		provisioning.GetFulfilmentEstimates{Auth: authOf(r), FulfilmentID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilmentEstimateHistory(e))
}

func (s *Server) getFulfilmentRenewal(w http.ResponseWriter, r *http.Request) error {
	rs, err := s.app.Provisioning.GetFulfilmentRenewal.Handle(r.Context(),
		provisioning.GetFulfilmentRenewal{Auth: authOf(r), FulfilmentID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilmentRenewal(rs))
}

func (s *Server) cancelFulfilment(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Provisioning.CancelFulfilment.Handle(r.Context(),
		provisioning.CancelFulfilment{Auth: authOf(r), FulfilmentID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilment(v))
}

func (s *Server) returnFulfilment(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Provisioning.ReturnFulfilment.Handle(r.Context(),
		provisioning.ReturnFulfilment{Auth: authOf(r), FulfilmentID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilment(v))
}

func (s *Server) cancelFulfilmentRenewal(w http.ResponseWriter, r *http.Request) error {
	rs, err := s.app.Provisioning.CancelFulfilmentRenewal.Handle(r.Context(),
		provisioning.CancelFulfilmentRenewal{Auth: authOf(r), FulfilmentID: mux.Vars(r)["id"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewFulfilmentRenewal(rs))
}
