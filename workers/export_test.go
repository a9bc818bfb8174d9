package workers

import (
	"context"
	"time"
)

// SetAfterSend installs a hook run between sending an attempt and recording
// it (the kill test stops a dispatcher exactly there).
func SetAfterSend(d *WebhookDispatcher, f func(deliveryID string)) { d.afterSend = f }

// CleanupEmail runs the e-mail reaction's cleanup (a reactor runs it once
// a minute).
func CleanupEmail(ctx context.Context, w *Notifications, now time.Time) error {
	return w.email.reaction.(ClaimCleaner).Cleanup(ctx, now)
}
