package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/domain"
)

// receiptPage is the receipt page of spec 2.5.
type receiptPage struct {
	Receipts      []domain.Receipt `json:"receipts"`
	NextBefore    string           `json:"nextBefore,omitempty"`
	NextBeforeKey string           `json:"nextBeforeKey,omitempty"`
}

func (s *Server) listReceipts(w http.ResponseWriter, r *http.Request, f *commands.Fleet, a domain.Auth) error {
	q := r.URL.Query()
	opt := func(name string) *string {
		if !q.Has(name) {
			return nil
		}
		v := q.Get(name)
		return &v
	}
	rq := commands.ReceiptQuery{DeviceID: q.Get("deviceId"), AgentRunID: opt("agentRunId"), Status: q.Get("status"),
		ActorUserID: opt("actorUserId"), ActorAPIKeyID: opt("actorApiKeyId"), Before: q.Get("before"), BeforeKey: q.Get("beforeKey")}
	if q.Has("limit") {
		n, err := intParam(q.Get("limit"), "limit")
		if err != nil {
			return err
		}
		rq.Limit = &n
	}
	page, err := f.ListReceipts(r.Context(), a, rq)
	if err != nil {
		return err
	}
	out := receiptPage{Receipts: page.Receipts}
	if !page.NextBefore.IsZero() {
		out.NextBefore, out.NextBeforeKey = cursorTime(page.NextBefore), page.NextBeforeKey
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) getReceipt(w http.ResponseWriter, r *http.Request, f *commands.Fleet, a domain.Auth) error {
	rc, err := f.GetReceipt(r.Context(), a, mux.Vars(r)["idempotencyKey"])
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rc)
}

// reviewRequest is the optional body of POST /v1/receipts/{key}/reviewed.
type reviewRequest struct {
	Note string `json:"note"`
}

func (s *Server) reviewReceipt(w http.ResponseWriter, r *http.Request, f *commands.Fleet, a domain.Auth) error {
	var body reviewRequest
	if _, err := decodeOptionalJSON(r, &body); err != nil {
		return err
	}
	rc, err := f.ReviewReceipt().Handle(r.Context(), commands.ReviewReceipt{Auth: a, IdempotencyKey: mux.Vars(r)["idempotencyKey"],
		Note: body.Note})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rc)
}
