package httpapi

import (
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/provisioning"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerPaymentWebhookRoutes mounts POST /webhooks/stripe on the root
// router, hosted only: outside /v1 and behind no authentication, because
// its credential is the provider's signature (spec 1). A local deployment
// does not mount it (404).
func (s *Server) registerPaymentWebhookRoutes(r *mux.Router) {
	if s.mode != "hosted" {
		return
	}
	r.Handle("/webhooks/stripe", kernel.HandlerFunc(s.receivePaymentWebhook)).Methods(http.MethodPost)
}

// receivePaymentWebhook hands the raw body and its Stripe-Signature to the
// application, which verifies and applies the event (spec 7.2:
// invalid_signature, invalid_event, not_settled).
func (s *Server) receivePaymentWebhook(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if e, ok := kernel.AsPayloadTooLarge(err); ok {
			return e
		}
		return domain.Errorf(domain.CodeInvalidEvent, "the request body could not be read")
	}
	ctx := eventstore.WithActor(r.Context(), "system", "payment-webhook")
	// An event about a proxy order (its metadata says so, or a refund or a
	// dispute whose charge paid a proxy order's subscription) is the proxies
	// capability's, which verifies the signature before acting on it;
	// everything else is provisioning's.
	if h := s.app.Proxies.ReceiveProviderEvent; h.Served() || proxies.IsProxyEvent(body) {
		px, err := h.Handle(ctx, proxies.ReceiveProviderEvent{Payload: body, Signature: r.Header.Get("Stripe-Signature")})
		if err != nil {
			return err
		}
		if px.Ours {
			return kernel.WriteJSON(w, http.StatusOK, wire.ProviderEventReceived{Received: true, EventID: px.EventID, Type: px.Type, Outcome: px.Outcome})
		}
	}
	rc, err := s.app.Provisioning.ReceiveProviderEvent.Handle(ctx,
		provisioning.ReceiveProviderEvent{Payload: body, Signature: r.Header.Get("Stripe-Signature")})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewProviderEventReceived(rc))
}
