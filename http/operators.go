package httpapi

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/console"
	"phonefleet/http/kernel"
)

// registerOperatorRoutes mounts the operator views the console's operators
// page reads: GET /v1/operators/projections, every projection's state, lag
// and rebuild progress. Who may read them is the query's to check (an
// organisation admin's session or local mode's operator); OAuth apps are
// refused by the app gate before it.
func (s *Server) registerOperatorRoutes(r *mux.Router) {
	r.Handle("/operators/projections", kernel.HandlerFunc(s.getProjectionStatus)).Methods(http.MethodGet)
}

// projectionStatusJSON is the answer of GET /v1/operators/projections.
type projectionStatusJSON struct {
	Projections []projectionStateJSON `json:"projections"`
}

// projectionStateJSON is one projection. Times are RFC 3339 in UTC; a
// time that never happened, an error not told and a rebuild not under way
// are null.
type projectionStateJSON struct {
	Name      string                 `json:"name"`
	Version   int                    `json:"version"`
	State     string                 `json:"state"`
	Lag       int64                  `json:"lag"`
	OK        bool                   `json:"ok"`
	UpdatedAt *time.Time             `json:"updatedAt"`
	LastError *string                `json:"lastError"`
	Rebuild   *projectionRebuildJSON `json:"rebuild"`
}

// projectionRebuildJSON is a rebuild under way.
type projectionRebuildJSON struct {
	Version   int        `json:"version"`
	StartedAt *time.Time `json:"startedAt"`
	Lag       int64      `json:"lag"`
	Progress  float64    `json:"progress"`
}

func (s *Server) getProjectionStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.app.Console.GetProjectionStatus.Handle(r.Context(), console.GetProjectionStatus{Auth: authOf(r)})
	if err != nil {
		return err
	}
	out := projectionStatusJSON{Projections: make([]projectionStateJSON, len(st.Projections))}
	for i, p := range st.Projections {
		j := projectionStateJSON{Name: p.Name, Version: p.Version, State: p.State, Lag: p.Lag, OK: p.OK,
			UpdatedAt: optTime(p.UpdatedAt)}
		if p.LastError != "" {
			j.LastError = &p.LastError
		}
		if b := p.Rebuild; b != nil {
			j.Rebuild = &projectionRebuildJSON{Version: b.Version, StartedAt: optTime(b.StartedAt), Lag: b.Lag, Progress: b.Progress}
		}
		out.Projections[i] = j
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, out)
}
