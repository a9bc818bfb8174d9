package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/console"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/projections"
)

// registerConsoleEventRoutes mounts the console's own telemetry: a page
// sends its page views and client errors (POST /v1/console/events, a
// signed-in person), operators read them (GET, an organisation admin).
// Keys and apps are refused by the handlers (and apps by the app gate).
func (s *Server) registerConsoleEventRoutes(r *mux.Router) {
	r.Handle("/console/events", kernel.HandlerFunc(s.recordConsoleEvents)).Methods(http.MethodPost)
	r.Handle("/console/events", kernel.HandlerFunc(s.listConsoleEvents)).Methods(http.MethodGet)
}

type consoleEventBody struct {
	Type    string  `json:"type"`
	Page    string  `json:"page"`
	Message string  `json:"message"`
	At      *string `json:"at"`
}

type consoleEventsBody struct {
	Events []consoleEventBody `json:"events"`
}

// consoleEventsRecorded is the answer to a batch: the ids of its events,
// in the batch's order.
type consoleEventsRecorded struct {
	Recorded int      `json:"recorded"`
	EventIDs []string `json:"eventIds"`
}

func (s *Server) recordConsoleEvents(w http.ResponseWriter, r *http.Request) error {
	var body consoleEventsBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	items := make([]domain.ConsoleEventInput, len(body.Events))
	for i, e := range body.Events {
		items[i] = domain.ConsoleEventInput{Type: e.Type, Page: e.Page, Message: e.Message}
		if e.At != nil {
			at, err := time.Parse(time.RFC3339Nano, *e.At)
			if err != nil {
				field := fmt.Sprintf("events[%d].at", i)
				return domain.Errorf(domain.CodeInvalidArgument, "%s must be an RFC 3339 date-time", field).With("field", field)
			}
			items[i].At = &at
		}
	}
	rec, err := s.app.Console.RecordConsoleEvents.Handle(r.Context(), console.RecordConsoleEvents{Auth: authOf(r), Events: items,
		UserAgent: r.UserAgent()})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, consoleEventsRecorded{Recorded: len(rec.EventIDs), EventIDs: rec.EventIDs})
}

// consoleEventJSON is one telemetry event as operators read it.
type consoleEventJSON struct {
	EventID    string              `json:"eventId"`
	Type       string              `json:"type"`
	Page       string              `json:"page"`
	Message    *string             `json:"message"`
	UserAgent  *string             `json:"userAgent"`
	Actor      domain.ReceiptActor `json:"actor"`
	ClientAt   *string             `json:"clientAt"`
	ReceivedAt string              `json:"receivedAt"`
}

type consoleEventPage struct {
	Events []consoleEventJSON `json:"events"`
	// NextBefore, on every page but the last, is passed back as ?before=.
	NextBefore string `json:"nextBefore,omitempty"`
}

func optionalText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) listConsoleEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := pageLimit(q, projections.MaxPageLimit)
	if err != nil {
		return err
	}
	before, err := idCursor(q, "before", "nextBefore", domain.PrefixConsoleEvent)
	if err != nil {
		return err
	}
	page, err := s.app.Console.ListConsoleEvents.Handle(r.Context(), console.ListConsoleEvents{Auth: authOf(r),
		ConsoleEventQuery: projections.ConsoleEventQuery{Type: q.Get("type"), Before: before, Limit: limit}})
	if err != nil {
		return err
	}
	out := consoleEventPage{Events: make([]consoleEventJSON, len(page.Events)), NextBefore: page.NextBefore}
	for i, e := range page.Events {
		out.Events[i] = consoleEventJSON{EventID: e.EventID, Type: e.Type, Page: e.Page, Message: optionalText(e.Message),
			UserAgent: optionalText(e.UserAgent), Actor: e.By.ForReceipt(), ReceivedAt: domain.FormatWebhookTime(e.ReceivedAt)}
		if e.ClientAt != nil {
			at := domain.FormatWebhookTime(*e.ClientAt)
			out.Events[i].ClientAt = &at
		}
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}
