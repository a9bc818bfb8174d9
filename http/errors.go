// Decision (docs/decisions.md, HTTP edge): a request whose path is served but
// whose method is not is answered 404 not_found, not 405. The code set is
// closed (spec 7.1) and the contract maps each code to one status; no code
// means "method not allowed", and inventing one, or answering 405 under an
// existing code, would break that mapping. The 404 carries an Allow header
// and a message naming the methods the path accepts, so a person can still
// see the mistake, while a client that branches on error.code sees the same
// not_found it gets for any path that serves nothing to it.

package httpapi

import (
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// writeError renders every failure the control surface and the routes
// beside it answer (the chain's default): the kernel's envelope, with the
// bearer challenge of spec 5.6.1 on every 401.
var writeError kernel.ErrorWriter = kernel.RESTErrors(bearerChallenge)

// notFound answers every request no route serves. A path served under other
// methods gets 404 not_found with Allow (see the decision at the top of this
// file). It works the methods out itself instead of trusting mux's
// method-mismatch signal, which gorilla/mux v1.8.1 loses when a later route
// of the same subrouter shares a prefix with the path.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) error {
	allowed := allowedMethods(s.router, r)
	if len(allowed) == 0 {
		return domain.Errorf(domain.CodeNotFound, "nothing is served at this path")
	}
	list := strings.Join(allowed, ", ")
	w.Header().Set("Allow", list)
	return domain.Errorf(domain.CodeNotFound, "this path does not accept %s; allowed methods: %s", r.Method, list)
}

// allowedMethods lists the methods of the routes whose path matches r.
func allowedMethods(router *mux.Router, r *http.Request) []string {
	var allowed []string
	_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil
		}
		for _, m := range methods {
			if slices.Contains(allowed, m) {
				continue
			}
			probe := r.Clone(r.Context())
			probe.Method = m
			if route.Match(probe, &mux.RouteMatch{}) {
				allowed = append(allowed, m)
			}
		}
		return nil
	})
	sort.Strings(allowed)
	return allowed
}
