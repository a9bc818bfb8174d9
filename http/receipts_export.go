package httpapi

import "github.com/gorilla/mux"

// registerReceiptExportRoutes mounts the receipts export (GET /v1/receipts/export).
func (s *Server) registerReceiptExportRoutes(r *mux.Router) {}
