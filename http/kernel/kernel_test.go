package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
)

// okFalse is an envelope of another surface's kind ({ok:false,error}), as
// the device surface will answer.
func okFalse(w http.ResponseWriter, r *http.Request, err error) {
	e := domain.AsError(err)
	status := StatusOf(e.Code)
	if !BeginError(r, status, err) {
		return
	}
	body, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]string{"code": string(e.Code)}})
	WriteBody(w, status, body)
}

// TestErrorWriterSeam proves a surface's ErrorWriter answers everything
// that fails on its routes, returned or panicked, while refusals made before
// routing, and other routes, keep the chain's default.
func TestErrorWriterSeam(t *testing.T) {
	refuse := HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return domain.Errorf(domain.CodeInvalidArgument, "bad")
	})
	explode := HandlerFunc(func(http.ResponseWriter, *http.Request) error { panic("boom") })
	mux := http.NewServeMux()
	mux.Handle("/rest", refuse)
	mux.Handle("/other/refuse", WithErrors(okFalse)(refuse))
	mux.Handle("/other/panic", WithErrors(okFalse)(explode))
	var logs bytes.Buffer
	h := Chain(mux, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), BodyLimit: 8})

	tests := []struct {
		name   string
		path   string
		body   string
		status int
		want   string
	}{
		{name: "default envelope", path: "/rest", status: 400, want: `{"error":{"code":"invalid_argument","message":"bad"}}`},
		{name: "surface envelope for a returned error", path: "/other/refuse", status: 400, want: `{"error":{"code":"invalid_argument"},"ok":false}`},
		{name: "surface envelope for a panic", path: "/other/panic", status: 500, want: `{"error":{"code":"internal_error"},"ok":false}`},
		{name: "refused before routing keeps the default", path: "/other/refuse", body: "123456789", status: 413,
			want: `{"error":{"code":"payload_too_large","message":"request body exceeds the limit of 8 bytes"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.status {
				t.Errorf("got status %d; want %d", rec.Code, tt.status)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("got body %s; want %s", got, tt.want)
			}
		})
	}
	if !strings.Contains(logs.String(), `"error":"panic: boom"`) {
		t.Errorf("got log %s; want the panic noted as the fault", logs.String())
	}
}

// TestErrorWriterChoice proves which writer Error picks: the chain's
// default when a surface chose none, and the surface's outside a chain too.
func TestErrorWriterChoice(t *testing.T) {
	refuse := HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return domain.Errorf(domain.CodeNotFound, "none")
	})
	tests := []struct {
		name string
		h    http.Handler
		want string
	}{
		{name: "no chain, no choice", h: refuse, want: `{"error":{"code":"not_found","message":"none"}}`},
		{name: "no chain, surface choice", h: WithErrors(okFalse)(refuse), want: `{"error":{"code":"not_found"},"ok":false}`},
		{name: "chain default", h: Chain(refuse, Options{Logger: slog.New(slog.DiscardHandler), Errors: okFalse}),
			want: `{"error":{"code":"not_found"},"ok":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != http.StatusNotFound || rec.Body.String() != tt.want {
				t.Errorf("got %d %s; want 404 %s", rec.Code, rec.Body, tt.want)
			}
		})
	}
}

// TestRESTErrorsChallenge proves the bearer challenge is the surface's and
// only on a 401.
func TestRESTErrorsChallenge(t *testing.T) {
	write := RESTErrors(func(*http.Request, *domain.Error) string { return `Bearer realm="x"` })
	tests := []struct {
		name string
		code domain.Code
		want string
	}{
		{name: "401 carries the challenge", code: domain.CodeUnauthorized, want: `Bearer realm="x"`},
		{name: "403 carries none", code: domain.CodePermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			write(rec, httptest.NewRequest(http.MethodGet, "/", nil), domain.Errorf(tt.code, "no"))
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.want {
				t.Errorf("got WWW-Authenticate %q; want %q", got, tt.want)
			}
		})
	}
}

type brokenBody struct{}

func (brokenBody) Read([]byte) (int, error) { return 0, errors.New("connection reset: 10.0.0.7") }

func TestReadBody(t *testing.T) {
	tests := []struct {
		name  string
		body  func(r *http.Request)
		want  string
		code  domain.Code
		limit int64
	}{
		{name: "absent", body: func(r *http.Request) { r.Body = http.NoBody }},
		{name: "present", body: func(r *http.Request) {}, want: `{"a":1}`},
		{name: "over the limit", body: func(r *http.Request) {}, limit: 4, code: domain.CodePayloadTooLarge},
		{name: "broken", body: func(r *http.Request) { r.Body = readCloser{brokenBody{}} }, code: domain.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a":1}`))
			tt.body(r)
			if tt.limit > 0 {
				r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, tt.limit)
			}
			got, err := ReadBody(r)
			if tt.code == "" {
				if err != nil || string(got) != tt.want {
					t.Errorf("got %q, %v; want %q, no error", got, err, tt.want)
				}
				return
			}
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != tt.code {
				t.Fatalf("got error %v; want code %s", err, tt.code)
			}
			if strings.Contains(de.Message, "10.0.0.7") {
				t.Errorf("got message %q; want the cause kept out of it", de.Message)
			}
		})
	}
}

type readCloser struct{ brokenBody }

func (readCloser) Close() error { return nil }
