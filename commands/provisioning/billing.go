package provisioning

import (
	"context"
	"errors"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/payments"
)

// Billing (spec 4.5): the organisation's next invoice (GET
// /v1/billing/upcoming) and the payment provider's billing portal (POST
// /v1/billing/portal-sessions), both read from or opened at the provider
// for the customer recorded on the organisation's billing account. Neither
// changes anything the service records. Both are for signed-in people
// only: an API key never reaches billing (spec 4.1 rule 5) and an OAuth
// app is refused (spec 5.2).

// GetUpcomingInvoice reads the organisation's next invoice from the payment
// provider.
type GetUpcomingInvoice struct {
	Auth domain.Auth
}

// UpcomingInvoice is the organisation's next invoice as the payment
// provider previews it. An organisation the provider has nothing to bill
// (no customer yet, or no invoice upcoming) gets the empty one: nothing
// due, no date, no lines, in the price list's currency.
type UpcomingInvoice struct {
	// AmountDue is what will be charged, in the smallest currency unit
	// (after any customer balance); Total is the invoice total before it.
	AmountDue int64
	Total     int64
	// Currency is the ISO 4217 code, lower case.
	Currency string
	// NextInvoiceAt is when the provider will charge it (its next payment
	// attempt, else the end of the invoice's period); nil when nothing is
	// upcoming.
	NextInvoiceAt *time.Time
	// PeriodStart and PeriodEnd bound what the invoice bills; nil when
	// nothing is upcoming.
	PeriodStart, PeriodEnd *time.Time
	Lines                  []UpcomingInvoiceLine
}

// UpcomingInvoiceLine is one line of the upcoming invoice.
type UpcomingInvoiceLine struct {
	Description string
	// Amount is the line's amount in the smallest currency unit.
	Amount   int64
	Currency string
	Quantity int64
	// PeriodStart and PeriodEnd bound what the line bills; nil when the
	// provider gave none.
	PeriodStart, PeriodEnd *time.Time
	// OrderID is the order the line bills (the order_id the checkout
	// wrote on the subscription), empty for a line of no order of ours.
	OrderID string
}

// OpenBillingPortal opens a session of the payment provider's billing
// portal for the organisation.
type OpenBillingPortal struct {
	Auth domain.Auth
}

// BillingPortalSession is where to send the browser: a single-use address
// of the provider's portal, which sends the browser back under the
// deployment's public URL.
type BillingPortalSession struct {
	URL string
}

// BillingPortalReturnPath is where, under the deployment's public URL
// ({base_url}), the billing portal sends the browser back: the console's
// billing page (a hash route of the one console document).
const BillingPortalReturnPath = "/#/billing"

// NoBillingAccountState is the state a portal refusal names (409
// wrong_state) for an organisation that has no customer at the payment
// provider yet: it has never opened a checkout, so there is nothing to
// manage.
const NoBillingAccountState = "no_billing_account"

// GetUpcomingInvoiceHandler handles GetUpcomingInvoice.
type GetUpcomingInvoiceHandler struct{ *Provisioning }

// Handle answers the organisation's next invoice. Any
// signed-in person of the organisation, of either role, may read it; an
// API key or an OAuth app may not (permission_denied). Without a payment
// provider, or when it does not answer or refuses, it answers 503
// checkout_unavailable; when the billing account cannot be read, 503
// admission_unavailable.
func (p GetUpcomingInvoiceHandler) Handle(ctx context.Context, q GetUpcomingInvoice) (UpcomingInvoice, error) {
	if err := billingSession(q.Auth); err != nil {
		return UpcomingInvoice{}, err
	}
	if p.cfg.Payments == nil {
		return UpcomingInvoice{}, billingNoProvider()
	}
	acc, _, err := p.accounts.Load(ctx, q.Auth.OrgID)
	if err != nil {
		return UpcomingInvoice{}, storeDown(err)
	}
	if acc.CustomerID == "" {
		return emptyUpcomingInvoice(p.cfg.Catalog.Currency), nil
	}
	inv, err := p.cfg.Payments.UpcomingInvoice(ctx, acc.CustomerID)
	return upcomingInvoiceOf(inv, err, p.cfg.Catalog.Currency)
}

// upcomingInvoiceOf turns the provider's preview (or its refusal) into the
// answer: no invoice upcoming is the empty answer, any other failure of
// the provider checkout_unavailable.
func upcomingInvoiceOf(inv payments.Invoice, err error, currency string) (UpcomingInvoice, error) {
	if errors.Is(err, payments.ErrNoUpcomingInvoice) {
		return emptyUpcomingInvoice(currency), nil
	}
	if err != nil {
		return UpcomingInvoice{}, billingProviderError("preview the upcoming invoice", err)
	}
	out := UpcomingInvoice{AmountDue: inv.AmountDue, Total: inv.Total, Currency: inv.Currency,
		PeriodStart: billingTime(inv.PeriodStart), PeriodEnd: billingTime(inv.PeriodEnd),
		Lines: make([]UpcomingInvoiceLine, 0, len(inv.Lines))}
	if out.Currency == "" {
		out.Currency = currency
	}
	out.NextInvoiceAt = billingTime(inv.NextPaymentAttempt)
	if out.NextInvoiceAt == nil {
		out.NextInvoiceAt = out.PeriodEnd
	}
	for _, l := range inv.Lines {
		line := UpcomingInvoiceLine{Description: l.Description, Amount: l.Amount, Currency: l.Currency,
			Quantity: l.Quantity, PeriodStart: billingTime(l.PeriodStart), PeriodEnd: billingTime(l.PeriodEnd),
			OrderID: l.Metadata[payments.MetaOrderID]}
		if line.Currency == "" {
			line.Currency = out.Currency
		}
		out.Lines = append(out.Lines, line)
	}
	return out, nil
}

func emptyUpcomingInvoice(currency string) UpcomingInvoice {
	return UpcomingInvoice{Currency: currency, Lines: []UpcomingInvoiceLine{}}
}

// OpenBillingPortalHandler handles OpenBillingPortal.
type OpenBillingPortalHandler struct{ *Provisioning }

// Handle opens the provider's billing portal for the
// organisation's customer. Only an admin's signed-in session may
// (permission_denied for a member, an API key or an OAuth app). An
// organisation with no customer yet answers 409 wrong_state (state
// no_billing_account); no payment provider, a provider that does not
// answer, or one that refuses (a portal not set up) answers 503
// checkout_unavailable; a billing account that cannot be read, 503
// admission_unavailable.
func (p OpenBillingPortalHandler) Handle(ctx context.Context, c OpenBillingPortal) (BillingPortalSession, error) {
	a := c.Auth
	if err := billingSession(a); err != nil {
		return BillingPortalSession{}, err
	}
	if a.Role != domain.RoleAdmin {
		return BillingPortalSession{}, domain.Errorf(domain.CodePermissionDenied,
			"only an organisation admin may open the billing portal")
	}
	if p.cfg.Payments == nil {
		return BillingPortalSession{}, billingNoProvider()
	}
	acc, _, err := p.accounts.Load(ctx, a.OrgID)
	if err != nil {
		return BillingPortalSession{}, storeDown(err)
	}
	if acc.CustomerID == "" {
		return BillingPortalSession{}, domain.Errorf(domain.CodeWrongState,
			"the organisation has no billing account yet: it is made by the first checkout").
			With("state", NoBillingAccountState).WithRetryable(false)
	}
	returnURL := ""
	if p.cfg.PublicURL != "" {
		returnURL = strings.TrimRight(p.cfg.PublicURL, "/") + BillingPortalReturnPath
	}
	url, err := p.cfg.Payments.CreatePortalSession(ctx, acc.CustomerID, returnURL)
	if err != nil {
		return BillingPortalSession{}, billingProviderError("open the billing portal", err)
	}
	return BillingPortalSession{URL: url}, nil
}

// billingSession admits a signed-in person's session only: an OAuth app is
// told to use the console's billing page, an API key that billing is never
// a key's (spec 4.1 rule 5).
func billingSession(a domain.Auth) error {
	if err := a.DenyApp("billing and the billing portal", "the console's billing page"); err != nil {
		return err
	}
	return a.RequireSession("billing and the billing portal")
}

func billingNoProvider() error {
	return domain.Errorf(domain.CodeCheckoutUnavailable, "no payment provider is configured on this deployment").
		WithRetryable(false)
}

// billingProviderError is checkout_unavailable for a provider that did not
// answer (retryable) or refused what was asked (not retryable: a bad key,
// a billing portal that is not set up); anything else is returned as it
// is.
func billingProviderError(what string, err error) error {
	if errors.Is(err, payments.ErrUnavailable) {
		return domain.Errorf(domain.CodeCheckoutUnavailable, "the payment provider did not answer; retry shortly").
			WithRetryable(true).Wrap(err)
	}
	var refused *payments.RefusedError
	if errors.As(err, &refused) {
		return domain.Errorf(domain.CodeCheckoutUnavailable, "the payment provider refused to %s (is it set up for this?)", what).
			WithRetryable(false).Wrap(err)
	}
	return err
}

// billingTime is t, or nil for the zero time (the provider gave none).
func billingTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
