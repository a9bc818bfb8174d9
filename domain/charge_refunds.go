package domain

import "time"

// Refunds the provider reports (charge.refunded). A partial one (less
// than the whole charge refunded) leaves the order standing (its phones
// are refunded one by one), a full one ends it; either way the money is on
// record: each report appends payment.charge_refunded to the charge's own
// stream with the cumulative amount the provider says is refunded (Full
// when it is the whole charge), so a late or repeated delivery never
// lowers what is known (the highest wins).
var chargeRefundEvents = []EventDef{
	Def[ChargeRefunded](1, nil),
}

// ChargeRefundStream is the stream of the refunds recorded on one
// provider charge.
func ChargeRefundStream(chargeID string) string { return "payment-charge-" + chargeID }

// ChargeRefunded records the provider's report of a charge of an order
// refunded: AmountRefunded (cumulative, the smallest currency unit) of
// Amount, Full when that is all of it.
type ChargeRefunded struct {
	OrgID           string    `json:"orgId"`
	OrderID         string    `json:"orderId"`
	ChargeID        string    `json:"chargeId"`
	PaymentIntentID string    `json:"paymentIntentId,omitempty"`
	InvoiceID       string    `json:"invoiceId,omitempty"`
	Amount          int64     `json:"amount"`
	AmountRefunded  int64     `json:"amountRefunded"`
	Currency        string    `json:"currency"`
	Full            bool      `json:"full"`
	ProviderEventID string    `json:"providerEventId"`
	At              time.Time `json:"at"`
}

// EventName implements Event.
func (ChargeRefunded) EventName() string { return "payment.charge_refunded" }
