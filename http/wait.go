package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/http/kernel"
)

// registerWaitRoutes mounts the wait route (an agent waits for an element
// or a still screen). Waiting is observing again and again, which spec 5.2
// lets an OAuth app do (screenshots, UI snapshots), so the route is open
// to apps as the wait_for tool is.
func (s *Server) registerWaitRoutes(r *mux.Router) {
	s.allowApps(r.Handle("/devices/{deviceId}/wait", kernel.HandlerFunc(s.waitFor)).Methods(http.MethodPost))
}

// waitRequest is the body of POST /v1/devices/{deviceId}/wait.
type waitRequest struct {
	Until      string `json:"until"`
	Text       string `json:"text"`
	ResourceID string `json:"resourceId"`
	StableMs   int    `json:"stableMs"`
	TimeoutMs  int    `json:"timeoutMs"`
}

func (s *Server) waitFor(w http.ResponseWriter, r *http.Request) error {
	var body waitRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	res, err := s.app.Fleet.WaitFor.Handle(r.Context(), fleet.WaitFor{Auth: authOf(r), DeviceID: mux.Vars(r)["deviceId"],
		WaitCondition: fleet.WaitCondition{Until: body.Until, Text: body.Text, ResourceID: body.ResourceID,
			StableMs: body.StableMs, TimeoutMs: body.TimeoutMs}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, res)
}
