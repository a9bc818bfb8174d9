package notifications

import (
	"context"

	"phonefleet/domain"
)

// Preferences are a person's notification preferences as answered: the
// channels the deployment offers, the address, and per kind the channels on.
type Preferences struct {
	// Channels are the channels the deployment offers (console; email when
	// SMTP is configured).
	Channels []string
	Email    string
	// Kinds lists every kind, in domain.NotificationKinds order.
	Kinds []KindPreference
}

// KindPreference is one kind's channels.
type KindPreference struct {
	Kind string
	domain.NotificationChannels
}

func (c *Capability) preferences(p domain.NotificationPreferences) Preferences {
	out := Preferences{Channels: []string{domain.ChannelConsole}, Email: p.Email}
	if c.EmailOffered {
		out.Channels = append(out.Channels, domain.ChannelEmail)
	}
	for _, k := range domain.NotificationKinds {
		ch, ok := p.Kinds[k]
		if !ok {
			ch = domain.NotificationChannels{Console: true, Email: true}
		}
		if !c.EmailOffered {
			ch.Email = false
		}
		out.Kinds = append(out.Kinds, KindPreference{Kind: k, NotificationChannels: ch})
	}
	return out
}

// GetNotificationPreferences reads the caller's preferences.
type GetNotificationPreferences struct{ Auth domain.Auth }

// GetNotificationPreferencesHandler handles GetNotificationPreferences.
type GetNotificationPreferencesHandler struct{ c *Capability }

// Handle answers the caller's preferences (every channel on until changed).
func (h GetNotificationPreferencesHandler) Handle(ctx context.Context, q GetNotificationPreferences) (Preferences, error) {
	if err := h.c.person(ctx, q.Auth); err != nil {
		return Preferences{}, err
	}
	p, _, err := h.c.people().Load(ctx, domain.NotificationPersonID(q.Auth.OrgID, q.Auth.UserID))
	if err != nil {
		return Preferences{}, err
	}
	return h.c.preferences(p.Preferences), nil
}

// SetNotificationPreferences changes the caller's preferences: what the
// change names, the rest stays.
type SetNotificationPreferences struct {
	Auth   domain.Auth
	Change domain.NotificationPreferencesChange
}

// SetNotificationPreferencesHandler handles SetNotificationPreferences.
type SetNotificationPreferencesHandler struct{ c *Capability }

// Handle records the preferences and answers them. Errors:
// invalid_argument (field email, kinds.<kind>[.<channel>]); switching the
// e-mail channel on, or setting an address, where the deployment sends no
// e-mail is invalid_argument too.
func (h SetNotificationPreferencesHandler) Handle(ctx context.Context, cmd SetNotificationPreferences) (Preferences, error) {
	a := cmd.Auth
	if err := a.RequireSession("Notification preferences"); err != nil {
		return Preferences{}, err
	}
	if !h.c.EmailOffered {
		if cmd.Change.Email != nil && *cmd.Change.Email != "" {
			return Preferences{}, domain.Errorf(domain.CodeInvalidArgument, "this deployment sends no e-mail (no SMTP server is configured); only the console channel is offered").With("field", "email")
		}
		for k, chs := range cmd.Change.Kinds {
			if chs[domain.ChannelEmail] {
				return Preferences{}, domain.Errorf(domain.CodeInvalidArgument, "this deployment sends no e-mail (no SMTP server is configured); only the console channel is offered").With("field", "kinds."+k+".email")
			}
		}
	}
	p, cm, err := h.c.people().Update(ctx, domain.NotificationPersonID(a.OrgID, a.UserID), func(p **domain.NotificationPerson) ([]domain.Event, error) {
		return (*p).SetPreferences(a.Role, cmd.Change, h.c.now())
	})
	if err != nil {
		return Preferences{}, err
	}
	if err := h.c.wait(ctx, cm.Last()); err != nil {
		return Preferences{}, err
	}
	return h.c.preferences(p.Preferences), nil
}
