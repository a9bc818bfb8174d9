// Package apitest is the contract harness of phonefleet's HTTP edge: it loads
// the served OpenAPI 3.1 document and fails a test whose answer the document
// does not describe, and it lists the routes a router mounts so a test can
// prove the document covers each one. Every area's tests use it.
//
// Decision (docs/decisions.md, HTTP edge): the harness uses kin-openapi
// (github.com/getkin/kin-openapi v0.152.0). It loads and validates OpenAPI 3.1
// documents, and its response validation switches to a JSON Schema 2020-12
// validator (santhosh-tekuri/jsonschema v6) for 3.1 documents, so type arrays
// ("null" for nullable), const, and $ref with sibling keywords behave as 3.1
// says; the package tests prove those cases. It also ships a gorilla/mux
// router over the document, the router the service itself uses. libopenapi
// with its validator was the alternative; it was not needed.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gorilla/mux"
)

// DocumentPath is where the service serves its OpenAPI document.
const DocumentPath = "/openapi.json"

// notFoundResponse is the component that describes the answer to any request
// the document has no operation for.
const notFoundResponse = "NotFound"

// Validator checks answers against one OpenAPI document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// NewValidator loads document (JSON or YAML), validates it as OpenAPI, and
// fails tb if it is not a valid document.
func NewValidator(tb testing.TB, document []byte) *Validator {
	tb.Helper()
	registerDecoders.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		tb.Fatalf("load OpenAPI document: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		tb.Fatalf("invalid OpenAPI document: %v", err)
	}
	// Match paths only: tests talk to httptest servers on arbitrary hosts,
	// and the document's server is the deployment's own base URL.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		tb.Fatalf("route OpenAPI document: %v", err)
	}
	return &Validator{doc: doc, router: router}
}

// registerDecoders teaches the validator the two media types of the
// document it does not know: an HTML page is a string, and an NDJSON stream
// is the sequence of its lines, which the document describes as an array
// (OpenAPI 3.1 has no way to name a schema per line).
var registerDecoders sync.Once

// ndjsonDecoder decodes newline-delimited JSON into the array of its lines;
// a line that is not JSON fails validation.
func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	lines := []any{}
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(data) == 0 {
			break
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("line %d is not JSON: %w", i+1, err)
		}
		lines = append(lines, v)
	}
	return lines, nil
}

// FromHandler fetches the document h serves at DocumentPath and returns a
// Validator for it, so tests check against exactly what clients receive.
func FromHandler(tb testing.TB, h http.Handler) *Validator {
	tb.Helper()
	resp, body := Do(tb, h, httptest.NewRequest(http.MethodGet, DocumentPath, nil))
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: got status %d; want 200", DocumentPath, resp.StatusCode)
	}
	return NewValidator(tb, body)
}

// Do sends req to h and returns the response with its body read.
func Do(tb testing.TB, h http.Handler, req *http.Request) (*http.Response, []byte) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read response body: %v", err)
	}
	return resp, body
}

// Check fails tb unless the document has an operation for req's method and
// path, documents resp's status for it, and resp's headers, content type and
// body validate against that response. body is resp's body, already read.
func (v *Validator) Check(tb testing.TB, req *http.Request, resp *http.Response, body []byte) {
	tb.Helper()
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		tb.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options:    &openapi3filter.Options{ExcludeRequestBody: true},
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		tb.Errorf("%s %s → %d: answer does not match the document: %v\nbody: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, clip(body))
		return
	}
	v.checkNoUndocumentedBody(tb, req, resp, body, route.Operation.Responses.Status(resp.StatusCode))
}

// CheckUnrouted fails tb unless the document has NO operation for req's
// method and path, and resp is the answer the document gives every such
// request: status 404 described by components.responses.NotFound.
func (v *Validator) CheckUnrouted(tb testing.TB, req *http.Request, resp *http.Response, body []byte) {
	tb.Helper()
	if route, _, err := v.router.FindRoute(req); err == nil {
		tb.Errorf("%s %s: documented as %s %s; want no operation", req.Method, req.URL.Path, route.Method, route.Path)
		return
	}
	if resp.StatusCode != http.StatusNotFound {
		tb.Errorf("%s %s: got status %d; want 404", req.Method, req.URL.Path, resp.StatusCode)
		return
	}
	ref := v.doc.Components.Responses[notFoundResponse]
	if ref == nil || ref.Value == nil {
		tb.Fatalf("the document has no components.responses.%s", notFoundResponse)
	}
	// Validate as if an operation answered with the NotFound response.
	op := openapi3.NewOperation()
	op.Responses = openapi3.NewResponses(openapi3.WithStatus(http.StatusNotFound, ref))
	route := &routers.Route{Spec: v.doc, Method: req.Method, Path: req.URL.Path, Operation: op}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		tb.Errorf("%s %s → 404: answer does not match components.responses.%s: %v\nbody: %s",
			req.Method, req.URL.Path, notFoundResponse, err, clip(body))
	}
}

// CheckSchema fails tb unless body is JSON that validates against the
// document's components.schemas[name] (with JSON Schema 2020-12 semantics,
// as in Check). It serves envelopes that are not whole HTTP answers, such as
// an error rendered outside any route.
func (v *Validator) CheckSchema(tb testing.TB, name string, body []byte) {
	tb.Helper()
	ref := v.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		tb.Fatalf("the document has no components.schemas.%s", name)
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		tb.Errorf("body is not JSON: %v\nbody: %s", err, clip(body))
		return
	}
	if err := ref.Value.VisitJSON(value, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		tb.Errorf("body does not match components.schemas.%s: %v\nbody: %s", name, err, clip(body))
	}
}

// checkNoUndocumentedBody fails when a response the document gives no content
// nevertheless carries a body; kin-openapi accepts that silently.
func (v *Validator) checkNoUndocumentedBody(tb testing.TB, req *http.Request, resp *http.Response, body []byte, ref *openapi3.ResponseRef) {
	tb.Helper()
	if len(body) == 0 || ref == nil || ref.Value == nil || len(ref.Value.Content) > 0 {
		return
	}
	tb.Errorf("%s %s → %d: body present but the document describes none\nbody: %s",
		req.Method, req.URL.Path, resp.StatusCode, clip(body))
}

// Route is one method on one path template, written as OpenAPI writes it
// ("/v1/devices/{deviceId}").
type Route struct {
	Method string
	Path   string
}

// String formats the route as "GET /healthz".
func (r Route) String() string { return r.Method + " " + r.Path }

// Operations lists the document's operations, sorted.
func (v *Validator) Operations() []Route {
	var out []Route
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, Route{Method: strings.ToUpper(method), Path: path})
		}
	}
	sortRoutes(out)
	return out
}

// NeedsCredential reports whether the document says op needs a credential:
// its security (or, absent, the document's) names at least one scheme and
// does not offer the empty requirement {}.
func (v *Validator) NeedsCredential(op Route) bool {
	o := v.doc.Paths.Find(op.Path).GetOperation(op.Method)
	if o == nil {
		return false
	}
	sec := v.doc.Security
	if o.Security != nil {
		sec = *o.Security
	}
	if len(sec) == 0 {
		return false
	}
	for _, req := range sec {
		if len(req) == 0 {
			return false
		}
	}
	return true
}

// muxPattern matches the regular expression of a mux path variable,
// "{id:[0-9]+}", so it can be dropped to give the OpenAPI template "{id}".
var muxPattern = regexp.MustCompile(`\{([^{}:]+):[^{}]*(\{[^{}]*\}[^{}]*)*\}`)

// RoutesOf walks every route mounted on r, subrouters included, and returns
// one Route per method, sorted. A route that names no methods is listed with
// Method "*" so a test can refuse it: every mounted route should say which
// methods it serves.
func RoutesOf(r *mux.Router) []Route {
	var out []Route
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil // a subrouter's prefix, not a route of its own
		}
		tmpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		tmpl = muxPattern.ReplaceAllString(tmpl, "{$1}")
		methods, err := route.GetMethods()
		if err != nil || len(methods) == 0 {
			out = append(out, Route{Method: "*", Path: tmpl})
			return nil
		}
		for _, m := range methods {
			out = append(out, Route{Method: m, Path: tmpl})
		}
		return nil
	})
	sortRoutes(out)
	return slices.Compact(out)
}

func sortRoutes(rs []Route) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Path != rs[j].Path {
			return rs[i].Path < rs[j].Path
		}
		return rs[i].Method < rs[j].Method
	})
}

func clip(body []byte) []byte {
	const max = 2000
	if len(body) > max {
		return append(bytes.Clone(body[:max]), "…"...)
	}
	return body
}
