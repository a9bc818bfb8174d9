package httpapi

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/domain"
	"phonefleet/projections"
)

// WebhookDeps is what the routes of webhook subscriptions and deliveries
// (spec 4.4) need. With Queries nil (webhooks not wired) every route answers
// service_unavailable.
type WebhookDeps struct {
	Create  commands.CreateWebhookHandler
	Enable  commands.SetWebhookEnabledHandler
	Rotate  commands.RotateWebhookSecretHandler
	Delete  commands.DeleteWebhookHandler
	Test    commands.TestWebhookHandler
	Queries *projections.WebhookQueries
}

// registerWebhookRoutes mounts the routes of webhook subscriptions and deliveries (spec 4.4) on the /v1 router.
func (s *Server) registerWebhookRoutes(r *mux.Router) {
	r.Handle("/webhooks", s.webhookRoute(s.createWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks", s.webhookRoute(s.listWebhooks)).Methods(http.MethodGet)
	r.Handle("/webhooks/{webhookId}", s.webhookRoute(s.patchWebhook)).Methods(http.MethodPatch)
	r.Handle("/webhooks/{webhookId}", s.webhookRoute(s.deleteWebhook)).Methods(http.MethodDelete)
	r.Handle("/webhooks/{webhookId}/rotate", s.webhookRoute(s.rotateWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks/{webhookId}/test", s.webhookRoute(s.testWebhook)).Methods(http.MethodPost)
	r.Handle("/webhooks/{webhookId}/deliveries", s.webhookRoute(s.listDeliveries)).Methods(http.MethodGet)
}

// webhookRoute wraps a webhook handler with what every webhook route
// checks first: scope devices:read and nothing else (no role gate), and
// that webhooks are wired at all.
func (s *Server) webhookRoute(h func(w http.ResponseWriter, r *http.Request, a domain.Auth) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		a := authOf(r)
		if err := a.Require(domain.ScopeDevicesRead); err != nil {
			return err
		}
		if s.deps.Webhooks.Queries == nil {
			return domain.Errorf(domain.CodeServiceUnavailable, "webhooks are not served by this deployment")
		}
		return h(w, r, a)
	}
}

type createWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	var req createWebhookRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	created, err := s.deps.Webhooks.Create.Handle(r.Context(), commands.CreateWebhook{Auth: a, RequestID: RequestID(r.Context()),
		URL: req.URL, Events: req.Events})
	if err != nil {
		return err
	}
	v, err := s.deps.Webhooks.Queries.Get(r.Context(), a, created.WebhookID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, projections.WebhookWithSecret{Webhook: v.JSON(), Secret: created.Secret})
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	views, err := s.deps.Webhooks.Queries.List(r.Context(), a)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, projections.NewWebhooksJSON(views))
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

type patchWebhookRequest struct {
	Enabled *bool `json:"enabled"`
}

func (s *Server) patchWebhook(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	var req patchWebhookRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Enabled == nil {
		return domain.Errorf(domain.CodeInvalidArgument, "field \"enabled\" is required (a boolean)")
	}
	if err := s.deps.Webhooks.Enable.Handle(r.Context(), commands.SetWebhookEnabled{Auth: a, RequestID: RequestID(r.Context()),
		WebhookID: id, Enabled: *req.Enabled}); err != nil {
		return err
	}
	v, err := s.deps.Webhooks.Queries.Get(r.Context(), a, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v.JSON())
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	if err := s.deps.Webhooks.Delete.Handle(r.Context(), commands.DeleteWebhook{Auth: a, RequestID: RequestID(r.Context()), WebhookID: id}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	secret, err := s.deps.Webhooks.Rotate.Handle(r.Context(), commands.RotateWebhookSecret{Auth: a, RequestID: RequestID(r.Context()), WebhookID: id})
	if err != nil {
		return err
	}
	v, err := s.deps.Webhooks.Queries.Get(r.Context(), a, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, projections.WebhookWithSecret{Webhook: v.JSON(), Secret: secret})
}

func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	deliveryID, err := s.deps.Webhooks.Test.Handle(r.Context(), commands.TestWebhook{Auth: a, RequestID: RequestID(r.Context()), WebhookID: id})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, map[string]string{"deliveryId": deliveryID, "status": domain.DeliveryPending})
}

// Delivery page limits (spec 8).
const (
	defaultDeliveryLimit = 50
	maxDeliveryLimit     = 100
)

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, a domain.Auth) error {
	id, err := webhookID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := defaultDeliveryLimit
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxDeliveryLimit {
			return domain.Errorf(domain.CodeInvalidArgument, "limit must be a whole number from 1 to %d", maxDeliveryLimit)
		}
		limit = n
	}
	var before *projections.DeliveryCursor
	if raw := q.Get("nextBefore"); raw != "" {
		c, ok := projections.ParseDeliveryCursor(raw)
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, "nextBefore must be a value returned as nextBefore by this route")
		}
		before = &c
	}
	rows, next, err := s.deps.Webhooks.Queries.Deliveries(r.Context(), a, id, limit, before)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, projections.NewDeliveryPage(rows, next))
}
