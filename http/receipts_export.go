package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/http/kernel"
)

// registerReceiptExportRoutes mounts the receipts export (GET /v1/receipts/export).
func (s *Server) registerReceiptExportRoutes(r *mux.Router) {
	r.Handle("/receipts/export", kernel.HandlerFunc(s.exportReceipts)).Methods(http.MethodGet)
}

// exportReceipts streams the organisation's receipt chain as NDJSON: one
// entry per line, oldest first, then the end line (package receiptchain).
// Refusals come before the first byte, as ordinary error answers; a
// failure after it ends the stream without the end line, which is how a
// reader (and `phonefleet receipts verify --file`) knows it was cut short.
func (s *Server) exportReceipts(w http.ResponseWriter, r *http.Request) error {
	exp, err := s.app.Fleet.ExportReceipts.Handle(r.Context(), fleet.ExportReceipts{Auth: authOf(r)})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	nl := []byte{'\n'}
	return exp.Lines(r.Context(), func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		_, err := w.Write(nl)
		return err
	}, func() { _ = rc.Flush() })
}
