package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body leaseBody
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	l, err := s.app.Fleet.AcquireLease.Handle(r.Context(), fleet.AcquireLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], TTLSeconds: body.TTLSeconds,
		ResetOnRelease: body.ResetOnRelease})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewLease(l))
}

func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body leaseBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	l, err := s.app.Fleet.RenewLease.Handle(r.Context(), fleet.RenewLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], LeaseID: body.LeaseID,
		TTLSeconds: body.TTLSeconds})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewLease(l))
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	_, err := s.app.Fleet.ReleaseLease.Handle(r.Context(), fleet.ReleaseLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		LeaseID: r.URL.Query().Get("leaseId")})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	q := r.URL.Query()
	limit, err := pageLimit(q, projections.MaxPageLimit)
	if err != nil {
		return err
	}
	after, err := idCursor(q, "after", "nextAfter", domain.PrefixLease)
	if err != nil {
		return err
	}
	page, err := s.app.Fleet.ListLeases.Handle(r.Context(), fleet.ListLeases{Auth: a, LeaseQuery: fleet.LeaseQuery{DeviceID: q.Get("deviceId"), After: after, Limit: limit}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewLeasePage(page))
}
