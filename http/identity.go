package httpapi

import "github.com/gorilla/mux"

// IdentityDeps is what the routes of API keys (spec 5.3) and the key-management routes need.
type IdentityDeps struct{}

// registerIdentityRoutes mounts the routes of API keys (spec 5.3) and the key-management routes on the /v1 router.
func (s *Server) registerIdentityRoutes(r *mux.Router) {}
