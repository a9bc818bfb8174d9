package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"phonefleet/commands"
	"phonefleet/http/apitest"
	"phonefleet/vrx"
)

// TestContractCoversMountedRoutes proves every mounted route is in the served
// document and every documented operation is mounted. The device surface is
// one prefix route on the server's router (/vrx/, any method) with its own
// router below it, whose routes are listed in its place.
func TestContractCoversMountedRoutes(t *testing.T) {
	surface := vrx.New(&commands.Application{})
	s, _ := newTestServer(t, Deps{VRX: surface})
	v := apitest.FromHandler(t, s.Handler())
	mounted := slices.DeleteFunc(apitest.RoutesOf(s.Router()), func(r apitest.Route) bool { return r.Path == vrx.PathPrefix })
	mounted = append(mounted, apitest.RoutesOf(surface.Router())...)
	// Hosted-only routes (spec 1) are mounted in hosted mode only; the
	// document covers both modes.
	hosted, _ := newTestServer(t, Deps{Mode: "hosted"})
	for _, r := range apitest.RoutesOf(hosted.Router()) {
		if !slices.Contains(mounted, r) {
			mounted = append(mounted, r)
		}
	}
	documented := v.Operations()

	if len(mounted) == 0 {
		t.Fatal("got no mounted routes; want at least /healthz")
	}
	for _, r := range mounted {
		if !slices.Contains(documented, r) {
			t.Errorf("mounted route %s is not in the OpenAPI document", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(mounted, r) {
			t.Errorf("documented operation %s is not mounted", r)
		}
	}
}

// TestContractAnswers sends requests of every kind the skeleton answers and
// checks each answer against the served document.
func TestContractAnswers(t *testing.T) {
	twoMiB := bytes.Repeat([]byte("a"), 2<<20)
	bigJSON := func() io.Reader {
		return io.MultiReader(strings.NewReader(`{"blob":"`), bytes.NewReader(twoMiB), strings.NewReader(`"}`))
	}
	tests := []struct {
		name     string
		req      func() *http.Request
		unrouted bool // no operation documents the request; the answer must be NotFound
		status   int
		code     string // error.code when the answer is an error
		allow    string // Allow header, when one is expected
	}{
		{
			name:   "healthz",
			req:    func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) },
			status: http.StatusOK,
		},
		{
			name:   "openapi document",
			req:    func() *http.Request { return httptest.NewRequest(http.MethodGet, "/openapi.json", nil) },
			status: http.StatusOK,
		},
		{
			name:     "unknown route",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodGet, "/v1/nothing-here", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "old tasks path",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodGet, "/tasks", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "old tasks item",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodPost, "/tasks/t1/cancel", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "old runs path",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodGet, "/runs", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "old runs item",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodGet, "/runs/run_1", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "non-canonical path is not redirected",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodGet, "//healthz", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found",
		},
		{
			name:     "wrong method on a served path",
			req:      func() *http.Request { return httptest.NewRequest(http.MethodPost, "/healthz", nil) },
			unrouted: true, status: http.StatusNotFound, code: "not_found", allow: "GET",
		},
		{
			name: "valid JSON body",
			req: func() *http.Request {
				return httptest.NewRequest(http.MethodPost, "/v1/echo", strings.NewReader(`{"a":1,"b":2}`))
			},
			status: http.StatusOK,
		},
		{
			name: "unreadable JSON body",
			req: func() *http.Request {
				return httptest.NewRequest(http.MethodPost, "/v1/echo", strings.NewReader(`{"a":`))
			},
			status: http.StatusBadRequest, code: "invalid_argument",
		},
		{
			name:   "empty body",
			req:    func() *http.Request { return httptest.NewRequest(http.MethodPost, "/v1/echo", nil) },
			status: http.StatusBadRequest, code: "invalid_argument",
		},
		{
			name: "2 MiB body with Content-Length",
			req: func() *http.Request {
				return httptest.NewRequest(http.MethodPost, "/v1/echo", bytes.NewReader(twoMiB))
			},
			status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
		},
		{
			name: "2 MiB chunked body",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/v1/echo", bigJSON())
				r.ContentLength = -1
				r.TransferEncoding = []string{"chunked"}
				return r
			},
			status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
		},
		{
			name: "2 MiB body on a GET",
			req: func() *http.Request {
				return httptest.NewRequest(http.MethodGet, "/healthz", bytes.NewReader(twoMiB))
			},
			status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
		},
	}
	s, _ := echoServer(t)
	v := apitest.FromHandler(t, s.Handler())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req()
			resp, body := apitest.Do(t, s.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("got status %d; want %d\nbody: %s", resp.StatusCode, tt.status, body)
			}
			if tt.unrouted {
				v.CheckUnrouted(t, req, resp, body)
			} else {
				v.Check(t, req, resp, body)
			}
			if tt.code != "" {
				if got := decodeErrorBody(t, body)["code"]; got != tt.code {
					t.Errorf("got error.code %v; want %s", got, tt.code)
				}
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("got Allow %q; want %q", got, tt.allow)
			}
		})
	}
}
