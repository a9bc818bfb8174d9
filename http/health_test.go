package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"phonefleet/http/apitest"
	"phonefleet/projections"
)

type fixedHealth HealthReport

func (f fixedHealth) Health(context.Context) HealthReport { return HealthReport(f) }

func TestHealth(t *testing.T) {
	live := ProjectionHealth{Name: projections.ReceiptsName, Version: 1, State: "live", Lag: 0, OK: true}
	behind := ProjectionHealth{Name: projections.DevicesName, Version: 2, State: "rebuilding", Lag: 1200, OK: false}
	tests := []struct {
		name     string
		reporter HealthReporter
		status   int
		body     string
	}{
		{
			name:   "no reporter",
			status: http.StatusOK,
			body:   `{"status":"ok","database":{"ok":true},"projections":[]}`,
		},
		{
			name:     "healthy",
			reporter: fixedHealth{Database: ComponentHealth{OK: true}, Projections: []ProjectionHealth{live}},
			status:   http.StatusOK,
			body:     `{"status":"ok","database":{"ok":true},"projections":[{"name":"receipts","version":1,"state":"live","lag":0,"ok":true}]}`,
		},
		{
			name:     "database down",
			reporter: fixedHealth{Database: ComponentHealth{OK: false, Error: "database does not answer"}},
			status:   http.StatusServiceUnavailable,
			body:     `{"status":"degraded","database":{"ok":false,"error":"database does not answer"},"projections":[]}`,
		},
		{
			name:     "projection behind",
			reporter: fixedHealth{Database: ComponentHealth{OK: true}, Projections: []ProjectionHealth{live, behind}},
			status:   http.StatusServiceUnavailable,
			body:     `{"status":"degraded","database":{"ok":true},"projections":[{"name":"receipts","version":1,"state":"live","lag":0,"ok":true},{"name":"devices","version":2,"state":"rebuilding","lag":1200,"ok":false}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t, Deps{Health: tt.reporter})
			v := apitest.FromHandler(t, s.Handler())
			req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
			resp, body := apitest.Do(t, s.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Errorf("got status %d; want %d", resp.StatusCode, tt.status)
			}
			if string(body) != tt.body {
				t.Errorf("got body %s; want %s", body, tt.body)
			}
			v.Check(t, req, resp, body)
		})
	}
}

// TestHealthBoundsTheReporter proves a reporter gets a deadline.
func TestHealthBoundsTheReporter(t *testing.T) {
	var hasDeadline bool
	s, _ := newTestServer(t, Deps{Health: reporterFunc(func(ctx context.Context) HealthReport {
		_, hasDeadline = ctx.Deadline()
		return HealthReport{Database: ComponentHealth{OK: true}}
	})})
	apitest.Do(t, s.Handler(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if !hasDeadline {
		t.Error("got a context without deadline; want one bounded by healthTimeout")
	}
}

type reporterFunc func(context.Context) HealthReport

func (f reporterFunc) Health(ctx context.Context) HealthReport { return f(ctx) }
