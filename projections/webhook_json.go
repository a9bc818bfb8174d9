package projections

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"phonefleet/domain"
)

// The JSON shapes of webhook subscriptions and deliveries (spec 2.6), as
// both /v1/webhooks and the MCP webhook tools answer them.

// WebhookJSON is a subscription as the API shows it (spec 2.6), plus
// disabledReason.
type WebhookJSON struct {
	WebhookID       string   `json:"webhookId"`
	URL             string   `json:"url"`
	Events          []string `json:"events"`
	Enabled         bool     `json:"enabled"`
	DisabledReason  *string  `json:"disabledReason"`
	SecretHint      string   `json:"secretHint"`
	CreatedAt       string   `json:"createdAt"`
	SecretRotatedAt *string  `json:"secretRotatedAt"`
}

// JSON returns v as the API shows it.
func (v WebhookView) JSON() WebhookJSON {
	out := WebhookJSON{WebhookID: v.ID, URL: v.URL, Events: v.Events, Enabled: v.Enabled, SecretHint: v.SecretHint,
		CreatedAt: domain.FormatWebhookTime(v.CreatedAt), SecretRotatedAt: optionalTime(v.SecretRotatedAt)}
	if out.Events == nil {
		out.Events = []string{}
	}
	if v.DisabledReason != "" {
		out.DisabledReason = &v.DisabledReason
	}
	return out
}

// WebhooksJSON is the answer of a webhook listing: {"webhooks": […]}.
type WebhooksJSON struct {
	Webhooks []WebhookJSON `json:"webhooks"`
}

// NewWebhooksJSON returns views as the API lists them (never null).
func NewWebhooksJSON(views []WebhookView) WebhooksJSON {
	out := WebhooksJSON{Webhooks: make([]WebhookJSON, len(views))}
	for i, v := range views {
		out.Webhooks[i] = v.JSON()
	}
	return out
}

// WebhookWithSecret answers create and rotate: the secret appears only here.
type WebhookWithSecret struct {
	Webhook WebhookJSON `json:"webhook"`
	Secret  string      `json:"secret"`
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

// DeliveryJSON is a delivery row (spec 2.6), plus webhookId, event and
// createdAt.
type DeliveryJSON struct {
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

// JSON returns d as the API shows it: the payload cut to its first
// payloadPreviewBytes bytes on a character boundary, with "…" when cut.
func (d DeliveryView) JSON() DeliveryJSON {
	return DeliveryJSON{DeliveryID: d.ID, WebhookID: d.WebhookID, Event: d.Event, Status: d.Status, Attempts: d.Attempts,
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
	Deliveries []DeliveryJSON `json:"deliveries"`
	NextBefore string         `json:"nextBefore,omitempty"`
}

// NewDeliveryPage returns rows and the next page's cursor (nil on the last
// page), as WebhookQueries.Deliveries answers them, as the API shows them.
func NewDeliveryPage(rows []DeliveryView, next *DeliveryCursor) DeliveryPage {
	page := DeliveryPage{Deliveries: make([]DeliveryJSON, len(rows))}
	for i, d := range rows {
		page.Deliveries[i] = d.JSON()
	}
	if next != nil {
		page.NextBefore = next.String()
	}
	return page
}

// String returns the cursor as the API shows it, "<unix microseconds>_<delivery id>":
// opaque to clients, exact to the microsecond so no row is skipped or
// repeated.
func (c DeliveryCursor) String() string {
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "_" + c.DeliveryID
}

// ParseDeliveryCursor reads a cursor DeliveryCursor.String wrote; ok is
// false for anything else.
func ParseDeliveryCursor(s string) (c DeliveryCursor, ok bool) {
	micros, id, ok := strings.Cut(s, "_")
	if !ok {
		return DeliveryCursor{}, false
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || !domain.HasPrefix(id, domain.PrefixDelivery) {
		return DeliveryCursor{}, false
	}
	return DeliveryCursor{CreatedAt: time.UnixMicro(n).UTC(), DeliveryID: id}, true
}
