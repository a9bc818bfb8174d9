package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/projections"
)

func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body leaseBody
	if _, err := decodeOptionalJSON(r, &body); err != nil {
		return err
	}
	l, err := s.app.Commands.AcquireLease.Handle(r.Context(), commands.AcquireLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], TTLSeconds: body.TTLSeconds})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, l)
}

func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body leaseBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	l, err := s.app.Commands.RenewLease.Handle(r.Context(), commands.RenewLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"], LeaseID: body.LeaseID,
		TTLSeconds: body.TTLSeconds})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	_, err := s.app.Commands.ReleaseLease.Handle(r.Context(), commands.ReleaseLease{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		LeaseID: r.URL.Query().Get("leaseId")})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// leasePage is the answer of GET /v1/leases.
type leasePage struct {
	Leases    []projections.LeaseView `json:"leases"`
	NextAfter string                  `json:"nextAfter,omitempty"`
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), "limit")
	if err != nil {
		return err
	}
	page, err := s.app.Queries.ListLeases.Handle(r.Context(), commands.ListLeases{Auth: a, LeaseQuery: commands.LeaseQuery{DeviceID: q.Get("deviceId"), After: q.Get("after"), Limit: limit}})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, leasePage{Leases: page.Leases, NextAfter: page.NextAfter})
}
