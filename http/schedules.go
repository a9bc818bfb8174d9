package httpapi

import "github.com/gorilla/mux"

// registerScheduleRoutes mounts the schedule routes (/v1/schedules).
func (s *Server) registerScheduleRoutes(r *mux.Router) {}
