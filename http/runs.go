package httpapi

import "github.com/gorilla/mux"

// registerRunRoutes mounts the run routes (/v1/runs).
func (s *Server) registerRunRoutes(r *mux.Router) {}
