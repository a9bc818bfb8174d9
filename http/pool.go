package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerPoolRoutes mounts POST /v1/devices/take, taking a device out of
// the shared pay-as-you-go pool. It is registered before the fleet's
// /v1/devices/{deviceId} routes, so "take" is never read as a device id.
//
// The route is hosted-only. It is mounted in both modes, as the discovery
// documents are, and a local deployment answers it 404 not_found, the
// answer of a path that is not served: one OpenAPI document then describes
// every deployment, and the app list names only mounted routes.
func (s *Server) registerPoolRoutes(r *mux.Router) {
	r.Handle("/devices/take", kernel.HandlerFunc(s.takePoolDevice)).Methods(http.MethodPost)
}

// takeBody is the optional body of POST /v1/devices/take. The route also
// reads the Idempotency-Key header, with checkout's rules (spec 4.1).
type takeBody struct {
	TTLSeconds int `json:"ttlSeconds"`
}

func (s *Server) takePoolDevice(w http.ResponseWriter, r *http.Request) error {
	if s.mode != "hosted" {
		return domain.Errorf(domain.CodeNotFound, "nothing is served at this path")
	}
	var body takeBody
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	key, err := idempotencyKeyOf(r)
	if err != nil {
		return err
	}
	t, err := s.app.Provisioning.TakePoolDevice.Handle(r.Context(),
		provisioning.TakePoolDevice{Auth: authOf(r), TTLSeconds: body.TTLSeconds, IdempotencyKey: key})
	if err != nil {
		return err
	}
	if t.Replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewPoolDevice(t))
}
