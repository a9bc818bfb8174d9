package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body leaseBody
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	l, err := s.app.Fleet.AcquireLease.Handle(r.Context(), commands.AcquireLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], TTLSeconds: body.TTLSeconds,
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
	l, err := s.app.Fleet.RenewLease.Handle(r.Context(), commands.RenewLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], LeaseID: body.LeaseID,
		TTLSeconds: body.TTLSeconds})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewLease(l))
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	_, err := s.app.Fleet.ReleaseLease.Handle(r.Context(), commands.ReleaseLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
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
	limit, err := intParam(q.Get("limit"), "limit")
	if err != nil {
		return err
	}
	page, err := s.app.Fleet.ListLeases.Handle(r.Context(), commands.ListLeases{Auth: a, LeaseQuery: commands.LeaseQuery{DeviceID: q.Get("deviceId"), After: q.Get("after"), Limit: limit}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewLeasePage(page))
}
