package httpapi

import "github.com/gorilla/mux"

// registerStreamRoutes mounts the live-screen routes (/v1/devices/{deviceId}/stream and /live-session).
func (s *Server) registerStreamRoutes(r *mux.Router) {}
