package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerUsageRoutes mounts GET /v1/usage (spec 4.5): the organisation's
// device time in a billing period. Who may read it is the query's to
// check; OAuth apps are refused by the app gate before it.
func (s *Server) registerUsageRoutes(r *mux.Router) {
	r.Handle("/usage", kernel.HandlerFunc(s.getUsage)).Methods(http.MethodGet)
}

// getUsage answers ?period=YYYY-MM-DD (absent: the current period) and
// ?deviceId= (absent: every device the caller can see).
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	rep, err := s.app.Provisioning.GetUsage.Handle(r.Context(), provisioning.GetUsage{Auth: authOf(r), Period: q.Get("period"),
		DeviceID: q.Get("deviceId")})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewUsage(rep))
}
