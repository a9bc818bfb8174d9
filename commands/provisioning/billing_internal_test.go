package provisioning

import (
	"fmt"
	"testing"
	"time"

	"phonefleet/internal/payments"
)

// TestUpcomingInvoiceOf covers the answers stripe-mock cannot give: its
// preview always has an invoice, so "nothing upcoming" (Stripe's
// invoice_upcoming_none, which payments reports as ErrNoUpcomingInvoice)
// and a preview with no payment attempt date are checked on the mapping
// itself.
func TestUpcomingInvoiceOf(t *testing.T) {
	none := fmt.Errorf("%w: preview upcoming invoice: %w", payments.ErrNoUpcomingInvoice, &payments.RefusedError{Status: 404, Code: "invoice_upcoming_none"})
	inv, err := upcomingInvoiceOf(payments.Invoice{}, none, "eur")
	if err != nil {
		t.Fatal(err)
	}
	if inv.AmountDue != 0 || inv.Currency != "eur" || inv.NextInvoiceAt != nil || inv.PeriodEnd != nil || inv.Lines == nil || len(inv.Lines) != 0 {
		t.Errorf("nothing upcoming: got %+v; want the empty answer in eur", inv)
	}

	end := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	inv, err = upcomingInvoiceOf(payments.Invoice{AmountDue: 9900, Total: 9900, Currency: "eur", PeriodStart: end.AddDate(0, -1, 0), PeriodEnd: end,
		Lines: []payments.InvoiceLine{{Description: "1 × Cloud phone", Amount: 9900, Quantity: 1, PeriodStart: end, PeriodEnd: end.AddDate(0, 1, 0),
			Metadata: map[string]string{payments.MetaOrderID: "ord_1", payments.MetaOrgID: "org_1"}}}}, nil, "eur")
	if err != nil {
		t.Fatal(err)
	}
	if inv.NextInvoiceAt == nil || !inv.NextInvoiceAt.Equal(end) {
		t.Errorf("got nextInvoiceAt %v; want the period's end %v when no payment attempt is planned", inv.NextInvoiceAt, end)
	}
	if len(inv.Lines) != 1 || inv.Lines[0].OrderID != "ord_1" || inv.Lines[0].Currency != "eur" {
		t.Errorf("got lines %+v; want one line of ord_1 in the invoice's currency", inv.Lines)
	}
}
