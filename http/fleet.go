package httpapi

import "github.com/gorilla/mux"

// FleetDeps is what the routes of devices, leases, actions, frames and receipts need.
type FleetDeps struct{}

// registerFleetRoutes mounts the routes of devices, leases, actions, frames and receipts on the /v1 router.
func (s *Server) registerFleetRoutes(r *mux.Router) {}
