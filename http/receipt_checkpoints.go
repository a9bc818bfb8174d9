package httpapi

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"phonefleet/commands/checkpoints"
	"phonefleet/http/kernel"
	"phonefleet/receiptchain"
)

// registerSigningKeyPublicRoutes mounts GET /v1/receipts/signing-keys,
// the receipt signing keys, on the server's router ahead of the /v1
// subrouter: it reads no credential, so an auditor outside the
// organisation can check a checkpoint handed to them (docs/decisions.md,
// "Signed receipt checkpoints"). CORS and the rate limit still apply.
func (s *Server) registerSigningKeyPublicRoutes(r *mux.Router) {
	r.Handle("/v1/receipts/signing-keys", kernel.HandlerFunc(s.listSigningKeys)).Methods(http.MethodGet)
}

// registerCheckpointRoutes mounts GET /v1/receipts/checkpoints (before
// the fleet's /v1/receipts/{idempotencyKey}, which would take it).
func (s *Server) registerCheckpointRoutes(r *mux.Router) {
	r.Handle("/receipts/checkpoints", kernel.HandlerFunc(s.listCheckpoints)).Methods(http.MethodGet)
}

func (s *Server) listSigningKeys(w http.ResponseWriter, r *http.Request) error {
	set, err := s.app.Checkpoints.ListSigningKeys.Handle(r.Context(), checkpoints.ListSigningKeys{})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-cache")
	return kernel.WriteJSON(w, http.StatusOK, set)
}

// checkpointPage is the answer of GET /v1/receipts/checkpoints: the
// checkpoints newest first, and nextBefore, the cursor of the next page
// (absent on the last).
type checkpointPage struct {
	Checkpoints []receiptchain.Checkpoint `json:"checkpoints"`
	NextBefore  *int64                    `json:"nextBefore,omitempty"`
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := pageLimit(q, checkpoints.MaxCheckpointPage)
	if err != nil {
		return err
	}
	var before int64
	if raw := q.Get("before"); raw != "" {
		if before, err = strconv.ParseInt(raw, 10, 64); err != nil || before < 1 {
			return badCursor("before", "nextBefore")
		}
	}
	page, err := s.app.Checkpoints.ListCheckpoints.Handle(r.Context(), checkpoints.ListCheckpoints{Auth: authOf(r), Before: before, Limit: limit})
	if err != nil {
		return err
	}
	out := checkpointPage{Checkpoints: page.Checkpoints}
	if page.NextBefore > 0 {
		out.NextBefore = &page.NextBefore
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, out)
}
