package notifications

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListNotifications is a page of the caller's notifications, newest first.
type ListNotifications struct {
	Auth       domain.Auth
	UnreadOnly bool
	// Before, BeforeID: the cursor the previous page returned (zero: the first page).
	Before   time.Time
	BeforeID string
	Limit    int
}

// ListNotificationsHandler handles ListNotifications.
type ListNotificationsHandler struct{ c *Capability }

// Handle answers the page and the unread count. A person's first visit
// records them (with their role) as known to notifications.
func (h ListNotificationsHandler) Handle(ctx context.Context, q ListNotifications) (projections.NotificationPage, error) {
	if err := h.c.person(ctx, q.Auth); err != nil {
		return projections.NotificationPage{}, err
	}
	return h.c.Queries.List(ctx, projections.NotificationFilter{OrgID: q.Auth.OrgID, UserID: q.Auth.UserID,
		UnreadOnly: q.UnreadOnly, Before: q.Before, BeforeID: q.BeforeID, Limit: q.Limit})
}
