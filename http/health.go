package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/http/kernel"
)

// healthTimeout bounds one health report, so a stuck database makes the probe
// answer degraded instead of hanging.
const healthTimeout = 5 * time.Second

// HealthReporter reports the state of what the service depends on. Health
// must return within ctx's deadline and never fails: a component it cannot
// reach is reported not OK. Its Error strings are shown to unauthenticated
// callers, so they must hold no secrets or connection strings.
type HealthReporter interface {
	Health(ctx context.Context) HealthReport
}

// HealthReport is the state of the database and of each projection, and
// the warnings: things an operator must act on that do not make the
// service unhealthy (a probe must not restart it for them).
type HealthReport struct {
	Database    ComponentHealth
	Projections []ProjectionHealth
	Warnings    []HealthWarning
}

// HealthWarning is one thing waiting for the operator: a stable code and a
// sentence saying what to do. Shown to unauthenticated callers, so it holds
// counts, never ids, amounts or organisations.
type HealthWarning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// OK reports whether the database and every projection are healthy.
func (h HealthReport) OK() bool {
	if !h.Database.OK {
		return false
	}
	for _, p := range h.Projections {
		if !p.OK {
			return false
		}
	}
	return true
}

// ComponentHealth is the state of one dependency; Error says why it is not OK.
type ComponentHealth struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ProjectionHealth is the state of one projection: its stable name and
// version, its state (e.g. "live", "rebuilding"), how many events it trails
// the head of the feed by, and whether that is acceptable.
type ProjectionHealth struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	State   string `json:"state"`
	Lag     int64  `json:"lag"`
	OK      bool   `json:"ok"`
}

// healthResponse is the body of GET /healthz. It is not an error envelope:
// a degraded service still answers with the full report (status 503).
type healthResponse struct {
	Status      string             `json:"status"`
	Database    ComponentHealth    `json:"database"`
	Projections []ProjectionHealth `json:"projections"`
	Warnings    []HealthWarning    `json:"warnings,omitempty"`
}

func (s *Server) registerHealthRoutes(r *mux.Router) {
	r.Handle("/healthz", kernel.HandlerFunc(s.getHealth)).Methods(http.MethodGet)
}

func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) error {
	report := HealthReport{Database: ComponentHealth{OK: true}}
	if s.health != nil {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		report = s.health.Health(ctx)
		cancel()
	}
	resp := healthResponse{Status: "ok", Database: report.Database, Projections: report.Projections, Warnings: report.Warnings}
	if resp.Projections == nil {
		resp.Projections = []ProjectionHealth{}
	}
	status := http.StatusOK
	if !report.OK() {
		resp.Status = "degraded"
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, status, resp)
}
