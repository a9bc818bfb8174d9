package service

import (
	"context"
	"fmt"

	"phonefleet/commands/notifications"
	"phonefleet/internal/smtpmail"
	"phonefleet/projections"
	"phonefleet/workers"
)

// notificationProjections are the read models of notifications.
func notificationProjections() []projections.Projection {
	return []projections.Projection{projections.Notifications{}}
}

// wireNotifications builds the notifications capability; with
// SERVICE_SMTP_URL set it also offers the e-mail channel.
func (a *App) wireNotifications(context.Context) error {
	if a.cfg.SMTPURL != "" {
		m, err := smtpmail.ParseURL(a.cfg.SMTPURL)
		if err != nil {
			return fmt.Errorf("invalid SERVICE_SMTP_URL: %w", err)
		}
		a.mail = &m
	}
	a.capabilities.Notifications = &notifications.Capability{Store: a.store, Queries: projections.NotificationQueries{DB: a.db.Pool},
		ReadModels: a.runner, EmailOffered: a.mail != nil}
	return nil
}

// serveNotifications adds the notification workers (the fan-out and
// e-mail reactions, the key-expiry sweep), recording through the
// application object; a hosted deployment's fan-out tells of the copilot
// allowance against the price list's allowance.
func (a *App) serveNotifications(context.Context) error {
	cfg := workers.NotificationsConfig{Pool: a.db.Pool, App: a.app.Notifications, Mail: a.mail,
		Logger: a.logger.With("worker", "notifications"), CopilotMetered: a.cfg.Mode == "hosted"}
	// The copilot allowance's notices meter as the copilot does (wireCopilot).
	if a.capabilities.Provisioning != nil {
		cfg.CopilotTokensPerDevice = a.capabilities.Provisioning.Catalog().CopilotTokensPerDevice
	}
	a.notifications = workers.NewNotifications(cfg)
	a.workers = append(a.workers, a.notifications.Runs()...)
	return nil
}
