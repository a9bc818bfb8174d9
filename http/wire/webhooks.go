package wire

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of webhook subscriptions and deliveries (spec 2.6), as both
// /v1/webhooks and the MCP webhook tools answer them. Times are written by
// domain.FormatWebhookTime, the one format of webhook payloads, so a
// delivery row and the body it delivered agree to the character.

// Webhook is a subscription as the API shows it (spec 2.6), plus
// disabledReason.
type Webhook struct {
	WebhookID       string   `json:"webhookId"`
	URL             string   `json:"url"`
	Events          []string `json:"events"`
	Enabled         bool     `json:"enabled"`
	DisabledReason  *string  `json:"disabledReason"`
	SecretHint      string   `json:"secretHint"`
	CreatedAt       string   `json:"createdAt"`
	SecretRotatedAt *string  `json:"secretRotatedAt"`
}

// NewWebhook returns v as the API shows it.
func NewWebhook(v projections.WebhookView) Webhook {
	out := Webhook{WebhookID: v.ID, URL: v.URL, Events: v.Events, Enabled: v.Enabled, SecretHint: v.SecretHint,
		CreatedAt: domain.FormatWebhookTime(v.CreatedAt), SecretRotatedAt: optionalTime(v.SecretRotatedAt)}
	if out.Events == nil {
		out.Events = []string{}
	}
	if v.DisabledReason != "" {
		out.DisabledReason = &v.DisabledReason
	}
	return out
}

// WebhookList is the answer of a webhook listing: {"webhooks": […]}.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// NewWebhookList returns views as the API lists them (never null).
func NewWebhookList(views []projections.WebhookView) WebhookList {
	return WebhookList{Webhooks: each(views, NewWebhook)}
}

// WebhookWithSecret answers create and rotate: the secret appears only here.
type WebhookWithSecret struct {
	Webhook Webhook `json:"webhook"`
	Secret  string  `json:"secret"`
}

// NewWebhookWithSecret returns v with its new secret, as create and rotate
// answer it.
func NewWebhookWithSecret(v projections.WebhookView, secret string) WebhookWithSecret {
	return WebhookWithSecret{Webhook: NewWebhook(v), Secret: secret}
}

// TestDelivery answers a test delivery: the delivery queued, still pending.
type TestDelivery struct {
	DeliveryID string `json:"deliveryId"`
	Status     string `json:"status"`
}

// NewTestDelivery returns the answer for the test delivery id just queued.
func NewTestDelivery(deliveryID string) TestDelivery {
	return TestDelivery{DeliveryID: deliveryID, Status: domain.DeliveryPending}
}

func optionalTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := domain.FormatWebhookTime(*t)
	return &s
}

// payloadPreviewBytes is how much of the delivered body a row shows.
const payloadPreviewBytes = 1000

// Delivery is a delivery row (spec 2.6), plus webhookId, event and
// createdAt.
type Delivery struct {
	DeliveryID     string  `json:"deliveryId"`
	WebhookID      string  `json:"webhookId"`
	Event          string  `json:"event"`
	Status         string  `json:"status"`
	Attempts       int     `json:"attempts"`
	ResponseStatus *int    `json:"responseStatus"`
	Error          *string `json:"error"`
	PayloadPreview string  `json:"payloadPreview"`
	CreatedAt      string  `json:"createdAt"`
	LastAttemptAt  *string `json:"lastAttemptAt"`
	NextAttemptAt  *string `json:"nextAttemptAt"`
}

// NewDelivery returns d as the API shows it: the payload cut to its first
// payloadPreviewBytes bytes on a character boundary, with "…" when cut.
func NewDelivery(d projections.DeliveryView) Delivery {
	return Delivery{DeliveryID: d.ID, WebhookID: d.WebhookID, Event: d.Event, Status: d.Status, Attempts: d.Attempts,
		ResponseStatus: d.ResponseStatus, Error: d.Error, PayloadPreview: preview(d.Payload, payloadPreviewBytes),
		CreatedAt: domain.FormatWebhookTime(d.CreatedAt), LastAttemptAt: optionalTime(d.LastAttemptAt), NextAttemptAt: optionalTime(d.NextAttemptAt)}
}

// preview returns body cut to at most n bytes on a character boundary,
// with "…" when it was cut.
func preview(body []byte, n int) string {
	if len(body) <= n {
		return string(body)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut]) + "…"
}

// DeliveryPage is one page of a webhook's deliveries; NextBefore, absent
// on the last page, is the cursor of the next.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	NextBefore string     `json:"nextBefore,omitempty"`
}

// NewDeliveryPage returns p as the API shows it (deliveries never null).
func NewDeliveryPage(p webhooks.DeliveryPage) DeliveryPage {
	page := DeliveryPage{Deliveries: each(p.Deliveries, NewDelivery)}
	if p.Next != nil {
		page.NextBefore = FormatDeliveryCursor(*p.Next)
	}
	return page
}

// FormatDeliveryCursor returns c as the API shows it,
// "<unix microseconds>_<delivery id>": opaque to clients, exact to the
// microsecond so no row is skipped or repeated.
func FormatDeliveryCursor(c projections.DeliveryCursor) string {
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "_" + c.DeliveryID
}

// ParseDeliveryCursor reads a cursor FormatDeliveryCursor wrote; ok is
// false for anything else.
func ParseDeliveryCursor(s string) (c projections.DeliveryCursor, ok bool) {
	micros, id, ok := strings.Cut(s, "_")
	if !ok {
		return projections.DeliveryCursor{}, false
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || !domain.HasPrefix(id, domain.PrefixDelivery) {
		return projections.DeliveryCursor{}, false
	}
	return projections.DeliveryCursor{CreatedAt: time.UnixMicro(n).UTC(), DeliveryID: id}, true
}
