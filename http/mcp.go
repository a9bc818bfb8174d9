package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// registerMCPRoutes mounts the agent tool surface (spec 1, 5.5) at /mcp,
// outside /v1 (spec 9.3) but behind the same authentication: a request
// without a valid credential is answered 401 with the bearer challenge
// before the MCP server sees it, and an OAuth app's token passes the app
// gate (/mcp is on its list). The body limit and rate limits apply as on
// every route. POST carries JSON-RPC; GET and DELETE are the Streamable
// HTTP transport's stream and session-end requests.
func (s *Server) registerMCPRoutes(r *mux.Router) {
	r.Handle("/mcp", s.authenticate(kernel.HandlerFunc(s.serveMCP))).Methods(http.MethodPost, http.MethodGet, http.MethodDelete)
}

// serveMCP hands the request to the tool surface, which reads the body
// through the kernel, so one over the limit is the same 413 envelope as on
// every other route rather than a JSON-RPC error.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) error {
	if s.deps.MCP == nil {
		return domain.Errorf(domain.CodeServiceUnavailable, "the agent tool surface is not served by this deployment")
	}
	s.deps.MCP.ServeHTTP(w, r)
	return nil
}
