// Package vrx is the device surface, {base_url}/vrx/{runToken}/v1/...: a
// worker executing one run observes and acts on the run's device, parks the
// run for a person and finishes it (spec 1, 7.3; ARCHITECTURE.md "Runs").
//
// The credential is the run token in the path and nothing else: no
// Authorization header is ever read, so an organisation API key sent as
// one changes nothing, and one put in the path is just a token that names
// no run. Like every surface it only translates: each route calls one
// command or query of the application object (commands.Runs.RunObserve,
// RunAct, RunNeedsUser, RunFinish; commands.Runs.RunInfo, RunGetFrame),
// which resolves the token, checks the run and its device, and attributes
// what it records to the run and its starter. Answers carry ok:true beside
// their data; failures are the surface's own envelope (errors.go).
//
// The handler sits inside the server's chain (kernel.Chain: request id,
// access log, panic recovery, the 1 MiB body limit) and renders its
// failures with WriteError (kernel.WithErrors), so a panic is answered in
// this envelope too.
package vrx

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
)

// PathPrefix is where the server mounts the surface.
const PathPrefix = "/vrx/"

// Handler is the device surface.
type Handler struct {
	app     *commands.Application
	router  *mux.Router
	handler http.Handler
}

// New returns the device surface over the application object. app must
// not be nil; it may be filled in after New returns (the wiring builds the
// surface beside the application object).
func New(app *commands.Application) *Handler {
	h := &Handler{app: app}
	// SkipClean: a non-canonical path answers DEVICE_NOT_FOUND instead of
	// mux's bare 301 redirect.
	r := mux.NewRouter().SkipClean(true)
	const run = "/vrx/{runToken}/v1"
	r.Handle(run+"/run", kernel.HandlerFunc(h.getRun)).Methods(http.MethodGet)
	r.Handle(run+"/observe", kernel.HandlerFunc(h.observe)).Methods(http.MethodGet)
	r.Handle(run+"/screenshot", kernel.HandlerFunc(h.screenshot)).Methods(http.MethodGet)
	r.Handle(run+"/frames/{frameId}", kernel.HandlerFunc(h.getFrame)).Methods(http.MethodGet)
	r.Handle(run+"/actions", kernel.HandlerFunc(h.act)).Methods(http.MethodPost)
	r.Handle(run+"/needs-user", kernel.HandlerFunc(h.needsUser)).Methods(http.MethodPost)
	r.Handle(run+"/finish", kernel.HandlerFunc(h.finish)).Methods(http.MethodPost)
	r.Use(asRun)
	// Decision (docs/decisions.md, device surface): a path under /vrx/ that
	// serves nothing, and a served path under another method, answer
	// DEVICE_NOT_FOUND (404), byte-identical to a refused token, without
	// looking the token up. Everything under /vrx/ begins with a credential,
	// so one answer for "nothing here for this token" keeps the surface to
	// its one envelope and its ten codes and tells a prober nothing; there
	// is no Allow header (the control surface's 404 not_found with Allow is
	// a code this surface does not have).
	r.NotFoundHandler = kernel.HandlerFunc(refuse)
	r.MethodNotAllowedHandler = kernel.HandlerFunc(refuse)
	h.router = r
	h.handler = kernel.WithErrors(WriteError)(r)
	return h
}

// ServeHTTP serves the surface. The run token is a credential, so the
// access log gets the path with it replaced by {runToken}.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kernel.LogPath(r.Context(), redact(r.URL.Path))
	h.handler.ServeHTTP(w, r)
}

// redact returns path with the segment after /vrx/ (the run token)
// replaced by {runToken}.
func redact(path string) string {
	rest, ok := strings.CutPrefix(path, PathPrefix)
	if !ok {
		return path
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return PathPrefix + "{runToken}" + rest[i:]
	}
	if rest == "" {
		return path
	}
	return PathPrefix + "{runToken}"
}

// Router returns the surface's router, whose route templates are the full
// paths (/vrx/{runToken}/v1/...), for contract tests that list mounted
// routes.
func (h *Handler) Router() *mux.Router { return h.router }

// refuse answers DEVICE_NOT_FOUND.
func refuse(http.ResponseWriter, *http.Request) error {
	return domain.ErrDeviceNotFound("")
}

// asRun names the run as the actor of what the request records (event
// metadata: actor kind "run", the run's id). The run id is read from the
// token's shape only; the run commands verify the token before they
// record anything, so an id from a refused token never reaches an event.
// What the run does is attributed to its starter on receipts; the
// metadata says it was the run that did it.
func asRun(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runID, _, ok := domain.ParseRunToken(mux.Vars(r)["runToken"]); ok {
			r = r.WithContext(eventstore.WithActor(r.Context(), domain.ActorRun, runID))
		}
		next.ServeHTTP(w, r)
	})
}

// access is the run credential of a request: the token in its path.
func access(r *http.Request) runs.RunAccess {
	return runs.RunAccess{Token: mux.Vars(r)["runToken"]}
}
