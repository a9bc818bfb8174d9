package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/gorilla/mux"

	"phonefleet/http/contract"
)

// The contract's evolution on the HTTP edge (spec 9.8, 9.11; package
// contract): the changelog is served beside the fingerprints, and an
// operation of the deprecation registry is marked `deprecated: true` in the
// served document, with the deprecation's notice leading its description,
// and every answer of it carries Deprecation (RFC 9745) and Sunset (RFC
// 8594) headers. A meaning change of an operation adds an "@since" line to
// its description. None of that moves a fingerprint: `deprecated` and
// descriptions are not part of an operation's shape.
//
// The production registry is empty (spec 9.5): the document has no
// `deprecated` marker, no answer carries those headers and the middleware
// is not even installed.

// markEvolution returns doc (JSON) with the registry's deprecated
// operations marked and its meaning changes noted. It fails when the
// registry names an operation the document does not have.
func markEvolution(doc []byte, reg contract.Registry) ([]byte, error) {
	if len(reg.Deprecations) == 0 && len(reg.Meanings) == 0 {
		return doc, nil
	}
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	paths, _ := root["paths"].(map[string]any)
	operation := func(key string) (map[string]any, error) {
		method, path, ok := strings.Cut(key, " ")
		item, _ := paths[path].(map[string]any)
		op, _ := item[strings.ToLower(method)].(map[string]any)
		if !ok || op == nil {
			return nil, fmt.Errorf("the contract registry names %q, which the OpenAPI document does not have", key)
		}
		return op, nil
	}
	for _, d := range reg.Deprecations {
		if d.Operation == "" {
			continue
		}
		op, err := operation(d.Operation)
		if err != nil {
			return nil, err
		}
		op["deprecated"] = true
		desc, _ := op["description"].(string)
		op["description"] = strings.TrimSpace(d.Notice() + "\n\n" + desc)
	}
	for _, m := range reg.Meanings {
		if m.Operation == "" {
			continue
		}
		op, err := operation(m.Operation)
		if err != nil {
			return nil, err
		}
		desc, _ := op["description"].(string)
		op["description"] = strings.TrimSpace(desc + "\n\n" + m.SinceLine())
	}
	return json.Marshal(root)
}

// routeMethod is one method of one mounted route.
type routeMethod struct {
	route  *mux.Route
	method string
}

// muxVariablePattern matches a mux path variable with its regular
// expression, "{key:.+}", so it can be dropped to give the OpenAPI
// template "{key}" (as package apitest does for its route listing).
var muxVariablePattern = regexp.MustCompile(`\{([^{}:]+):[^{}]*(\{[^{}]*\}[^{}]*)*\}`)

// deprecationHeaders finds, once, the mounted routes of the registry's
// deprecated operations, and returns the middleware that adds their
// headers to every answer of those routes (errors included: the headers
// describe the operation, whatever the outcome). It returns nil when
// nothing is deprecated.
func deprecationHeaders(router *mux.Router, deprecated map[string]contract.Deprecation) mux.MiddlewareFunc {
	if len(deprecated) == 0 {
		return nil
	}
	headers := map[routeMethod]http.Header{}
	_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := route.GetPathTemplate()
		if err != nil || route.GetHandler() == nil {
			return nil
		}
		tmpl = muxVariablePattern.ReplaceAllString(tmpl, "{$1}")
		methods, _ := route.GetMethods()
		for _, m := range methods {
			if d, ok := deprecated[m+" "+tmpl]; ok {
				headers[routeMethod{route, m}] = d.Headers()
			}
		}
		return nil
	})
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h, ok := headers[routeMethod{mux.CurrentRoute(r), r.Method}]; ok {
				for k, vs := range h {
					for _, v := range vs {
						w.Header().Add(k, v)
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
