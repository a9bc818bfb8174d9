package httpapi

import (
	"bytes"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/domain"
)

// registerMCPRoutes mounts the agent tool surface (spec 1, 5.5) at /mcp,
// outside /v1 (spec 9.3) but behind the same authentication: a request
// without a valid credential is answered 401 with the bearer challenge
// before the MCP server sees it, and an OAuth app's token passes the app
// gate (/mcp is on its list). The body limit and rate limits apply as on
// every route. POST carries JSON-RPC; GET and DELETE are the Streamable
// HTTP transport's stream and session-end requests.
func (s *Server) registerMCPRoutes(r *mux.Router) {
	r.Handle("/mcp", s.authenticate(handlerFunc(s.serveMCP))).Methods(http.MethodPost, http.MethodGet, http.MethodDelete)
}

// serveMCP hands the request to the tool surface. A POST body is read here
// first, so one over the limit (chunked, or lying about its length) is the
// same 413 envelope as on every other route rather than a JSON-RPC error.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) error {
	if s.deps.MCP == nil {
		return domain.Errorf(domain.CodeServiceUnavailable, "the agent tool surface is not served by this deployment")
	}
	if r.Method == http.MethodPost && r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			if e, ok := asPayloadTooLarge(err); ok {
				return e
			}
			return domain.Errorf(domain.CodeInvalidArgument, "the request body could not be read")
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.deps.MCP.ServeHTTP(w, r)
	return nil
}
