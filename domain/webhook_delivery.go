package domain

import (
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Delivery statuses. The spec names pending and failed; a delivery that got
// a 2xx answer needs a name of its own and is delivered.
const (
	// DeliveryPending: never tried, or waiting to retry.
	DeliveryPending = "pending"
	// DeliveryDelivered: an attempt got a 2xx answer.
	DeliveryDelivered = "delivered"
	// DeliveryFailed: every attempt is spent, or the subscription was
	// switched off while the delivery waited (its retries abandoned).
	DeliveryFailed = "failed"
)

// Attempt outcomes recorded in WebhookDeliveryAttempted.Outcome.
const (
	WebhookDelivered = "delivered"
	WebhookRetrying  = "retrying"
	WebhookGaveUp    = "gave_up"
)

// Why an attempt got no HTTP answer (WebhookDeliveryAttempted.Error and the
// delivery row's error).
const (
	WebhookErrorTimeout           = "timeout"
	WebhookErrorConnectionRefused = "connection_refused"
	WebhookErrorUnresolvedName    = "unresolved_name"
	WebhookErrorPrivateAddress    = "private_address"
	WebhookErrorTLS               = "tls_failed"
	WebhookErrorConnection        = "connection_failed"
	// WebhookErrorSecret: the stored secret could not be opened with this
	// server's key, so nothing was sent (an operator's fault, retried).
	WebhookErrorSecret = "secret_unreadable"
)

// The delivery schedule (spec 6 and 8).
const (
	// WebhookMaxAttempts is how many attempts a delivery gets in all.
	WebhookMaxAttempts = 5
	// WebhookAttemptTimeout bounds one attempt, connection to answer.
	WebhookAttemptTimeout = 10 * time.Second
)

// WebhookRetryGaps are the waits after attempts 1 to 4 (about 25 minutes in all).
var WebhookRetryGaps = [WebhookMaxAttempts - 1]time.Duration{30 * time.Second, 2 * time.Minute, 5 * time.Minute, 18 * time.Minute}

// deliveryNamespace is the UUIDv5 namespace of delivery ids. Never change
// it: every recorded delivery id depends on it.
var deliveryNamespace = uuid.MustParse("5f0c4f0e-3d0a-4b8e-9d53-6a1f1e2b7c41")

// DeliveryID derives the id of the delivery of source event eventID to
// subscription webhookID: dlv_ and the hex of a UUIDv5 of the pair, the
// same shape as NewID. The same pair always gives the same id, so a
// rebuilt outbox never mints new ids and Service-Delivery is stable.
func DeliveryID(webhookID string, eventID uuid.UUID) string {
	u := uuid.NewSHA1(deliveryNamespace, []byte(webhookID+"/"+eventID.String()))
	return PrefixDelivery + "_" + hex.EncodeToString(u[:])
}

// DeliveryStream is the stream of one delivery's attempt events; its
// version is the number of attempts recorded.
func DeliveryStream(deliveryID string) string { return "delivery-" + deliveryID }

// DecideWebhookAttempt records attempt number attempt (1-based) made at at.
// status is the HTTP status answered, 0 when none came, in which case
// errCode says why. A 2xx delivers; anything else (a 30x included) retries
// after the next gap, until the fifth attempt gives up.
func DecideWebhookAttempt(deliveryID, webhookID string, attempt int, at time.Time, status int, errCode string) WebhookDeliveryAttempted {
	e := WebhookDeliveryAttempted{DeliveryID: deliveryID, WebhookID: webhookID, Attempt: attempt, AttemptedAt: at.UTC().Truncate(time.Microsecond)}
	if status != 0 {
		s := status
		e.ResponseStatus = &s
	} else {
		if errCode == "" {
			errCode = WebhookErrorConnection
		}
		e.Error = errCode
	}
	switch {
	case status >= 200 && status <= 299:
		e.Outcome = WebhookDelivered
	case attempt >= WebhookMaxAttempts:
		e.Outcome = WebhookGaveUp
	default:
		e.Outcome = WebhookRetrying
		next := e.AttemptedAt.Add(WebhookRetryGaps[max(attempt, 1)-1])
		e.NextAttemptAt = &next
	}
	return e
}

// WebhookBody is the JSON body of a delivery (spec 6): the same bytes on
// every attempt, signed as they are.
type WebhookBody struct {
	DeliveryID string          `json:"deliveryId"`
	Event      string          `json:"event"`
	OccurredAt string          `json:"occurredAt"`
	Data       json.RawMessage `json:"data"`
}

// EncodeWebhookBody returns the body of delivery deliveryID of webhook
// event name, whose source event occurred at occurredAt. data is encoded
// with sorted keys, so the bytes depend on the inputs only.
func EncodeWebhookBody(deliveryID, event string, occurredAt time.Time, data map[string]any) ([]byte, error) {
	d, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(WebhookBody{DeliveryID: deliveryID, Event: event, OccurredAt: FormatWebhookTime(occurredAt), Data: d})
}
