package workers

// SetAfterSend installs a hook run between sending an attempt and recording
// it (the kill test stops a dispatcher exactly there).
func SetAfterSend(d *WebhookDispatcher, f func(deliveryID string)) { d.afterSend = f }
