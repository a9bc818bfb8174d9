package httpapi

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/notifications"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// registerNotificationRoutes mounts a person's notifications and
// notification preferences (spec §1 item 8) on the /v1 router. OAuth apps
// are refused at the edge (appDenials names the console); an API key by
// the capability.
func (s *Server) registerNotificationRoutes(r *mux.Router) {
	r.Handle("/notifications", kernel.HandlerFunc(s.listNotifications)).Methods(http.MethodGet)
	r.Handle("/notifications/read", kernel.HandlerFunc(s.readNotifications)).Methods(http.MethodPost)
	r.Handle("/me/notification-preferences", kernel.HandlerFunc(s.getNotificationPreferences)).Methods(http.MethodGet)
	r.Handle("/me/notification-preferences", kernel.HandlerFunc(s.patchNotificationPreferences)).Methods(http.MethodPatch)
}

func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	cmd := notifications.ListNotifications{Auth: authOf(r)}
	var err error
	if cmd.Limit, err = pageLimit(q, projections.MaxPageLimit); err != nil {
		return err
	}
	switch q.Get("unread") {
	case "", "false":
	case "true":
		cmd.UnreadOnly = true
	default:
		return domain.Errorf(domain.CodeInvalidArgument, "unread must be true or false").With("field", "unread")
	}
	if cmd.Before, err = timeCursor(q, "before", "nextBefore"); err != nil {
		return err
	}
	if cmd.BeforeID, err = idCursor(q, "beforeId", "nextBeforeId", domain.PrefixNotification); err != nil {
		return err
	}
	if cmd.BeforeID != "" && cmd.Before.IsZero() {
		return badCursor("before", "nextBefore")
	}
	page, err := s.app.Notifications.ListNotifications.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewNotificationPage(page))
}

// readNotificationsRequest is the body of POST /v1/notifications/read:
// ids, or a cursor (before, beforeId) under which every notification is
// read, or nothing (every notification).
type readNotificationsRequest struct {
	IDs      []string `json:"ids"`
	Before   string   `json:"before"`
	BeforeID string   `json:"beforeId"`
}

func (s *Server) readNotifications(w http.ResponseWriter, r *http.Request) error {
	var body readNotificationsRequest
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	cmd := notifications.MarkNotificationsRead{Auth: authOf(r), IDs: body.IDs, BeforeID: body.BeforeID}
	if body.IDs != nil && (body.Before != "" || body.BeforeID != "") {
		return domain.Errorf(domain.CodeInvalidArgument, "name either ids or a cursor (before, beforeId), not both").With("field", "ids")
	}
	if body.IDs != nil && len(body.IDs) == 0 {
		return domain.Errorf(domain.CodeInvalidArgument, "ids must name at least one notification (omit it to read everything)").With("field", "ids")
	}
	if body.Before != "" {
		t, err := time.Parse(time.RFC3339Nano, body.Before)
		if err != nil {
			return badCursor("before", "nextBefore or a notification's createdAt")
		}
		cmd.Before = t
	}
	if body.BeforeID != "" && (body.Before == "" || !domain.HasPrefix(body.BeforeID, domain.PrefixNotification)) {
		return badCursor("beforeId", "nextBeforeId or a notification's notificationId, with before")
	}
	n, err := s.app.Notifications.MarkNotificationsRead.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NotificationsReadResult{UnreadCount: n})
}

func (s *Server) getNotificationPreferences(w http.ResponseWriter, r *http.Request) error {
	p, err := s.app.Notifications.GetNotificationPreferences.Handle(r.Context(), notifications.GetNotificationPreferences{Auth: authOf(r)})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewNotificationPreferences(p))
}

// patchPreferencesRequest is the body of PATCH
// /v1/me/notification-preferences: what it names changes.
type patchPreferencesRequest struct {
	Email *string                    `json:"email"`
	Kinds map[string]map[string]bool `json:"kinds"`
}

func (s *Server) patchNotificationPreferences(w http.ResponseWriter, r *http.Request) error {
	var body patchPreferencesRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	p, err := s.app.Notifications.SetNotificationPreferences.Handle(r.Context(), notifications.SetNotificationPreferences{Auth: authOf(r),
		Change: domain.NotificationPreferencesChange{Email: body.Email, Kinds: body.Kinds}})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewNotificationPreferences(p))
}
