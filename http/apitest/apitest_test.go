package apitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/mux"
)

// doc31 exercises the OpenAPI 3.1 features the project's documents rely on.
const doc31 = `
openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /items/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        '200':
          description: ok
          content:
            application/json:
              schema:
                type: object
                required: [name, note]
                additionalProperties: false
                properties:
                  name: {type: string}
                  note: {type: [string, "null"]}
                  kind: {const: item}
                  tags:
                    type: array
                    items: {type: string}
        '204':
          description: nothing
        '404':
          $ref: '#/components/responses/NotFound'
  /stream:
    get:
      responses:
        '200':
          description: lines
          content:
            application/x-ndjson:
              schema:
                type: array
                items: {type: object, required: [n], properties: {n: {type: integer}}}
  /page:
    get:
      responses:
        '200':
          description: a page
          content:
            text/html:
              schema: {type: string}
components:
  schemas:
    Tag:
      type: object
      required: [label]
      properties:
        label: {type: string}
        colour: {type: [string, "null"]}
  responses:
    NotFound:
      description: not found
      content:
        application/json:
          schema:
            type: object
            required: [error]
            properties:
              error:
                type: object
                required: [code, message]
                properties:
                  code: {const: not_found}
                  message: {type: string}
`

// tbRecorder stands in for *testing.T to observe whether a check fails.
type tbRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (r *tbRecorder) Helper() {}

func (r *tbRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *tbRecorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// outcome runs check against a recorder on its own goroutine (so Fatalf can
// end it) and reports whether it failed and what it said.
func outcome(t *testing.T, check func(tb testing.TB)) (bool, string) {
	rec := &tbRecorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { check(rec) })
	wg.Wait()
	return rec.failed, strings.Join(rec.msgs, "\n")
}

func answer(status int, contentType, body string) (*http.Response, []byte) {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return &http.Response{StatusCode: status, Header: h}, []byte(body)
}

func TestCheck(t *testing.T) {
	v := NewValidator(t, []byte(doc31))
	tests := []struct {
		name        string
		method      string
		path        string
		status      int
		contentType string
		body        string
		wantFail    bool
	}{
		{name: "valid with null note", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":null}`},
		{name: "valid with string note and const", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":"n","kind":"item","tags":["x"]}`},
		{name: "type array refuses a number", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":3}`, wantFail: true},
		{name: "const refuses another value", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":null,"kind":"other"}`, wantFail: true},
		{name: "closed object refuses an extra member", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":null,"extra":1}`, wantFail: true},
		{name: "missing required member", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"note":null}`, wantFail: true},
		{name: "array item of the wrong type", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":"a","note":null,"tags":[1]}`, wantFail: true},
		{name: "undocumented status", method: "GET", path: "/items/1", status: 500, contentType: "application/json",
			body: `{}`, wantFail: true},
		{name: "undocumented content type", method: "GET", path: "/items/1", status: 200, contentType: "text/plain",
			body: `{"name":"a","note":null}`, wantFail: true},
		{name: "body that is not JSON", method: "GET", path: "/items/1", status: 200, contentType: "application/json",
			body: `{"name":`, wantFail: true},
		{name: "undocumented path", method: "GET", path: "/other", status: 200, contentType: "application/json",
			body: `{}`, wantFail: true},
		{name: "undocumented method", method: "DELETE", path: "/items/1", status: 204, wantFail: true},
		{name: "no content as documented", method: "GET", path: "/items/1", status: 204},
		{name: "body where none is documented", method: "GET", path: "/items/1", status: 204, contentType: "application/json",
			body: `{}`, wantFail: true},
		{name: "NDJSON lines as the array", method: "GET", path: "/stream", status: 200, contentType: "application/x-ndjson",
			body: "{\"n\":1}\n{\"n\":2}\n"},
		{name: "NDJSON line against its schema", method: "GET", path: "/stream", status: 200, contentType: "application/x-ndjson",
			body: "{\"n\":1}\n{\"n\":\"two\"}\n", wantFail: true},
		{name: "NDJSON line that is not JSON", method: "GET", path: "/stream", status: 200, contentType: "application/x-ndjson",
			body: "{\"n\":1}\n{\"n\":\n", wantFail: true},
		{name: "an HTML page", method: "GET", path: "/page", status: 200, contentType: "text/html", body: "<!doctype html><p>hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			resp, body := answer(tt.status, tt.contentType, tt.body)
			failed, msg := outcome(t, func(tb testing.TB) { v.Check(tb, req, resp, body) })
			if failed != tt.wantFail {
				t.Errorf("got failed %v; want %v (%s)", failed, tt.wantFail, msg)
			}
		})
	}
}

func TestCheckUnrouted(t *testing.T) {
	v := NewValidator(t, []byte(doc31))
	notFound := `{"error":{"code":"not_found","message":"nothing is served at this path"}}`
	tests := []struct {
		name     string
		method   string
		path     string
		status   int
		body     string
		wantFail bool
	}{
		{name: "unknown path answered NotFound", method: "GET", path: "/nope", status: 404, body: notFound},
		{name: "unknown method answered NotFound", method: "POST", path: "/items/1", status: 404, body: notFound},
		{name: "documented operation", method: "GET", path: "/items/1", status: 404, body: notFound, wantFail: true},
		{name: "status other than 404", method: "GET", path: "/nope", status: 200, body: notFound, wantFail: true},
		{name: "body not the NotFound shape", method: "GET", path: "/nope", status: 404,
			body: `{"error":{"code":"internal_error","message":"x"}}`, wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			resp, body := answer(tt.status, "application/json", tt.body)
			failed, msg := outcome(t, func(tb testing.TB) { v.CheckUnrouted(tb, req, resp, body) })
			if failed != tt.wantFail {
				t.Errorf("got failed %v; want %v (%s)", failed, tt.wantFail, msg)
			}
		})
	}
}

func TestCheckSchema(t *testing.T) {
	v := NewValidator(t, []byte(doc31))
	tests := []struct {
		name     string
		body     string
		wantFail bool
	}{
		{name: "valid", body: `{"label":"a","colour":null}`},
		{name: "missing required", body: `{"colour":"red"}`, wantFail: true},
		{name: "wrong type", body: `{"label":"a","colour":1}`, wantFail: true},
		{name: "not JSON", body: `{`, wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failed, msg := outcome(t, func(tb testing.TB) { v.CheckSchema(tb, "Tag", []byte(tt.body)) })
			if failed != tt.wantFail {
				t.Errorf("got failed %v; want %v (%s)", failed, tt.wantFail, msg)
			}
		})
	}
}

func TestNewValidatorRefusesInvalidDocument(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{name: "unknown schema type", doc: strings.Replace(doc31, "name: {type: string}", "name: {type: text}", 1)},
		{name: "dangling reference", doc: strings.Replace(doc31, "responses/NotFound'", "responses/Missing'", 1)},
		{name: "not a document", doc: "openapi: [nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failed, _ := outcome(t, func(tb testing.TB) { NewValidator(tb, []byte(tt.doc)) })
			if !failed {
				t.Error("got a validator; want a failure")
			}
		})
	}
}

func TestOperations(t *testing.T) {
	got := NewValidator(t, []byte(doc31)).Operations()
	want := []Route{{Method: "GET", Path: "/items/{id}"}, {Method: "GET", Path: "/page"}, {Method: "GET", Path: "/stream"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}

func TestRoutesOf(t *testing.T) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	r := mux.NewRouter()
	r.Handle("/healthz", h).Methods(http.MethodGet)
	v1 := r.PathPrefix("/v1").Subrouter()
	v1.Handle("/devices/{deviceId}", h).Methods(http.MethodGet, http.MethodPatch)
	v1.Handle("/frames/{frameId:frm_[0-9a-f]{32}}", h).Methods(http.MethodGet)
	r.Handle("/anything", h)

	got := RoutesOf(r)
	want := []Route{
		{Method: "*", Path: "/anything"},
		{Method: "GET", Path: "/healthz"},
		{Method: "GET", Path: "/v1/devices/{deviceId}"},
		{Method: "PATCH", Path: "/v1/devices/{deviceId}"},
		{Method: "GET", Path: "/v1/frames/{frameId}"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}
