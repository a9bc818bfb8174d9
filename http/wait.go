package httpapi

import "github.com/gorilla/mux"

// registerWaitRoutes mounts the wait route (an agent waits for an element or a still screen).
func (s *Server) registerWaitRoutes(r *mux.Router) {}
