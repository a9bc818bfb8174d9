package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/schedules"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerScheduleRoutes mounts the schedule routes (/v1/schedules). Every
// route needs runs:start and devices:act (the handlers check).
func (s *Server) registerScheduleRoutes(r *mux.Router) {
	r.Handle("/schedules", kernel.HandlerFunc(s.createSchedule)).Methods(http.MethodPost)
	r.Handle("/schedules", kernel.HandlerFunc(s.listSchedules)).Methods(http.MethodGet)
	r.Handle("/schedules/{scheduleId}", kernel.HandlerFunc(s.getSchedule)).Methods(http.MethodGet)
	r.Handle("/schedules/{scheduleId}", kernel.HandlerFunc(s.patchSchedule)).Methods(http.MethodPatch)
	r.Handle("/schedules/{scheduleId}", kernel.HandlerFunc(s.deleteSchedule)).Methods(http.MethodDelete)
	r.Handle("/schedules/{scheduleId}/firings", kernel.HandlerFunc(s.listScheduleFirings)).Methods(http.MethodGet)
}

type createScheduleRequest struct {
	Name            string               `json:"name"`
	Cron            string               `json:"cron"`
	Timezone        string               `json:"timezone"`
	Enabled         *bool                `json:"enabled"`
	Goal            string               `json:"goal"`
	DeviceID        *string              `json:"deviceId"`
	Executor        string               `json:"executor"`
	MaxSteps        int                  `json:"maxSteps"`
	DeadlineSeconds int                  `json:"deadlineSeconds"`
	SuccessCheck    *domain.SuccessCheck `json:"successCheck"`
	Script          json.RawMessage      `json:"script"`
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	var req createScheduleRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	set := domain.ScheduleSettings{Name: req.Name, Cron: req.Cron, Timezone: req.Timezone, Enabled: req.Enabled == nil || *req.Enabled,
		Goal: req.Goal, Executor: req.Executor, MaxSteps: req.MaxSteps, DeadlineSeconds: req.DeadlineSeconds,
		SuccessCheck: req.SuccessCheck, Script: scheduleJSONValue(req.Script)}
	if req.DeviceID != nil {
		set.DeviceID = *req.DeviceID
	}
	v, err := s.app.Schedules.CreateSchedule.Handle(r.Context(), schedules.CreateSchedule{Auth: authOf(r), ScheduleSettings: set})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewSchedule(v))
}

// scheduleJSONValue returns raw, or nil for an absent or null value.
func scheduleJSONValue(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	return raw
}

// maxScheduleLimit is the largest page of schedules and firings.
const maxScheduleLimit = 100

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := pageLimit(q, maxScheduleLimit)
	if err != nil {
		return err
	}
	after, err := idCursor(q, "after", "nextAfter", domain.PrefixSchedule)
	if err != nil {
		return err
	}
	page, err := s.app.Schedules.ListSchedules.Handle(r.Context(), schedules.ListSchedules{Auth: authOf(r),
		ScheduleQuery: projections.ScheduleQuery{After: after, Limit: limit}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewSchedulePage(page))
}

// scheduleID returns the path's scheduleId; one that cannot name a
// schedule answers the same not_found as one that names nothing.
func scheduleID(r *http.Request) (string, error) {
	id := mux.Vars(r)["scheduleId"]
	if !domain.HasPrefix(id, domain.PrefixSchedule) {
		return "", domain.ErrScheduleNotFound(id)
	}
	return id, nil
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	v, err := s.app.Schedules.GetSchedule.Handle(r.Context(), schedules.GetSchedule{Auth: authOf(r), ScheduleID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewSchedule(v))
}

// patchScheduleRequest keeps deviceId, successCheck and script raw, so
// that absent (unchanged) and null (removed) differ.
type patchScheduleRequest struct {
	Name            *string         `json:"name"`
	Cron            *string         `json:"cron"`
	Timezone        *string         `json:"timezone"`
	Enabled         *bool           `json:"enabled"`
	Goal            *string         `json:"goal"`
	DeviceID        json.RawMessage `json:"deviceId"`
	Executor        *string         `json:"executor"`
	MaxSteps        *int            `json:"maxSteps"`
	DeadlineSeconds *int            `json:"deadlineSeconds"`
	SuccessCheck    json.RawMessage `json:"successCheck"`
	Script          json.RawMessage `json:"script"`
}

func (s *Server) patchSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	var req patchScheduleRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	cmd := schedules.UpdateSchedule{Auth: authOf(r), ScheduleID: id, Name: req.Name, Cron: req.Cron, Timezone: req.Timezone,
		Enabled: req.Enabled, Goal: req.Goal, Executor: req.Executor, MaxSteps: req.MaxSteps, DeadlineSeconds: req.DeadlineSeconds}
	if req.DeviceID != nil {
		device := ""
		if raw := scheduleJSONValue(req.DeviceID); raw != nil {
			if err := json.Unmarshal(raw, &device); err != nil {
				return domain.Errorf(domain.CodeInvalidArgument, "deviceId must be a string, or null for any free device").With("field", "deviceId")
			}
		}
		cmd.DeviceID = &device
	}
	if req.SuccessCheck != nil {
		cmd.SetSuccessCheck = true
		if raw := scheduleJSONValue(req.SuccessCheck); raw != nil {
			cmd.SuccessCheck = &domain.SuccessCheck{}
			if err := json.Unmarshal(raw, cmd.SuccessCheck); err != nil {
				return domain.Errorf(domain.CodeInvalidArgument, "successCheck must be an object, or null to remove it").With("field", "successCheck")
			}
		}
	}
	if req.Script != nil {
		cmd.SetScript, cmd.Script = true, scheduleJSONValue(req.Script)
	}
	v, err := s.app.Schedules.UpdateSchedule.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewSchedule(v))
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	if _, err := s.app.Schedules.DeleteSchedule.Handle(r.Context(), schedules.DeleteSchedule{Auth: authOf(r), ScheduleID: id}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listScheduleFirings(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	params := r.URL.Query()
	limit, err := pageLimit(params, maxScheduleLimit)
	if err != nil {
		return err
	}
	q := projections.FiringQuery{Limit: limit}
	if q.Before, err = timeCursor(params, "before", "nextBefore"); err != nil {
		return err
	}
	page, err := s.app.Schedules.ListScheduleFirings.Handle(r.Context(), schedules.ListScheduleFirings{Auth: authOf(r), ScheduleID: id, FiringQuery: q})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewScheduleFiringPage(page))
}
