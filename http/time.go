package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/http/kernel"
	"phonefleet/internal/clock"
)

// registerTimeRoutes mounts GET /v1/time (spec 4.5): the server's clock, so
// a client can check a webhook signature's t against the time the service
// signs with, and build or read time-based cursors, without trusting its
// own clock. Any authenticated caller may read it; no scope is needed
// (OAuth apps are not on spec 5.2's list and answer permission_denied).
func (s *Server) registerTimeRoutes(r *mux.Router) {
	r.Handle("/time", kernel.HandlerFunc(s.getTime)).Methods(http.MethodGet)
}

// serverTime is the answer of GET /v1/time.
type serverTime struct {
	// Time is the server's clock in UTC, RFC 3339 with microseconds (the
	// precision the store keeps and cursors carry).
	Time string `json:"time"`
	// UnixSeconds is the same instant in whole seconds, the unit of a
	// webhook signature's t.
	UnixSeconds int64 `json:"unixSeconds"`
}

func (s *Server) getTime(w http.ResponseWriter, r *http.Request) error {
	now := clock.Now().UTC()
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, serverTime{Time: now.Format("2006-01-02T15:04:05.000000Z07:00"), UnixSeconds: now.Unix()})
}
