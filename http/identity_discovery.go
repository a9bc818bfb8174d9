package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// registerDiscoveryRoutes mounts the OAuth protected-resource metadata
// (RFC 9728; spec 5.2.2). Both documents describe the one protected
// resource, {base_url}/mcp, because that is the audience every access token
// is checked against, on /mcp and /v1 alike (spec 5.2.3: "the resource value
// in the metadata is the value verified"). They are hosted-only: a local
// deployment, or one with no authorization server, answers 404 not_found.
// They need no credential.
func (s *Server) registerDiscoveryRoutes(r *mux.Router) {
	r.Handle("/.well-known/oauth-protected-resource", kernel.HandlerFunc(s.getResourceMetadata)).Methods(http.MethodGet)
	r.Handle(resourceMetadataPath, kernel.HandlerFunc(s.getResourceMetadata)).Methods(http.MethodGet)
}

// resourceMetadata is the RFC 9728 document.
type resourceMetadata struct {
	Resource               string         `json:"resource"`
	AuthorizationServers   []string       `json:"authorization_servers"`
	ScopesSupported        []domain.Scope `json:"scopes_supported"`
	BearerMethodsSupported []string       `json:"bearer_methods_supported"`
	ResourceName           string         `json:"resource_name"`
	ResourceDocumentation  string         `json:"resource_documentation,omitempty"`
}

func (s *Server) getResourceMetadata(w http.ResponseWriter, r *http.Request) error {
	d := s.deps.Identity
	if !s.servesDiscovery() {
		return domain.Errorf(domain.CodeNotFound, "nothing is served at this path")
	}
	base := s.baseURL(r)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	return kernel.WriteJSON(w, http.StatusOK, resourceMetadata{
		Resource:               base + "/mcp",
		AuthorizationServers:   []string{d.Issuer},
		ScopesSupported:        domain.AllScopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "phonefleet control plane",
		ResourceDocumentation:  base + "/openapi.json",
	})
}
