package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/http/kernel"
)

// actionRequest is the body of POST /v1/devices/{deviceId}/actions.
type actionRequest struct {
	Action         string          `json:"action"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotencyKey"`
	// RetryIfUnchanged: see fleet.PerformAction.
	RetryIfUnchanged bool   `json:"retryIfUnchanged"`
	LeaseID          string `json:"leaseId"`
	ObservedFrame    string `json:"observedFrame"`
	AgentRunID       string `json:"agentRunId"`
}

// performAction answers the action's receipt once it committed (200),
// with Idempotent-Replayed: true when it is the recorded outcome of an
// earlier request with the same key; a failed action answers its failure's
// error, an action whose outcome is unknown action_outcome_unknown.
func (s *Server) performAction(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body actionRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	out, err := s.app.Fleet.PerformAction.Handle(r.Context(), fleet.PerformAction{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		Action: body.Action, Arguments: body.Arguments, IdempotencyKey: body.IdempotencyKey, RetryIfUnchanged: body.RetryIfUnchanged, LeaseID: body.LeaseID,
		ObservedFrame: body.ObservedFrame, AgentRunID: body.AgentRunID})
	if err != nil {
		return err
	}
	if out.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return kernel.WriteJSON(w, http.StatusOK, out.Receipt)
}
