// Package notifications is the notifications capability (spec §1 item 8):
// a person's notifications and their reads, their preferences per kind and
// channel, and the records of the two reactions that raise and e-mail
// notifications (workers.Notifications) and of the key-expiry sweep.
// Every route of it is a person's: an API key or an OAuth app is refused.
package notifications

import (
	"context"
	"maps"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Reaction names, stable: renaming one forgets the claims held.
const (
	// FanoutReaction raises the notifications of a trigger.
	FanoutReaction = "notification-fanout"
	// EmailReaction e-mails a notification.
	EmailReaction = "notification-email"
)

// Capability is the notifications capability: what its commands and
// queries need.
type Capability struct {
	Store   *eventstore.Store
	Queries projections.NotificationQueries
	// ReadModels gives read-your-writes on the notifications read model.
	ReadModels cqrs.ReadModels
	// Now is the clock events are stamped with; nil means clock.Now.
	Now func() time.Time
	// EmailOffered says whether the deployment sends e-mail (SMTP is
	// configured); without it only the console channel is offered.
	EmailOffered bool

	// persons is the one repository of people's streams (its cache is
	// shared by every handler), made by Handlers.
	persons *eventstore.Repository[*domain.NotificationPerson, domain.Event]
}

func (c *Capability) now() time.Time {
	if c.Now == nil {
		return clock.Now().UTC()
	}
	return c.Now().UTC()
}

func (c *Capability) people() *eventstore.Repository[*domain.NotificationPerson, domain.Event] {
	return c.persons
}

func (c *Capability) wait(ctx context.Context, a eventstore.Appended) error {
	return cqrs.Await(ctx, c.ReadModels, a, projections.NotificationsName)
}

// person checks that a is a person (notifications are a person's own,
// spec 5.2) and records them as seen with their role when that is news.
func (c *Capability) person(ctx context.Context, a domain.Auth) error {
	if err := a.RequireSession("Notifications"); err != nil {
		return err
	}
	_, cm, err := c.people().Update(ctx, domain.NotificationPersonID(a.OrgID, a.UserID), func(p **domain.NotificationPerson) ([]domain.Event, error) {
		return (*p).Seen(a.Role, c.now()), nil
	})
	if err != nil || len(cm.Appends) == 0 {
		return err
	}
	return c.wait(ctx, cm.Last())
}

// Handlers are the capability's entry points of the application object.
type Handlers struct {
	ListNotifications          cqrs.Handler[ListNotifications, projections.NotificationPage]
	MarkNotificationsRead      cqrs.Handler[MarkNotificationsRead, int]
	GetNotificationPreferences cqrs.Handler[GetNotificationPreferences, Preferences]
	SetNotificationPreferences cqrs.Handler[SetNotificationPreferences, Preferences]
	// RecordNotificationsRaised is sent by the fan-out reaction.
	RecordNotificationsRaised cqrs.Handler[RecordNotificationsRaised, eventstore.Appended]
	// RecordEmailAttempt is sent by the e-mail reaction.
	RecordEmailAttempt cqrs.Handler[RecordEmailAttempt, eventstore.Appended]
	// RaiseKeyExpiryNotice is sent by the key-expiry sweep.
	RaiseKeyExpiryNotice cqrs.Handler[RaiseKeyExpiryNotice, bool]
}

// Handlers returns the capability's entry points, each behind d.
func (c *Capability) Handlers(d cqrs.Decorator) Handlers {
	c.persons = eventstore.NewRepository(c.Store, personAggregate)
	c.persons.Now = c.now
	return Handlers{
		ListNotifications:          cqrs.Serve(d, ListNotificationsHandler{c}),
		MarkNotificationsRead:      cqrs.Serve(d, MarkNotificationsReadHandler{c}),
		GetNotificationPreferences: cqrs.Serve(d, GetNotificationPreferencesHandler{c}),
		SetNotificationPreferences: cqrs.Serve(d, SetNotificationPreferencesHandler{c}),
		RecordNotificationsRaised:  cqrs.Serve(d, RecordNotificationsRaisedHandler{c}),
		RecordEmailAttempt:         cqrs.Serve(d, RecordEmailAttemptHandler{c}),
		RaiseKeyExpiryNotice:       cqrs.Serve(d, RaiseKeyExpiryNoticeHandler{c}),
	}
}

// personAggregate folds one person's stream.
var personAggregate = eventstore.Aggregate[*domain.NotificationPerson, domain.Event]{
	Stream: domain.NotificationPersonStream,
	Codec:  domain.Events,
	New:    domain.NewNotificationPerson,
	Apply: func(p **domain.NotificationPerson, e domain.Event, _ eventstore.Recorded) {
		(*p).Apply(e)
	},
	OrgID: func(p **domain.NotificationPerson) string { return (*p).OrgID },
	// Every visit to one's notifications loads the person (the bell looks
	// every few seconds): kept in memory, caught up on each load.
	Clone: func(p *domain.NotificationPerson) *domain.NotificationPerson {
		c := *p
		c.Preferences.Kinds = maps.Clone(p.Preferences.Kinds)
		return &c
	},
}
