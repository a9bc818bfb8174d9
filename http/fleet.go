package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerFleetRoutes mounts the routes of devices, leases, actions, frames and receipts on the /v1 router.
func (s *Server) registerFleetRoutes(r *mux.Router) {
	r.Handle("/devices", kernel.HandlerFunc(s.listDevices)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}", kernel.HandlerFunc(s.getDevice)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}", kernel.HandlerFunc(s.renameDevice)).Methods(http.MethodPatch)
	r.Handle("/devices/{deviceId}/driving", kernel.HandlerFunc(s.getDriving)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}/wake", s.powerDevice(true)).Methods(http.MethodPost)
	r.Handle("/devices/{deviceId}/stop", s.powerDevice(false)).Methods(http.MethodPost)
	r.Handle("/devices/{deviceId}/screenshot", kernel.HandlerFunc(s.getScreenshot)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}/snapshot", kernel.HandlerFunc(s.getUISnapshot)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}/lease", kernel.HandlerFunc(s.acquireLease)).Methods(http.MethodPost)
	r.Handle("/devices/{deviceId}/lease", kernel.HandlerFunc(s.renewLease)).Methods(http.MethodPatch)
	r.Handle("/devices/{deviceId}/lease", kernel.HandlerFunc(s.releaseLease)).Methods(http.MethodDelete)
	r.Handle("/devices/{deviceId}/actions", kernel.HandlerFunc(s.performAction)).Methods(http.MethodPost)
	r.Handle("/leases", kernel.HandlerFunc(s.listLeases)).Methods(http.MethodGet)
	r.Handle("/frames/{frameId}", kernel.HandlerFunc(s.getFrame)).Methods(http.MethodGet)
	r.Handle("/receipts", kernel.HandlerFunc(s.listReceipts)).Methods(http.MethodGet)
	// An idempotency key may hold any printable character, "/" included
	// (the run executor's keys are run_…/step-1/0): a client sends it
	// percent-encoded and the router matches the decoded path, so the key
	// is the rest of the path (the export, registered before, keeps its
	// name).
	r.Handle("/receipts/{idempotencyKey:.+}/reviewed", kernel.HandlerFunc(s.reviewReceipt)).Methods(http.MethodPost)
	r.Handle("/receipts/{idempotencyKey:.+}", kernel.HandlerFunc(s.getReceipt)).Methods(http.MethodGet)
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	q := r.URL.Query()
	dq := fleet.DeviceQuery{Status: q.Get("status"), Backend: q.Get("backend")}
	var err error
	if dq.Limit, err = pageLimit(q, projections.MaxPageLimit); err != nil {
		return err
	}
	if dq.After, err = idCursor(q, "after", "nextAfter", domain.PrefixDevice); err != nil {
		return err
	}
	if v := q.Get("leased"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return domain.Errorf(domain.CodeInvalidArgument, "leased must be true or false")
		}
		dq.Leased = &b
	}
	page, err := s.app.Fleet.ListDevices.Handle(r.Context(), fleet.ListDevices{Auth: a, DeviceQuery: dq})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewDevicePage(page))
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	d, err := s.app.Fleet.GetDevice.Handle(r.Context(), fleet.GetDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"]})
	if err != nil {
		return err
	}
	out := wire.NewDevice(d)
	if s.app.Proxies.DeviceProxy.Served() {
		if out.ProxyID, err = s.app.Proxies.DeviceProxy.Handle(r.Context(), proxies.DeviceProxy{Auth: a, DeviceID: d.DeviceID}); err != nil {
			return err
		}
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}

// renameRequest is the body of PATCH /v1/devices/{deviceId}.
type renameRequest struct {
	Name *string `json:"name"`
}

func (s *Server) renameDevice(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body renameRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	if body.Name == nil {
		return domain.Errorf(domain.CodeInvalidArgument, "name is required")
	}
	d, err := s.app.Fleet.RenameDevice.Handle(r.Context(), fleet.RenameDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"], Name: *body.Name})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewDevice(d))
}

func (s *Server) getDriving(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	d, err := s.app.Fleet.GetDriving.Handle(r.Context(), fleet.GetDriving{Auth: a, DeviceID: mux.Vars(r)["deviceId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewDriving(d))
}

// leaseBody carries a lease id where a route takes one in its body.
type leaseBody struct {
	LeaseID    string `json:"leaseId"`
	TTLSeconds int    `json:"ttlSeconds"`
	// ResetOnRelease (acquire only) asks for a clean hand-over.
	ResetOnRelease bool `json:"resetOnRelease"`
}

func (s *Server) powerDevice(wake bool) kernel.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		a := authOf(r)
		var body leaseBody
		if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
			return err
		}
		d, err := s.app.Fleet.PowerDevice.Handle(r.Context(), fleet.PowerDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"], Wake: wake,
			LeaseID: body.LeaseID})
		if err != nil {
			return err
		}
		return kernel.WriteJSON(w, http.StatusOK, wire.NewDevice(d))
	}
}

// intParam reads an optional integer query parameter (0 when absent).
func intParam(v, name string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, domain.Errorf(domain.CodeInvalidArgument, "%s must be an integer", name)
	}
	return n, nil
}

// cursorTime formats a receipt cursor: RFC 3339 in UTC with exactly
// microseconds, the precision the store keeps, so it round-trips exactly.
func cursorTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }
