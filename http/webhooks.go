package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerWebhookRoutes mounts the routes of webhook subscriptions and deliveries (spec 4.4) on the /v1 router.
func (s *Server) registerWebhookRoutes(r *mux.Router) {
	r.Handle("/webhooks", kernel.HandlerFunc(s.createWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks", kernel.HandlerFunc(s.listWebhooks)).Methods(http.MethodGet)
	r.Handle("/webhooks/{webhookId}", kernel.HandlerFunc(s.getWebhook)).Methods(http.MethodGet)
	r.Handle("/webhooks/{webhookId}", kernel.HandlerFunc(s.patchWebhook)).Methods(http.MethodPatch)
	r.Handle("/webhooks/{webhookId}", kernel.HandlerFunc(s.deleteWebhook)).Methods(http.MethodDelete)
	r.Handle("/webhooks/{webhookId}/rotate", kernel.HandlerFunc(s.rotateWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks/{webhookId}/test", kernel.HandlerFunc(s.testWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks/{webhookId}/deliveries", kernel.HandlerFunc(s.listDeliveries)).Methods(http.MethodGet)
}

type createWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var req createWebhookRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	created, err := s.app.Webhooks.CreateWebhook.Handle(r.Context(), webhooks.CreateWebhook{Auth: a,
		URL: req.URL, Events: req.Events})
	if err != nil {
		return err
	}
	v, err := s.app.Webhooks.GetWebhook.Handle(r.Context(), webhooks.GetWebhook{Auth: a, WebhookID: created.WebhookID})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewWebhookWithSecret(v, created.Secret))
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	views, err := s.app.Webhooks.ListWebhooks.Handle(r.Context(), webhooks.ListWebhooks{Auth: a})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewWebhookList(views))
}

// webhookID returns the path's webhookId; one that cannot name a webhook
// answers the same not_found as one that names nothing.
func webhookID(r *http.Request) (string, error) {
	id := mux.Vars(r)["webhookId"]
	if !domain.HasPrefix(id, domain.PrefixWebhook) {
		return "", domain.Errorf(domain.CodeNotFound, "no webhook %s", id)
	}
	return id, nil
}

// getWebhook answers one subscription. An OAuth app reads only those it made
// for the same person (the query's visibility rule); any other id answers
// the same not_found as one that names nothing.
func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	v, err := s.app.Webhooks.GetWebhook.Handle(r.Context(), webhooks.GetWebhook{Auth: authOf(r), WebhookID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewWebhook(v))
}

type patchWebhookRequest struct {
	Enabled *bool `json:"enabled"`
}

func (s *Server) patchWebhook(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	var req patchWebhookRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	if req.Enabled == nil {
		return domain.Errorf(domain.CodeInvalidArgument, "field \"enabled\" is required (a boolean)")
	}
	if _, err := s.app.Webhooks.SetWebhookEnabled.Handle(r.Context(), webhooks.SetWebhookEnabled{Auth: a,
		WebhookID: id, Enabled: *req.Enabled}); err != nil {
		return err
	}
	v, err := s.app.Webhooks.GetWebhook.Handle(r.Context(), webhooks.GetWebhook{Auth: a, WebhookID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewWebhook(v))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	if _, err := s.app.Webhooks.DeleteWebhook.Handle(r.Context(), webhooks.DeleteWebhook{Auth: a, WebhookID: id}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	secret, err := s.app.Webhooks.RotateWebhookSecret.Handle(r.Context(), webhooks.RotateWebhookSecret{Auth: a, WebhookID: id})
	if err != nil {
		return err
	}
	v, err := s.app.Webhooks.GetWebhook.Handle(r.Context(), webhooks.GetWebhook{Auth: a, WebhookID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewWebhookWithSecret(v, secret))
}

func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	deliveryID, err := s.app.Webhooks.TestWebhook.Handle(r.Context(), webhooks.TestWebhook{Auth: a, WebhookID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusAccepted, wire.NewTestDelivery(deliveryID))
}

// maxDeliveryLimit is the largest page of deliveries (spec 4.4).
const maxDeliveryLimit = 100

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := pageLimit(q, maxDeliveryLimit)
	if err != nil {
		return err
	}
	var before *projections.DeliveryCursor
	if raw := q.Get("nextBefore"); raw != "" {
		c, ok := wire.ParseDeliveryCursor(raw)
		if !ok {
			return badCursor("nextBefore", "nextBefore")
		}
		before = &c
	}
	page, err := s.app.Webhooks.ListDeliveries.Handle(r.Context(), webhooks.ListDeliveries{Auth: a, WebhookID: id, Limit: limit, Before: before})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewDeliveryPage(page))
}
