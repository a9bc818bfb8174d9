package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/copilot"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerCopilotRoutes mounts the copilot (spec 4.5 /v1/copilot family):
// a person's chat with a model that drives one device or their fleet. Person-only: the
// handlers refuse API keys, and the app gate refuses OAuth apps.
func (s *Server) registerCopilotRoutes(r *mux.Router) {
	r.Handle("/copilot", kernel.HandlerFunc(s.postCopilotMessage)).Methods(http.MethodPost)
	r.Handle("/copilot/threads", kernel.HandlerFunc(s.listCopilotThreads)).Methods(http.MethodGet)
	r.Handle("/copilot/threads/{threadId}", kernel.HandlerFunc(s.getCopilotThread)).Methods(http.MethodGet)
	r.Handle("/copilot/threads/{threadId}/stream", kernel.HandlerFunc(s.streamCopilotThread)).Methods(http.MethodGet)
	r.Handle("/copilot/threads/{threadId}/stop", kernel.HandlerFunc(s.stopCopilotTurn)).Methods(http.MethodPost)
	r.Handle("/copilot/approvals", kernel.HandlerFunc(s.listCopilotApprovals)).Methods(http.MethodGet)
	r.Handle("/copilot/approvals", kernel.HandlerFunc(s.decideCopilotApproval)).Methods(http.MethodPost)
	r.Handle("/copilot/commands", kernel.HandlerFunc(s.runCopilotCommand)).Methods(http.MethodPost)
	// The allowance read is hosted only (spec 4.2): a local deployment
	// does not mount it, so it answers not_found.
	if s.mode == "hosted" {
		r.Handle("/copilot/allowance", kernel.HandlerFunc(s.getCopilotAllowance)).Methods(http.MethodGet)
	}
}

// getCopilotAllowance reads the organisation's copilot allowance (spec 2.4).
func (s *Server) getCopilotAllowance(w http.ResponseWriter, r *http.Request) error {
	al, err := s.app.Copilot.GetAllowance.Handle(r.Context(), copilot.GetAllowance{Auth: authOf(r)})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCopilotAllowance(al))
}

type copilotCommandRequest struct {
	DeviceID string `json:"deviceId"`
	Command  string `json:"command"`
}

// runCopilotCommand carries out one direct command (command mode).
func (s *Server) runCopilotCommand(w http.ResponseWriter, r *http.Request) error {
	var req copilotCommandRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	res, err := s.app.Copilot.RunCommand.Handle(r.Context(), copilot.RunCommand{Auth: authOf(r), DeviceID: req.DeviceID, Command: req.Command})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCopilotCommandResult(res.Command.Verb, res.Command.Arg, res.Receipts, res.FrameID))
}

func (s *Server) listCopilotApprovals(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), "limit")
	if err != nil {
		return err
	}
	vs, err := s.app.Copilot.ListApprovals.Handle(r.Context(), copilot.ListApprovals{Auth: authOf(r), State: q.Get("state"), Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCopilotApprovalList(vs))
}

type copilotDecisionRequest struct {
	ApprovalID string `json:"approvalId"`
	Decision   string `json:"decision"`
	Digest     string `json:"digest"`
}

func (s *Server) decideCopilotApproval(w http.ResponseWriter, r *http.Request) error {
	var req copilotDecisionRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	d, err := s.app.Copilot.DecideApproval.Handle(r.Context(), copilot.DecideApproval{Auth: authOf(r), ApprovalID: req.ApprovalID,
		Decision: req.Decision, Digest: req.Digest})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.CopilotDecision{ApprovalID: d.ApprovalID, ThreadID: d.ThreadID, State: d.State, Receipt: d.Receipt})
}

type copilotMessageRequest struct {
	ThreadID           string `json:"threadId"`
	DeviceID           string `json:"deviceId"`
	Message            string `json:"message"`
	ApproveEveryAction bool   `json:"approveEveryAction"`
}

func (s *Server) postCopilotMessage(w http.ResponseWriter, r *http.Request) error {
	var req copilotMessageRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	p, err := s.app.Copilot.PostMessage.Handle(r.Context(), copilot.PostMessage{Auth: authOf(r), ThreadID: req.ThreadID,
		DeviceID: req.DeviceID, Message: req.Message, ApproveEveryAction: req.ApproveEveryAction})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusAccepted, wire.CopilotPosted{ThreadID: p.ThreadID, TurnID: p.TurnID})
}

func (s *Server) listCopilotThreads(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r.URL.Query().Get("limit"), "limit")
	if err != nil {
		return err
	}
	vs, err := s.app.Copilot.ListThreads.Handle(r.Context(), copilot.ListThreads{Auth: authOf(r), Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCopilotThreadList(vs))
}

func (s *Server) getCopilotThread(w http.ResponseWriter, r *http.Request) error {
	t, err := s.app.Copilot.GetThread.Handle(r.Context(), copilot.GetThread{Auth: authOf(r), ThreadID: mux.Vars(r)["threadId"]})
	if err != nil {
		return err
	}
	out, err := wire.NewCopilotThreadDetail(t.CopilotThreadView, t.Items)
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) stopCopilotTurn(w http.ResponseWriter, r *http.Request) error {
	a, id := authOf(r), mux.Vars(r)["threadId"]
	if _, err := s.app.Copilot.StopTurn.Handle(r.Context(), copilot.StopTurn{Auth: a, ThreadID: id}); err != nil {
		return err
	}
	t, err := s.app.Copilot.GetThread.Handle(r.Context(), copilot.GetThread{Auth: a, ThreadID: id})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, map[string]any{"thread": wire.NewCopilotThread(t.CopilotThreadView)})
}

// copilotKeepAlive is how long a thread's stream stays silent before a
// comment line keeps the connection open.
const copilotKeepAlive = 15 * time.Second

// streamCopilotThread sends the thread's events as server-sent events:
// each event's id is its place in the thread, its name the event's, its
// data the event's fields. A client resumes after the last id it saw
// with Last-Event-ID (an EventSource does so by itself).
func (s *Server) streamCopilotThread(w http.ResponseWriter, r *http.Request) error {
	var after int64
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return domain.Errorf(domain.CodeInvalidArgument, "Last-Event-ID must be an event id this stream sent (a whole number)").
				With("field", "Last-Event-ID")
		}
		after = n
	}
	st, err := s.app.Copilot.StreamThread.Handle(r.Context(), copilot.StreamThread{Auth: authOf(r), ThreadID: mux.Vars(r)["threadId"], After: after})
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil
	}
	var buf []byte
	for {
		ctx, cancel := context.WithTimeout(r.Context(), copilotKeepAlive)
		evs, err := st.Next(ctx)
		cancel()
		buf = buf[:0]
		switch {
		case err == nil:
			for _, e := range evs {
				buf = fmt.Appendf(buf, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
			}
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			buf = append(buf, ": keep-alive\n\n"...)
		default:
			return nil
		}
		if _, err := w.Write(buf); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}
