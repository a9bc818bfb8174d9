package wire

import (
	"phonefleet/commands/provisioning"
)

// The shapes of billing (/v1/billing). Times are written by
// domain.FormatWebhookTime (RFC 3339 UTC, microseconds); amounts are
// integers in the smallest currency unit, as the price list's.

// UpcomingInvoice is the answer of GET /v1/billing/upcoming: the
// organisation's next invoice, or, when nothing is upcoming, amountDue 0,
// nextInvoiceAt null and no lines.
type UpcomingInvoice struct {
	AmountDue     int64                 `json:"amountDue"`
	Total         int64                 `json:"total"`
	Currency      string                `json:"currency"`
	NextInvoiceAt *string               `json:"nextInvoiceAt"`
	PeriodStart   *string               `json:"periodStart"`
	PeriodEnd     *string               `json:"periodEnd"`
	Lines         []UpcomingInvoiceLine `json:"lines"`
}

// UpcomingInvoiceLine is one line of the upcoming invoice; orderId names
// the order it bills, null for a line of none.
type UpcomingInvoiceLine struct {
	Description string  `json:"description"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	Quantity    int64   `json:"quantity"`
	PeriodStart *string `json:"periodStart"`
	PeriodEnd   *string `json:"periodEnd"`
	OrderID     *string `json:"orderId"`
}

// BillingPortalSession is the answer of POST /v1/billing/portal-sessions.
type BillingPortalSession struct {
	URL string `json:"url"`
}

// NewUpcomingInvoice returns inv as the API shows it.
func NewUpcomingInvoice(inv provisioning.UpcomingInvoice) UpcomingInvoice {
	return UpcomingInvoice{AmountDue: inv.AmountDue, Total: inv.Total, Currency: inv.Currency,
		NextInvoiceAt: optionalTime(inv.NextInvoiceAt), PeriodStart: optionalTime(inv.PeriodStart),
		PeriodEnd: optionalTime(inv.PeriodEnd),
		Lines: each(inv.Lines, func(l provisioning.UpcomingInvoiceLine) UpcomingInvoiceLine {
			var order *string
			if l.OrderID != "" {
				order = &l.OrderID
			}
			return UpcomingInvoiceLine{Description: l.Description, Amount: l.Amount, Currency: l.Currency,
				Quantity: l.Quantity, PeriodStart: optionalTime(l.PeriodStart), PeriodEnd: optionalTime(l.PeriodEnd),
				OrderID: order}
		})}
}
