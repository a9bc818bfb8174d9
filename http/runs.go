package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/gorilla/mux"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerRunRoutes mounts the run routes (/v1/runs; spec 4.5, 9.4). The
// run commands check runs:start AND devices:act and the organisation
// themselves; another organisation's run answers run_not_found exactly as
// one that never existed.
func (s *Server) registerRunRoutes(r *mux.Router) {
	r.Handle("/runs", kernel.HandlerFunc(s.startRun)).Methods(http.MethodPost)
	r.Handle("/runs", kernel.HandlerFunc(s.listRuns)).Methods(http.MethodGet)
	r.Handle("/runs/{runId}", kernel.HandlerFunc(s.getRun)).Methods(http.MethodGet)
	r.Handle("/runs/{runId}/pause", s.runTransition(s.pauseRun)).Methods(http.MethodPost)
	r.Handle("/runs/{runId}/resume", s.runTransition(s.resumeRun)).Methods(http.MethodPost)
	r.Handle("/runs/{runId}/cancel", s.runTransition(s.cancelRun)).Methods(http.MethodPost)
	r.Handle("/runs/{runId}/frames", kernel.HandlerFunc(s.listRunFrames)).Methods(http.MethodGet)
	// The script is a read of the run's own steps, which spec 5.2 item 4
	// ("read runs") lets an OAuth app do: it is on the app list
	// (identity_apps.go).
	r.Handle("/runs/{runId}/script", kernel.HandlerFunc(s.getRunScript)).Methods(http.MethodGet)
	r.Handle("/runs/{runId}/divergence", kernel.HandlerFunc(s.getRunDivergence)).Methods(http.MethodGet)
}

// startRunRequest is the body of POST /v1/runs.
type startRunRequest struct {
	DeviceID        string               `json:"deviceId"`
	Goal            string               `json:"goal"`
	MaxSteps        int                  `json:"maxSteps"`
	DeadlineSeconds int                  `json:"deadlineSeconds"`
	Executor        string               `json:"executor"`
	SuccessCheck    *domain.SuccessCheck `json:"successCheck"`
	Script          json.RawMessage      `json:"script"`
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request) error {
	var body startRunRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	script := bytes.TrimSpace(body.Script)
	if bytes.Equal(script, []byte("null")) {
		script = nil
	}
	if len(script) > 0 && script[0] != '{' {
		return domain.Errorf(domain.CodeInvalidArgument, "field \"script\" must be an object (a script as GET /v1/runs/{runId}/script answers it)")
	}
	started, err := s.app.Runs.StartRun.Handle(r.Context(), runs.StartRun{Auth: authOf(r), DeviceID: body.DeviceID,
		Goal: body.Goal, MaxSteps: body.MaxSteps, DeadlineSeconds: body.DeadlineSeconds, Executor: body.Executor,
		SuccessCheck: body.SuccessCheck, Script: json.RawMessage(script)})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewStartedRun(started))
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	rq := projections.RunQuery{State: q.Get("state"), DeviceID: q.Get("deviceId"), StarterUserID: q.Get("starterUserId"),
		StarterKeyID: q.Get("starterApiKeyId")}
	if rq.State != "" && !slices.Contains(domain.RunStates, rq.State) {
		return domain.Errorf(domain.CodeInvalidArgument, "state must be one of %v", domain.RunStates)
	}
	if rq.StarterUserID != "" && rq.StarterKeyID != "" {
		return domain.Errorf(domain.CodeInvalidArgument, "give starterUserId or starterApiKeyId, not both (a run has one starter)")
	}
	var err error
	if rq.Limit, err = pageLimit(q, projections.MaxPageLimit); err != nil {
		return err
	}
	if rq.Before, err = idCursor(q, "before", "nextBefore", domain.PrefixRun); err != nil {
		return err
	}
	page, err := s.app.Runs.ListRuns.Handle(r.Context(), runs.ListRuns{Auth: authOf(r), RunQuery: rq})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRunPage(page))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Runs.GetRun.Handle(r.Context(), runs.GetRun{Auth: authOf(r), RunID: mux.Vars(r)["runId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRun(v))
}

// runTransition serves pause, resume and cancel: no body is read (one
// sent is ignored), and the answer is the run after the transition.
func (s *Server) runTransition(do func(r *http.Request, ref runs.RunRef) (projections.RunView, error)) kernel.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		v, err := do(r, runs.RunRef{Auth: authOf(r), RunID: mux.Vars(r)["runId"]})
		if err != nil {
			return err
		}
		return kernel.WriteJSON(w, http.StatusOK, wire.NewRun(v))
	}
}

func (s *Server) pauseRun(r *http.Request, ref runs.RunRef) (projections.RunView, error) {
	return s.app.Runs.PauseRun.Handle(r.Context(), runs.PauseRun(ref))
}

func (s *Server) resumeRun(r *http.Request, ref runs.RunRef) (projections.RunView, error) {
	return s.app.Runs.ResumeRun.Handle(r.Context(), runs.ResumeRun(ref))
}

func (s *Server) cancelRun(r *http.Request, ref runs.RunRef) (projections.RunView, error) {
	return s.app.Runs.CancelRun.Handle(r.Context(), runs.CancelRun(ref))
}

func (s *Server) listRunFrames(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after, ok := wire.ParseRunFrameCursor(q.Get("after"))
	if !ok {
		return badCursor("after", "nextAfter")
	}
	limit, err := pageLimit(q, projections.MaxPageLimit)
	if err != nil {
		return err
	}
	page, err := s.app.Runs.ListRunFrames.Handle(r.Context(), runs.ListRunFrames{Auth: authOf(r), RunID: mux.Vars(r)["runId"],
		RunFrameQuery: projections.RunFrameQuery{After: after, Limit: limit}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRunFramePage(page))
}

func (s *Server) getRunScript(w http.ResponseWriter, r *http.Request) error {
	script, err := s.app.Runs.GetRunScript.Handle(r.Context(), runs.GetRunScript{Auth: authOf(r), RunID: mux.Vars(r)["runId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRunScript(script))
}

func (s *Server) getRunDivergence(w http.ResponseWriter, r *http.Request) error {
	d, err := s.app.Runs.GetRunDivergence.Handle(r.Context(), runs.GetRunDivergence{Auth: authOf(r), RunID: mux.Vars(r)["runId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRunDivergence(d))
}
