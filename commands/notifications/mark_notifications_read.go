package notifications

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// MaxReadIDs bounds the ids one read names.
const MaxReadIDs = 200

// MarkNotificationsRead marks the caller's notifications read: those named
// by IDs, or (no ids) every one before the cursor (Before, BeforeID), or
// every one when the cursor is zero.
type MarkNotificationsRead struct {
	Auth     domain.Auth
	IDs      []string
	Before   time.Time
	BeforeID string
}

// MarkNotificationsReadHandler handles MarkNotificationsRead.
type MarkNotificationsReadHandler struct{ c *Capability }

// Handle records notification.read and answers the unread count once the
// read model applied it. Ids that name none of the caller's notifications
// are ignored (another person's or organisation's are not told apart from
// missing ones). Errors: invalid_argument (field ids).
func (h MarkNotificationsReadHandler) Handle(ctx context.Context, cmd MarkNotificationsRead) (int, error) {
	a := cmd.Auth
	if err := a.RequireSession("Notifications"); err != nil {
		return 0, err
	}
	if len(cmd.IDs) > MaxReadIDs {
		return 0, domain.Errorf(domain.CodeInvalidArgument, "ids names at most %d notifications", MaxReadIDs).With("field", "ids")
	}
	for _, id := range cmd.IDs {
		if !domain.HasPrefix(id, domain.PrefixNotification) {
			return 0, domain.Errorf(domain.CodeInvalidArgument, "ids must be notification ids (ntf_…)").With("field", "ids")
		}
	}
	ev := domain.NotificationsRead{UserID: a.UserID, IDs: cmd.IDs, At: h.c.now()}
	if len(cmd.IDs) == 0 && !cmd.Before.IsZero() {
		before := cmd.Before.UTC()
		ev.Before, ev.BeforeID = &before, cmd.BeforeID
	}
	news, err := eventstore.Encode(domain.Events, a.OrgID, domain.Event(ev))
	if err != nil {
		return 0, err
	}
	cm, err := h.c.Store.Commit(ctx, (&eventstore.Unit{}).Append(domain.NotificationReadsStream(a.OrgID, a.UserID), eventstore.AnyVersion, news...))
	if err != nil {
		return 0, err
	}
	if err := h.c.wait(ctx, cm.Last()); err != nil {
		return 0, err
	}
	return h.c.Queries.UnreadCount(ctx, a.OrgID, a.UserID)
}
