package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/http/kernel"
)

func TestRequestID(t *testing.T) {
	tests := []struct {
		name     string
		incoming string
		keep     bool // the incoming id is kept
	}{
		{name: "absent", incoming: ""},
		{name: "accepted", incoming: "trace-4f2a:01/abc", keep: true},
		{name: "with spaces", incoming: "a b c", keep: true},
		{name: "128 characters", incoming: strings.Repeat("x", 128), keep: true},
		{name: "129 characters", incoming: strings.Repeat("x", 129)},
		{name: "not ASCII", incoming: "résumé"},
		{name: "control character", incoming: "a\x01b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := newTestServer(t, Deps{})
			var seen string
			s.v1.Handle("/id", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				seen = kernel.RequestID(r.Context())
				return nil
			})).Methods(http.MethodGet)
			req := httptest.NewRequest(http.MethodGet, "/v1/id", nil)
			if tt.incoming != "" {
				req.Header.Set("X-Request-Id", tt.incoming)
			}
			resp, _ := apitest.Do(t, s.Handler(), req)
			got := resp.Header.Get("X-Request-Id")
			if tt.keep && got != tt.incoming {
				t.Errorf("got response id %q; want the incoming %q", got, tt.incoming)
			}
			if !tt.keep && !domain.HasPrefix(got, domain.PrefixRequest) {
				t.Errorf("got response id %q; want a minted req_ id", got)
			}
			if seen != got {
				t.Errorf("got RequestID(ctx) %q; want %q as on the response", seen, got)
			}
			if lines := logs.lines(t); len(lines) != 1 || lines[0]["request_id"] != got {
				t.Errorf("got log %v; want one line with request_id %q", lines, got)
			}
		})
	}
	if got := kernel.RequestID(t.Context()); got != "" {
		t.Errorf("got RequestID outside a request %q; want \"\"", got)
	}
}

func TestAccessLog(t *testing.T) {
	s, logs := newTestServer(t, Deps{})
	s.v1.Handle("/ok", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return kernel.WriteJSON(w, http.StatusOK, map[string]string{"a": "b"})
	})).Methods(http.MethodGet)
	s.v1.Handle("/refused", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return domain.Errorf(domain.CodePermissionDenied, "not yours").Wrap(errAccessLogSecret)
	})).Methods(http.MethodGet)
	s.v1.Handle("/broken", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return errAccessLogSecret
	})).Methods(http.MethodGet)

	tests := []struct {
		name      string
		target    string
		status    int
		bytes     float64
		wantError bool
		level     string
	}{
		{name: "success", target: "/v1/ok?cursor=secret-cursor", status: 200, bytes: 9, level: "INFO"},
		{name: "client error logs no cause", target: "/v1/refused?x=1", status: 403, level: "INFO"},
		{name: "server fault logs its cause", target: "/v1/broken", status: 500, wantError: true, level: "ERROR"},
		{name: "unknown route", target: "/nope", status: 404, level: "INFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(logs.lines(t))
			resp, body := apitest.Do(t, s.Handler(), httptest.NewRequest(http.MethodGet, tt.target, nil))
			lines := logs.lines(t)[before:]
			if len(lines) != 1 {
				t.Fatalf("got %d log lines; want exactly 1", len(lines))
			}
			line := lines[0]
			path, _, _ := strings.Cut(tt.target, "?")
			want := map[string]any{
				"msg": "request", "level": tt.level, "method": "GET", "path": path,
				"status": float64(tt.status), "bytes": float64(len(body)),
				"request_id": resp.Header.Get("X-Request-Id"),
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("got %s %v; want %v", k, line[k], v)
				}
			}
			if _, ok := line["duration_ms"].(float64); !ok {
				t.Errorf("got duration_ms %v; want a number", line["duration_ms"])
			}
			logged, hasError := line["error"].(string)
			if hasError != tt.wantError {
				t.Errorf("got error attribute %q; want present %v", logged, tt.wantError)
			}
			if tt.wantError && !strings.Contains(logged, "secret dsn") {
				t.Errorf("got error %q; want the cause", logged)
			}
			if strings.Contains(string(body), "secret dsn") {
				t.Errorf("got body %s; want the cause kept out of it", body)
			}
		})
	}
}

type accessLogSecretError struct{}

func (accessLogSecretError) Error() string { return "dial postgres: secret dsn" }

var errAccessLogSecret error = accessLogSecretError{}

func TestPanicRecovery(t *testing.T) {
	s, logs := newTestServer(t, Deps{})
	s.v1.Handle("/panic", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		panic("boom: secret state")
	})).Methods(http.MethodGet)
	v := apitest.FromHandler(t, s.Handler())

	req := httptest.NewRequest(http.MethodGet, "/v1/panic", nil)
	resp, body := apitest.Do(t, s.Handler(), req)
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("got status %d; want 500", resp.StatusCode)
	}
	if got, want := string(body), `{"error":{"code":"internal_error","message":"internal error"}}`; got != want {
		t.Errorf("got body %s; want %s", got, want)
	}
	v.CheckSchema(t, "Error", body)
	lines := logs.lines(t)
	last := lines[len(lines)-1]
	if got, _ := last["error"].(string); !strings.Contains(got, "panic: boom: secret state") {
		t.Errorf("got logged error %q; want the panic value", got)
	}
	if got, _ := last["stack"].(string); !strings.Contains(got, "middleware_test.go") {
		t.Errorf("got logged stack %q; want one naming the panicking handler", got)
	}

	t.Run("abort handler is re-raised", func(t *testing.T) {
		s.v1.Handle("/abort", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			panic(http.ErrAbortHandler)
		})).Methods(http.MethodGet)
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("got recovered %v; want http.ErrAbortHandler", p)
			}
		}()
		s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/abort", nil))
	})
}

func TestBodyLimit(t *testing.T) {
	tests := []struct {
		name    string
		limit   int64
		body    string
		chunked bool
		status  int
	}{
		{name: "at the limit", limit: 16, body: `{"a":"12345678"}`, status: 200},
		{name: "over the limit by Content-Length", limit: 16, body: `{"a":"123456789"}`, status: 413},
		{name: "over the limit chunked", limit: 16, body: `{"a":"123456789"}`, chunked: true, status: 413},
		{name: "default limit is 1 MiB", limit: 0, body: `{"a":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t, Deps{BodyLimit: tt.limit})
			s.v1.Handle("/echo", kernel.HandlerFunc(echo)).Methods(http.MethodPost)
			req := httptest.NewRequest(http.MethodPost, "/v1/echo", strings.NewReader(tt.body))
			if tt.chunked {
				req.ContentLength = -1
			}
			resp, body := apitest.Do(t, s.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("got status %d; want %d\nbody: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status == 413 {
				want := tt.limit
				if want == 0 {
					want = kernel.DefaultBodyLimit
				}
				msg, _ := decodeErrorBody(t, body)["message"].(string)
				if !strings.Contains(msg, " "+itoa(want)+" bytes") {
					t.Errorf("got message %q; want it to name the limit %d bytes", msg, want)
				}
			}
		})
	}
}
