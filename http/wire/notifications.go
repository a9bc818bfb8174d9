package wire

import (
	"time"

	"phonefleet/commands/notifications"
	"phonefleet/projections"
)

// The shapes of notifications and notification preferences (spec §1 item
// 8; fields not shown by the spec, decided in docs/decisions.md).

// Notification is one notification of the caller.
type Notification struct {
	NotificationID string            `json:"notificationId"`
	Kind           string            `json:"kind"`
	Title          string            `json:"title"`
	Body           string            `json:"body"`
	Subject        map[string]string `json:"subject"`
	CreatedAt      string            `json:"createdAt"`
	Read           bool              `json:"read"`
	ReadAt         *string           `json:"readAt"`
}

// NotificationPage is a page of the caller's notifications, newest first.
type NotificationPage struct {
	Notifications []Notification `json:"notifications"`
	UnreadCount   int            `json:"unreadCount"`
	NextBefore    string         `json:"nextBefore,omitempty"`
	NextBeforeID  string         `json:"nextBeforeId,omitempty"`
}

// CursorTime is the one format of a notification cursor and timestamp:
// RFC 3339 in UTC with exactly six fractional digits.
func CursorTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// NewNotificationPage returns p as the API shows it.
func NewNotificationPage(p projections.NotificationPage) NotificationPage {
	out := NotificationPage{Notifications: make([]Notification, 0, len(p.Items)), UnreadCount: p.UnreadCount}
	for _, v := range p.Items {
		n := Notification{NotificationID: v.NotificationID, Kind: v.Kind, Title: v.Title, Body: v.Body, Subject: v.Subject,
			CreatedAt: CursorTime(v.CreatedAt), Read: v.ReadAt != nil}
		if n.Subject == nil {
			n.Subject = map[string]string{}
		}
		if v.ReadAt != nil {
			s := CursorTime(*v.ReadAt)
			n.ReadAt = &s
		}
		out.Notifications = append(out.Notifications, n)
	}
	if !p.NextBefore.IsZero() {
		out.NextBefore, out.NextBeforeID = CursorTime(p.NextBefore), p.NextBeforeID
	}
	return out
}

// NotificationsReadResult answers POST /v1/notifications/read.
type NotificationsReadResult struct {
	UnreadCount int `json:"unreadCount"`
}

// NotificationKindPreference is one kind's channels.
type NotificationKindPreference struct {
	Kind    string `json:"kind"`
	Console bool   `json:"console"`
	Email   bool   `json:"email"`
}

// NotificationPreferences are the caller's preferences.
type NotificationPreferences struct {
	// Channels are the channels the deployment offers.
	Channels []string                     `json:"channels"`
	Email    *string                      `json:"email"`
	Kinds    []NotificationKindPreference `json:"kinds"`
}

// NewNotificationPreferences returns p as the API shows it.
func NewNotificationPreferences(p notifications.Preferences) NotificationPreferences {
	out := NotificationPreferences{Channels: p.Channels, Kinds: make([]NotificationKindPreference, 0, len(p.Kinds))}
	if p.Email != "" {
		e := p.Email
		out.Email = &e
	}
	for _, k := range p.Kinds {
		out.Kinds = append(out.Kinds, NotificationKindPreference{Kind: k.Kind, Console: k.Console, Email: k.Email})
	}
	return out
}
