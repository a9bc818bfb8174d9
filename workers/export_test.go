package workers

// SetAfterSend installs a hook run between sending an attempt and recording
// it (the kill test stops a dispatcher exactly there).
func SetAfterSend(d *WebhookDispatcher, f func(deliveryID string)) { d.afterSend = f }

// SetEmailCommitting installs a hook run after an e-mail send is marked and
// before the message's end goes out (the restart test stops an instance
// there).
func SetEmailCommitting(w *Notifications, f func(notificationID string)) {
	w.email.reaction.(*emailReaction).committing = f
}
