package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"phonefleet/domain"
	"phonefleet/http/console"
	"phonefleet/http/kernel"
)

// registerConsoleRoutes mounts the console (package console): the page at
// / and its assets under /console/. Neither takes a bearer token: the
// page is the same for everyone, and what it shows comes from the /v1
// routes it calls with the person's own credential.
func (s *Server) registerConsoleRoutes(r *mux.Router) {
	c, err := console.New(console.Config{Mode: s.mode, Issuer: s.deps.Console.Issuer, ClientID: s.deps.Console.ClientID,
		Resource: strings.TrimRight(s.deps.Identity.PublicURL, "/") + "/mcp"})
	if err != nil {
		panic(fmt.Sprintf("httpapi: console: %v", err)) // a defect of the build: the embedded page does not parse
	}
	// A file the console does not have answers like any unserved path.
	notFound := kernel.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return domain.Errorf(domain.CodeNotFound, "nothing is served at this path")
	}).ServeHTTP
	r.HandleFunc("/", c.ServeIndex).Methods(http.MethodGet)
	r.PathPrefix("/console/").HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.ServeAsset(w, r, notFound)
	}).Methods(http.MethodGet)
}

// ConsoleDeps configures the console's sign-in (hosted mode).
type ConsoleDeps struct {
	// Issuer is the authorization server the page signs people in with.
	Issuer string
	// ClientID is the console's public OAuth client id.
	ClientID string
}
