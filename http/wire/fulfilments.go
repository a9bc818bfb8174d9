package wire

import (
	"encoding/base64"
	"strings"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of fulfilments (/v1/fulfilments) and of the payment
// provider's webhook answer. Times are written by domain.FormatWebhookTime
// (UTC, microseconds), as the webhooks write them.

// Fulfilment is one phone bought as the API shows it. deviceId is null
// unless it is provisioned (spec 3.1: a cancelled one's is null).
type Fulfilment struct {
	FulfilmentID string           `json:"fulfilmentId"`
	OrderID      string           `json:"orderId"`
	State        string           `json:"state"`
	DeviceID     *string          `json:"deviceId"`
	Sku          string           `json:"sku"`
	Billing      string           `json:"billing"`
	Model        *string          `json:"model"`
	Region       *string          `json:"region"`
	AddOns       FulfilmentAddOns `json:"addOns"`
	Currency     string           `json:"currency"`
	// UnitAmount is the phone's price in the smallest currency unit.
	UnitAmount       int64   `json:"unitAmount"`
	CreatedAt        string  `json:"createdAt"`
	ProvisionedAt    *string `json:"provisionedAt"`
	EstimatedBy      *string `json:"estimatedBy"`
	EndsAt           *string `json:"endsAt"`
	RenewalCancelled bool    `json:"renewalCancelled"`
	CancelledAt      *string `json:"cancelledAt"`
	CancelledReason  *string `json:"cancelledReason"`
	// CurrentPeriodEnd is the end of the paid period the payment provider
	// last reported for a subscription phone (null before any report).
	CurrentPeriodEnd *string `json:"currentPeriodEnd"`
}

// FulfilmentAddOns are the add-on intents recorded on the purchase.
type FulfilmentAddOns struct {
	USFixedIP      bool `json:"usFixedIp"`
	PreinstallApps bool `json:"preinstallApps"`
}

// NewFulfilment returns v as the API shows it.
func NewFulfilment(v projections.FulfilmentView) Fulfilment {
	out := Fulfilment{FulfilmentID: v.FulfilmentID, OrderID: v.OrderID, State: v.State, Sku: v.Sku, Billing: v.Billing,
		Model: scheduleOptional(v.Model), Region: scheduleOptional(v.Region),
		AddOns:   FulfilmentAddOns{USFixedIP: v.AddOns.USFixedIP, PreinstallApps: v.AddOns.PreinstallApps},
		Currency: v.Currency, UnitAmount: v.UnitAmount, CreatedAt: domain.FormatWebhookTime(v.CreatedAt),
		ProvisionedAt: optionalTime(v.ProvisionedAt), EstimatedBy: optionalTime(v.EstimatedBy), EndsAt: optionalTime(v.EndsAt),
		RenewalCancelled: v.RenewalCancelled, CancelledAt: optionalTime(v.CancelledAt),
		CancelledReason: scheduleOptional(v.CancelledReason), CurrentPeriodEnd: optionalTime(v.PeriodEnd)}
	if v.State == domain.FulfilmentProvisionedState {
		out.DeviceID = scheduleOptional(v.DeviceID)
	}
	return out
}

// FulfilmentPage is one page of fulfilments, newest first.
type FulfilmentPage struct {
	Fulfilments []Fulfilment `json:"fulfilments"`
	// NextCursor, on every page but the last, is passed back as ?cursor=.
	NextCursor string `json:"nextCursor,omitempty"`
}

// NewFulfilmentPage returns p as the API lists it (never null).
func NewFulfilmentPage(p projections.FulfilmentPage) FulfilmentPage {
	out := FulfilmentPage{Fulfilments: each(p.Fulfilments, NewFulfilment)}
	if p.Next != nil {
		out.NextCursor = EncodeFulfilmentCursor(*p.Next)
	}
	return out
}

// EncodeFulfilmentCursor writes a list cursor as one opaque string.
func EncodeFulfilmentCursor(c projections.FulfilmentCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + c.FulfilmentID))
}

// DecodeFulfilmentCursor reads a cursor EncodeFulfilmentCursor wrote; ok is
// false for anything else. Only the one spelling EncodeFulfilmentCursor
// writes is read: another (a time with an offset, a year that moves past
// 0000 or 9999 in UTC) would name a position no page can answer with
// again.
func DecodeFulfilmentCursor(s string) (c projections.FulfilmentCursor, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, false
	}
	at, id, found := strings.Cut(string(b), " ")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !found || err != nil || id == "" {
		return c, false
	}
	c = projections.FulfilmentCursor{CreatedAt: t.UTC(), FulfilmentID: id}
	if EncodeFulfilmentCursor(c) != s {
		return projections.FulfilmentCursor{}, false
	}
	return c, true
}

// FulfilmentEstimate is one delivery estimate given for a phone.
type FulfilmentEstimate struct {
	EstimatedBy string `json:"estimatedBy"`
	// Reason is awaiting_provisioning for the first promise, or why the
	// estimate moved (estimate_missed: the last one passed with no unit
	// free).
	Reason  string `json:"reason"`
	GivenAt string `json:"givenAt"`
}

// FulfilmentEstimateHistory is a phone's estimates over time.
type FulfilmentEstimateHistory struct {
	FulfilmentID string `json:"fulfilmentId"`
	State        string `json:"state"`
	// EstimatedBy is the estimate in force (null unless awaiting
	// provisioning).
	EstimatedBy *string              `json:"estimatedBy"`
	Estimates   []FulfilmentEstimate `json:"estimates"`
}

// NewFulfilmentEstimateHistory returns e as the API shows it.
func NewFulfilmentEstimateHistory(e provisioning.FulfilmentEstimates) FulfilmentEstimateHistory {
	return FulfilmentEstimateHistory{FulfilmentID: e.Fulfilment.FulfilmentID, State: e.Fulfilment.State,
		EstimatedBy: optionalTime(e.Fulfilment.EstimatedBy),
		Estimates: each(e.Estimates, func(v projections.EstimateView) FulfilmentEstimate {
			return FulfilmentEstimate{EstimatedBy: domain.FormatWebhookTime(v.EstimatedBy), Reason: v.Reason,
				GivenAt: domain.FormatWebhookTime(v.At)}
		})}
}

// FulfilmentRenewal says whether a phone renews and when.
type FulfilmentRenewal struct {
	FulfilmentID string `json:"fulfilmentId"`
	State        string `json:"state"`
	Billing      string `json:"billing"`
	// Renews is true for a live subscription phone whose renewal is not
	// cancelled; NextRenewalAt is then its next renewal.
	Renews           bool    `json:"renews"`
	RenewalCancelled bool    `json:"renewalCancelled"`
	NextRenewalAt    *string `json:"nextRenewalAt"`
	// EndsAt is when a live phone ends by itself (a day pass, a
	// subscription whose renewal was cancelled).
	EndsAt *string `json:"endsAt"`
}

// NewFulfilmentRenewal returns r as the API shows it.
func NewFulfilmentRenewal(r provisioning.FulfilmentRenewal) FulfilmentRenewal {
	return FulfilmentRenewal{FulfilmentID: r.Fulfilment.FulfilmentID, State: r.Fulfilment.State, Billing: r.Fulfilment.Billing,
		Renews: r.Renews, RenewalCancelled: r.Fulfilment.RenewalCancelled,
		NextRenewalAt: optionalZeroTime(r.NextRenewalAt), EndsAt: optionalZeroTime(r.EndsAt)}
}

// optionalZeroTime writes t, or null for the zero time.
func optionalZeroTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return optionalTime(&t)
}

// ProviderEventReceived is the payment provider webhook's 200 answer.
type ProviderEventReceived struct {
	Received bool   `json:"received"`
	EventID  string `json:"eventId"`
	Type     string `json:"type"`
	// Outcome is applied, duplicate (applied before: nothing changed) or
	// ignored (not acted on).
	Outcome string `json:"outcome"`
}

// NewProviderEventReceived returns r as the webhook answers it.
func NewProviderEventReceived(r provisioning.ProviderEventReceipt) ProviderEventReceived {
	return ProviderEventReceived{Received: true, EventID: r.EventID, Type: r.Type, Outcome: r.Outcome}
}
