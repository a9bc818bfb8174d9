package httpapi

import "github.com/gorilla/mux"

// WebhookDeps is what the routes of webhook subscriptions and deliveries (spec 4.4) need.
type WebhookDeps struct{}

// registerWebhookRoutes mounts the routes of webhook subscriptions and deliveries (spec 4.4) on the /v1 router.
func (s *Server) registerWebhookRoutes(r *mux.Router) {}
