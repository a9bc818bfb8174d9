package domain

import "time"

// webhookEvents are the events of webhook subscriptions, deliveries and attempts.
//
// Subscription events live in one stream per organisation
// (WebhookStream), so the per-organisation cap is decided against a
// consistent count; attempt events live in one stream per delivery
// (DeliveryStream), whose version is the number of attempts recorded, so
// one attempt can never be recorded twice.
var webhookEvents = []EventDef{
	Def[WebhookSubscribed](1, nil),
	Def[WebhookEnabled](1, nil),
	Def[WebhookDisabled](1, nil),
	Def[WebhookSecretRotated](1, nil),
	Def[WebhookDeleted](1, nil),
	Def[WebhookTestRequested](1, nil),
	Def[WebhookDeliveryAttempted](1, nil),
}

// WebhookCreator records who made a subscription: the principal kind and,
// for an OAuth app, its client id and the person it acted for. Apps see
// only the subscriptions whose creator is that same app and person.
type WebhookCreator struct {
	Kind     PrincipalKind `json:"kind"`
	UserID   string        `json:"userId,omitempty"`
	APIKeyID string        `json:"apiKeyId,omitempty"`
	ClientID string        `json:"clientId,omitempty"`
}

// WebhookSubscribed records a new subscription. The signing secret is
// stored only sealed (AES-GCM under the server key, see SecretBox); the
// hint is its last four characters.
type WebhookSubscribed struct {
	WebhookID    string         `json:"webhookId"`
	URL          string         `json:"url"`
	Events       []string       `json:"events"`
	SealedSecret []byte         `json:"sealedSecret"`
	SecretHint   string         `json:"secretHint"`
	CreatedBy    WebhookCreator `json:"createdBy"`
}

// EventName implements Event.
func (WebhookSubscribed) EventName() string { return "webhook.subscribed" }

// WebhookEnabled records that a subscription was switched on.
type WebhookEnabled struct {
	WebhookID string `json:"webhookId"`
}

// EventName implements Event.
func (WebhookEnabled) EventName() string { return "webhook.enabled" }

// WebhookDisabled records that a subscription was switched off, and why
// (WebhookDisabledByUser or WebhookDisabledPersonLeft). Deliveries still
// queued for it are abandoned.
type WebhookDisabled struct {
	WebhookID string `json:"webhookId"`
	Reason    string `json:"reason"`
}

// EventName implements Event.
func (WebhookDisabled) EventName() string { return "webhook.disabled" }

// WebhookSecretRotated records a new signing secret; the old one stops
// signing at once.
type WebhookSecretRotated struct {
	WebhookID    string `json:"webhookId"`
	SealedSecret []byte `json:"sealedSecret"`
	SecretHint   string `json:"secretHint"`
}

// EventName implements Event.
func (WebhookSecretRotated) EventName() string { return "webhook.secret_rotated" }

// WebhookDeleted records that a subscription was removed. Its delivery
// rows leave the read side; its events remain.
type WebhookDeleted struct {
	WebhookID string `json:"webhookId"`
}

// EventName implements Event.
func (WebhookDeleted) EventName() string { return "webhook.deleted" }

// WebhookTestRequested asks for one test delivery to one subscription. The
// outbox turns it into a run.ended delivery with data.test true (see
// WebhookSourceFor); the run ids in it are invented for the test and name
// no real run.
type WebhookTestRequested struct {
	WebhookID  string `json:"webhookId"`
	AgentRunID string `json:"agentRunId"`
	RunID      string `json:"runId"`
}

// EventName implements Event.
func (WebhookTestRequested) EventName() string { return "webhook.test_requested" }

// WebhookDeliveryAttempted records one attempt to deliver and its outcome.
// ResponseStatus is nil when no HTTP answer came, and Error then says why
// (one of the WebhookError… values). Outcome is WebhookDelivered,
// WebhookRetrying (NextAttemptAt set) or WebhookGaveUp.
type WebhookDeliveryAttempted struct {
	DeliveryID     string     `json:"deliveryId"`
	WebhookID      string     `json:"webhookId"`
	Attempt        int        `json:"attempt"`
	AttemptedAt    time.Time  `json:"attemptedAt"`
	ResponseStatus *int       `json:"responseStatus"`
	Error          string     `json:"error,omitempty"`
	Outcome        string     `json:"outcome"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt,omitempty"`
}

// EventName implements Event.
func (WebhookDeliveryAttempted) EventName() string { return "webhook.delivery_attempted" }
