package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/projections"
)

// receiptPage is the receipt page of spec 2.5.
type receiptPage struct {
	Receipts      []receipt `json:"receipts"`
	NextBefore    string    `json:"nextBefore,omitempty"`
	NextBeforeKey string    `json:"nextBeforeKey,omitempty"`
}

func (s *Server) listReceipts(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	q := r.URL.Query()
	opt := func(name string) *string {
		if !q.Has(name) {
			return nil
		}
		v := q.Get(name)
		return &v
	}
	rq := fleet.ReceiptQuery{DeviceID: q.Get("deviceId"), AgentRunID: opt("agentRunId"), Status: q.Get("status"),
		ActorUserID: opt("actorUserId"), ActorAPIKeyID: opt("actorApiKeyId"), Before: q.Get("before"), BeforeKey: q.Get("beforeKey")}
	n, err := pageLimit(q, projections.MaxPageLimit)
	if err != nil {
		return err
	}
	rq.Limit = &n
	page, err := s.app.Fleet.ListReceipts.Handle(r.Context(), fleet.ListReceipts{Auth: a, ReceiptQuery: rq})
	if err != nil {
		return err
	}
	rs, err := s.withProxies(r, a, page.Receipts...)
	if err != nil {
		return err
	}
	out := receiptPage{Receipts: rs}
	if !page.NextBefore.IsZero() {
		out.NextBefore, out.NextBeforeKey = cursorTime(page.NextBefore), page.NextBeforeKey
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) getReceipt(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	rc, err := s.app.Fleet.GetReceipt.Handle(r.Context(), fleet.GetReceipt{Auth: a, IdempotencyKey: mux.Vars(r)["idempotencyKey"]})
	if err != nil {
		return err
	}
	rs, err := s.withProxies(r, a, rc)
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, rs[0])
}

// reviewRequest is the optional body of POST /v1/receipts/{key}/reviewed.
type reviewRequest struct {
	Note string `json:"note"`
}

func (s *Server) reviewReceipt(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	var body reviewRequest
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	rc, err := s.app.Fleet.ReviewReceipt.Handle(r.Context(), fleet.ReviewReceipt{Auth: a, IdempotencyKey: mux.Vars(r)["idempotencyKey"],
		Note: body.Note})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, rc)
}

// receipt is a receipt as REST answers it: with, when the device was
// behind a managed proxy when the action was asked for, that proxy's id.
type receipt struct {
	domain.Receipt
	ProxyID string `json:"proxyId,omitempty"`
}

// withProxies adds to each receipt the proxy its device was behind then
// (where the deployment serves managed proxies).
func (s *Server) withProxies(r *http.Request, a domain.Auth, rcs ...domain.Receipt) ([]receipt, error) {
	out := make([]receipt, len(rcs))
	at := make([]projections.DeviceAt, len(rcs))
	for i, rc := range rcs {
		out[i].Receipt, at[i] = rc, projections.DeviceAt{DeviceID: rc.DeviceID, At: rc.Timestamp}
	}
	if !s.app.Proxies.ProxiesAt.Served() {
		return out, nil
	}
	ids, err := s.app.Proxies.ProxiesAt.Handle(r.Context(), proxies.ProxiesAt{Auth: a, At: at})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].ProxyID = ids[i]
	}
	return out, nil
}
