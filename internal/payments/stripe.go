package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"
)

// Config configures a Stripe provider.
type Config struct {
	// SecretKey is the secret API key (sk_live_…, sk_test_…, or any
	// sk_test_ value for stripe-mock). Empty: every call answers
	// ErrUnavailable (no payment provider configured).
	SecretKey string
	// APIBase is the API's base URL, such as http://127.0.0.1:12111 for
	// stripe-mock; empty is Stripe's real API.
	APIBase string
	// HTTPClient makes the requests; nil is a client with a 30 s timeout.
	HTTPClient *http.Client
	// MaxNetworkRetries is how often stripe-go repeats a request that got
	// no answer, a 409, a 5xx, or a Stripe-Should-Retry: true. Zero is
	// stripe-go's default (2); negative is none. Every repeated write
	// carries an Idempotency-Key (the caller's, or one stripe-go makes for
	// that one call), so a repeat never performs the write twice.
	MaxNetworkRetries int
}

// Stripe is the Provider backed by Stripe through stripe-go.
type Stripe struct {
	api *client.API
	key string
}

var _ Provider = (*Stripe)(nil)

// New returns a Stripe provider with a backend of its own: nothing is read
// from or written to stripe-go's package-level configuration.
func New(cfg Config) *Stripe {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	base := cfg.APIBase
	if base == "" {
		base = stripe.APIURL
	}
	retries := int64(cfg.MaxNetworkRetries)
	switch {
	case cfg.MaxNetworkRetries == 0:
		retries = stripe.DefaultMaxNetworkRetries
	case cfg.MaxNetworkRetries < 0:
		retries = 0
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(strings.TrimRight(base, "/")),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(retries),
		// The caller decides what to log; stripe-go would print to stderr.
		LeveledLogger:   &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry: stripe.Bool(false),
	})
	api := client.New(cfg.SecretKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
	return &Stripe{api: api, key: cfg.SecretKey}
}

// configured refuses calls when no key is set, before anything is sent.
func (s *Stripe) configured() error {
	if s.key == "" {
		return fmt.Errorf("%w: no secret key configured", ErrUnavailable)
	}
	return nil
}

// CreateCheckoutSession opens a hosted payment page with the price inline
// (the price list is our catalog file, not Stripe's products).
func (s *Stripe) CreateCheckoutSession(ctx context.Context, r CheckoutRequest) (CheckoutSession, error) {
	if err := s.configured(); err != nil {
		return CheckoutSession{}, err
	}
	if err := r.validate(); err != nil {
		return CheckoutSession{}, err
	}
	meta := make(map[string]string, len(r.Metadata)+2)
	for k, v := range r.Metadata {
		meta[k] = v
	}
	meta[MetaOrgID] = r.OrgID
	meta[MetaOrderID] = r.OrderID

	p := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(r.Mode),
		ClientReferenceID: stripe.String(r.OrderID),
		SuccessURL:        stripe.String(r.SuccessURL),
		Currency:          stripe.String(r.Currency),
		Metadata:          meta,
	}
	p.Context = ctx
	if r.CancelURL != "" {
		p.CancelURL = stripe.String(r.CancelURL)
	}
	if r.CustomerID != "" {
		p.Customer = stripe.String(r.CustomerID)
	}
	if !r.ExpiresAt.IsZero() {
		p.ExpiresAt = stripe.Int64(r.ExpiresAt.Unix())
	}
	if r.IdempotencyKey != "" {
		p.SetIdempotencyKey(r.IdempotencyKey)
	}
	line := func(recurring *stripe.CheckoutSessionLineItemPriceDataRecurringParams) []*stripe.CheckoutSessionLineItemParams {
		return []*stripe.CheckoutSessionLineItemParams{{
			PriceData: &stripe.CheckoutSessionLineItemPriceDataParams{
				Currency:    stripe.String(r.Currency),
				UnitAmount:  stripe.Int64(r.UnitAmount),
				ProductData: &stripe.CheckoutSessionLineItemPriceDataProductDataParams{Name: stripe.String(r.ProductName)},
				Recurring:   recurring,
			},
			Quantity: stripe.Int64(int64(r.Quantity)),
		}}
	}
	switch r.Mode {
	case ModePayment:
		p.LineItems = line(nil)
		p.PaymentIntentData = &stripe.CheckoutSessionPaymentIntentDataParams{Metadata: meta}
	case ModeSubscription:
		interval := r.Interval
		if interval == "" {
			interval = "month"
		}
		p.LineItems = line(&stripe.CheckoutSessionLineItemPriceDataRecurringParams{Interval: stripe.String(interval)})
		p.SubscriptionData = &stripe.CheckoutSessionSubscriptionDataParams{Metadata: meta}
	case ModeSetup:
		p.SetupIntentData = &stripe.CheckoutSessionSetupIntentDataParams{Metadata: meta}
	}
	cs, err := s.api.CheckoutSessions.New(p)
	if err != nil {
		return CheckoutSession{}, classify(ctx, "create checkout session", err)
	}
	return checkoutSession(cs), nil
}

// validate refuses a request Stripe would refuse anyway, before sending it.
func (r CheckoutRequest) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("payments: invalid checkout request: "+format, args...)
	}
	switch r.Mode {
	case ModePayment, ModeSubscription:
		if r.Quantity < 1 {
			return bad("quantity %d, want at least 1", r.Quantity)
		}
		if r.UnitAmount < 0 {
			return bad("unit amount %d, want at least 0", r.UnitAmount)
		}
		if r.ProductName == "" {
			return bad("no product name")
		}
	case ModeSetup:
	default:
		return bad("mode %q, want %s, %s or %s", r.Mode, ModePayment, ModeSubscription, ModeSetup)
	}
	switch {
	case r.OrgID == "" || r.OrderID == "":
		return bad("no organisation or order id")
	case r.Currency == "":
		return bad("no currency")
	case r.SuccessURL == "":
		return bad("no success URL")
	case len(r.IdempotencyKey) > 255:
		return bad("idempotency key longer than 255 characters")
	}
	return nil
}

// ExpireCheckoutSession makes an open session unpayable.
func (s *Stripe) ExpireCheckoutSession(ctx context.Context, sessionID string) error {
	if err := s.configured(); err != nil {
		return err
	}
	p := &stripe.CheckoutSessionExpireParams{}
	p.Context = ctx
	_, err := s.api.CheckoutSessions.Expire(sessionID, p)
	if err == nil {
		return nil
	}
	err = classify(ctx, "expire checkout session", err)
	// Stripe answers 400 for a session that is not open (complete or
	// already expired) and 404 for one it does not know: either way it
	// cannot be made unpayable.
	var refused *RefusedError
	if errors.As(err, &refused) && (refused.Status == http.StatusBadRequest || refused.Status == http.StatusNotFound) {
		return fmt.Errorf("%w: %w", ErrNotExpirable, err)
	}
	return err
}

// CheckoutSession reads a session (Stripe's retrieve).
func (s *Stripe) CheckoutSession(ctx context.Context, sessionID string) (CheckoutSession, error) {
	if err := s.configured(); err != nil {
		return CheckoutSession{}, err
	}
	p := &stripe.CheckoutSessionParams{}
	p.Context = ctx
	cs, err := s.api.CheckoutSessions.Get(sessionID, p)
	if err != nil {
		return CheckoutSession{}, classify(ctx, "read checkout session", err)
	}
	return checkoutSession(cs), nil
}

// customerKey is the idempotency key of an organisation's customer
// creation: two first checkouts at once create one customer (Stripe keeps
// keys for 24 hours; the caller records the id well within that).
func customerKey(orgID string) string { return "phonefleet-customer-" + orgID }

// EnsureCustomer returns existingID, or creates the organisation's
// customer when there is none yet.
func (s *Stripe) EnsureCustomer(ctx context.Context, orgID, existingID string) (string, error) {
	if existingID != "" {
		return existingID, nil
	}
	if err := s.configured(); err != nil {
		return "", err
	}
	if orgID == "" {
		return "", errors.New("payments: ensure customer: no organisation id")
	}
	p := &stripe.CustomerParams{Metadata: map[string]string{MetaOrgID: orgID}}
	p.Context = ctx
	p.SetIdempotencyKey(customerKey(orgID))
	c, err := s.api.Customers.New(p)
	if err != nil {
		return "", classify(ctx, "create customer", err)
	}
	return c.ID, nil
}

// CustomerBalance reads the customer's balance. A deleted customer is
// refused like a missing one.
func (s *Stripe) CustomerBalance(ctx context.Context, customerID string) (int64, error) {
	if err := s.configured(); err != nil {
		return 0, err
	}
	p := &stripe.CustomerParams{}
	p.Context = ctx
	c, err := s.api.Customers.Get(customerID, p)
	if err != nil {
		return 0, classify(ctx, "read customer", err)
	}
	if c.Deleted {
		return 0, &RefusedError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "resource_missing",
			Param: "customer", Message: "customer " + customerID + " is deleted"}
	}
	return c.Balance, nil
}

// CreatePortalSession opens a billing-portal session.
func (s *Stripe) CreatePortalSession(ctx context.Context, customerID, returnURL string) (string, error) {
	if err := s.configured(); err != nil {
		return "", err
	}
	p := &stripe.BillingPortalSessionParams{Customer: stripe.String(customerID)}
	if returnURL != "" {
		p.ReturnURL = stripe.String(returnURL)
	}
	p.Context = ctx
	ps, err := s.api.BillingPortalSessions.New(p)
	if err != nil {
		return "", classify(ctx, "create billing portal session", err)
	}
	return ps.URL, nil
}

// UpcomingInvoice previews the customer's next invoice, every line of it.
func (s *Stripe) UpcomingInvoice(ctx context.Context, customerID string) (Invoice, error) {
	if err := s.configured(); err != nil {
		return Invoice{}, err
	}
	p := &stripe.InvoiceUpcomingParams{Customer: stripe.String(customerID)}
	p.Context = ctx
	inv, err := s.api.Invoices.Upcoming(p)
	if err != nil {
		err = classify(ctx, "preview upcoming invoice", err)
		var refused *RefusedError
		if errors.As(err, &refused) && refused.Code == "invoice_upcoming_none" {
			return Invoice{}, fmt.Errorf("%w: %w", ErrNoUpcomingInvoice, err)
		}
		return Invoice{}, err
	}
	out := invoice(inv)
	if inv.Lines != nil && inv.Lines.HasMore {
		lp := &stripe.InvoiceUpcomingLinesParams{Customer: stripe.String(customerID)}
		lp.Context = ctx
		lp.Limit = stripe.Int64(100)
		out.Lines = nil
		it := s.api.Invoices.UpcomingLines(lp)
		for it.Next() {
			out.Lines = append(out.Lines, invoiceLine(it.InvoiceLineItem()))
		}
		if err := it.Err(); err != nil {
			return Invoice{}, classify(ctx, "list upcoming invoice lines", err)
		}
	}
	return out, nil
}

// listPage is the page size of the reconciliation lists (Stripe's most).
const listPage = 100

// ListSubscriptions lists every subscription, cancelled ones included.
func (s *Stripe) ListSubscriptions(ctx context.Context) ([]Subscription, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p := &stripe.SubscriptionListParams{Status: stripe.String("all")}
	p.Context = ctx
	p.Limit = stripe.Int64(listPage)
	var out []Subscription
	it := s.api.Subscriptions.List(p)
	for it.Next() {
		out = append(out, subscription(it.Subscription()))
	}
	if err := it.Err(); err != nil {
		return nil, classify(ctx, "list subscriptions", err)
	}
	return out, nil
}

// ListPayments lists every payment intent.
func (s *Stripe) ListPayments(ctx context.Context) ([]Payment, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p := &stripe.PaymentIntentListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(listPage)
	var out []Payment
	it := s.api.PaymentIntents.List(p)
	for it.Next() {
		out = append(out, payment(it.PaymentIntent()))
	}
	if err := it.Err(); err != nil {
		return nil, classify(ctx, "list payment intents", err)
	}
	return out, nil
}

// ListRefunds lists every refund.
func (s *Stripe) ListRefunds(ctx context.Context) ([]Refund, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p := &stripe.RefundListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(listPage)
	var out []Refund
	it := s.api.Refunds.List(p)
	for it.Next() {
		out = append(out, refund(it.Refund()))
	}
	if err := it.Err(); err != nil {
		return nil, classify(ctx, "list refunds", err)
	}
	return out, nil
}

// ListDisputes lists every dispute.
func (s *Stripe) ListDisputes(ctx context.Context) ([]Dispute, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p := &stripe.DisputeListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(listPage)
	var out []Dispute
	it := s.api.Disputes.List(p)
	for it.Next() {
		out = append(out, dispute(it.Dispute()))
	}
	if err := it.Err(); err != nil {
		return nil, classify(ctx, "list disputes", err)
	}
	return out, nil
}

// classify turns what stripe-go returned into ErrUnavailable (no answer,
// 5xx, 429, an answer that is not Stripe's, the caller's context ended) or
// a *RefusedError (any other 4xx).
func classify(ctx context.Context, what string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		refused := &RefusedError{Status: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code),
			Param: se.Param, Message: se.Msg, RequestID: se.RequestID}
		if se.HTTPStatusCode >= 500 || se.HTTPStatusCode == http.StatusTooManyRequests || se.HTTPStatusCode == 0 {
			return fmt.Errorf("%w: %s: %s", ErrUnavailable, what, refused.Error())
		}
		return fmt.Errorf("%s: %w", what, refused)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, ctxErr)
	}
	// A transport error (refused connection, timeout, reset) or a body
	// that is not a Stripe answer (a proxy's 502 page).
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}

func unix(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

func customerID(c *stripe.Customer) string {
	if c == nil {
		return ""
	}
	return c.ID
}

func checkoutSession(cs *stripe.CheckoutSession) CheckoutSession {
	out := CheckoutSession{
		ID: cs.ID, URL: cs.URL, Mode: string(cs.Mode), Status: string(cs.Status), PaymentStatus: string(cs.PaymentStatus),
		ExpiresAt: unix(cs.ExpiresAt), CustomerID: customerID(cs.Customer), ClientReferenceID: cs.ClientReferenceID,
		AmountTotal: cs.AmountTotal, Currency: string(cs.Currency), Metadata: cs.Metadata,
	}
	if cs.PaymentIntent != nil {
		out.PaymentIntentID = cs.PaymentIntent.ID
	}
	if cs.Subscription != nil {
		out.SubscriptionID = cs.Subscription.ID
	}
	if cs.SetupIntent != nil {
		out.SetupIntentID = cs.SetupIntent.ID
	}
	return out
}

func invoice(inv *stripe.Invoice) Invoice {
	out := Invoice{
		ID: inv.ID, Status: string(inv.Status), CustomerID: customerID(inv.Customer), BillingReason: string(inv.BillingReason),
		AmountDue: inv.AmountDue, AmountPaid: inv.AmountPaid, Total: inv.Total, Currency: string(inv.Currency),
		PeriodStart: unix(inv.PeriodStart), PeriodEnd: unix(inv.PeriodEnd), NextPaymentAttempt: unix(inv.NextPaymentAttempt),
		Metadata: inv.Metadata,
	}
	if inv.Subscription != nil {
		out.SubscriptionID = inv.Subscription.ID
	}
	if inv.SubscriptionDetails != nil {
		out.SubscriptionMetadata = inv.SubscriptionDetails.Metadata
	}
	if inv.Lines != nil {
		for _, l := range inv.Lines.Data {
			out.Lines = append(out.Lines, invoiceLine(l))
		}
	}
	return out
}

func invoiceLine(l *stripe.InvoiceLineItem) InvoiceLine {
	out := InvoiceLine{Description: l.Description, Amount: l.Amount, Currency: string(l.Currency), Quantity: l.Quantity,
		Metadata: l.Metadata}
	if l.Period != nil {
		out.PeriodStart, out.PeriodEnd = unix(l.Period.Start), unix(l.Period.End)
	}
	if l.Subscription != nil {
		out.SubscriptionID = l.Subscription.ID
	}
	return out
}

func subscription(sub *stripe.Subscription) Subscription {
	out := Subscription{
		ID: sub.ID, Status: string(sub.Status), CustomerID: customerID(sub.Customer), Metadata: sub.Metadata,
		Created: unix(sub.Created), CurrentPeriodStart: unix(sub.CurrentPeriodStart), CurrentPeriodEnd: unix(sub.CurrentPeriodEnd),
		CancelAtPeriodEnd: sub.CancelAtPeriodEnd, CanceledAt: unix(sub.CanceledAt), EndedAt: unix(sub.EndedAt),
	}
	if sub.Items != nil {
		for _, it := range sub.Items.Data {
			item := SubscriptionItem{ID: it.ID, Quantity: it.Quantity}
			if it.Price != nil {
				item.UnitAmount, item.Currency = it.Price.UnitAmount, string(it.Price.Currency)
			}
			out.Items = append(out.Items, item)
		}
	}
	return out
}

func payment(pi *stripe.PaymentIntent) Payment {
	out := Payment{
		ID: pi.ID, Status: string(pi.Status), Amount: pi.Amount, AmountReceived: pi.AmountReceived, Currency: string(pi.Currency),
		CustomerID: customerID(pi.Customer), Metadata: pi.Metadata, Created: unix(pi.Created),
	}
	if pi.LatestCharge != nil {
		out.ChargeID = pi.LatestCharge.ID
	}
	return out
}

func refund(r *stripe.Refund) Refund {
	out := Refund{ID: r.ID, Amount: r.Amount, Currency: string(r.Currency), Status: string(r.Status), Metadata: r.Metadata,
		Created: unix(r.Created)}
	if r.PaymentIntent != nil {
		out.PaymentID = r.PaymentIntent.ID
	}
	if r.Charge != nil {
		out.ChargeID = r.Charge.ID
	}
	return out
}

func charge(c *stripe.Charge) Charge {
	out := Charge{ID: c.ID, CustomerID: customerID(c.Customer), Amount: c.Amount, AmountRefunded: c.AmountRefunded,
		Currency: string(c.Currency), Status: string(c.Status), Refunded: c.Refunded, Disputed: c.Disputed,
		Metadata: c.Metadata, Created: unix(c.Created)}
	if c.PaymentIntent != nil {
		out.PaymentIntentID = c.PaymentIntent.ID
	}
	if c.Invoice != nil {
		out.InvoiceID = c.Invoice.ID
	}
	return out
}

// SubscriptionOfCharge answers the subscription of the charge's invoice
// (OriginOfCharge).
func (s *Stripe) SubscriptionOfCharge(ctx context.Context, chargeID string) (string, error) {
	o, err := s.OriginOfCharge(ctx, chargeID)
	return o.SubscriptionID, err
}

// OriginOfCharge reads a charge with its invoice expanded (one call) and
// answers the invoice, its subscription and the subscription's metadata
// the invoice recorded.
func (s *Stripe) OriginOfCharge(ctx context.Context, chargeID string) (ChargeOrigin, error) {
	if err := s.configured(); err != nil {
		return ChargeOrigin{}, err
	}
	if chargeID == "" {
		return ChargeOrigin{}, errors.New("payments: origin of charge: no charge id")
	}
	p := &stripe.ChargeParams{}
	p.Context = ctx
	p.AddExpand("invoice")
	c, err := s.api.Charges.Get(chargeID, p)
	if err != nil {
		return ChargeOrigin{}, classify(ctx, "read charge", err)
	}
	var o ChargeOrigin
	if c.Invoice == nil {
		return o, nil
	}
	o.InvoiceID = c.Invoice.ID
	if c.Invoice.Subscription != nil {
		o.SubscriptionID = c.Invoice.Subscription.ID
	}
	if c.Invoice.SubscriptionDetails != nil {
		o.SubscriptionMetadata = c.Invoice.SubscriptionDetails.Metadata
	}
	return o, nil
}

func dispute(d *stripe.Dispute) Dispute {
	out := Dispute{ID: d.ID, Amount: d.Amount, Currency: string(d.Currency), Status: string(d.Status),
		Reason: string(d.Reason), Metadata: d.Metadata, Created: unix(d.Created)}
	if d.Charge != nil {
		out.ChargeID = d.Charge.ID
	}
	if d.PaymentIntent != nil {
		out.PaymentIntentID = d.PaymentIntent.ID
	}
	return out
}

// CancelSubscription cancels a subscription now, or sets
// cancel_at_period_end when atPeriodEnd.
func (s *Stripe) CancelSubscription(ctx context.Context, subscriptionID string, atPeriodEnd bool, idempotencyKey string) error {
	if err := s.configured(); err != nil {
		return err
	}
	if subscriptionID == "" {
		return errors.New("payments: cancel subscription: no subscription id")
	}
	if atPeriodEnd {
		p := &stripe.SubscriptionParams{CancelAtPeriodEnd: stripe.Bool(true)}
		p.Context = ctx
		if idempotencyKey != "" {
			p.SetIdempotencyKey(idempotencyKey)
		}
		if _, err := s.api.Subscriptions.Update(subscriptionID, p); err != nil {
			return classify(ctx, "cancel subscription at period end", err)
		}
		return nil
	}
	p := &stripe.SubscriptionCancelParams{}
	p.Context = ctx
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
	if _, err := s.api.Subscriptions.Cancel(subscriptionID, p); err != nil {
		return classify(ctx, "cancel subscription", err)
	}
	return nil
}

// ResumeSubscription clears cancel_at_period_end.
func (s *Stripe) ResumeSubscription(ctx context.Context, subscriptionID, idempotencyKey string) error {
	if err := s.configured(); err != nil {
		return err
	}
	if subscriptionID == "" {
		return errors.New("payments: resume subscription: no subscription id")
	}
	p := &stripe.SubscriptionParams{CancelAtPeriodEnd: stripe.Bool(false)}
	p.Context = ctx
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
	if _, err := s.api.Subscriptions.Update(subscriptionID, p); err != nil {
		return classify(ctx, "resume subscription", err)
	}
	return nil
}

// Refund refunds amount of a payment intent (0: all of it).
func (s *Stripe) Refund(ctx context.Context, paymentIntentID string, amount int64, idempotencyKey string) (string, error) {
	if err := s.configured(); err != nil {
		return "", err
	}
	if paymentIntentID == "" {
		return "", errors.New("payments: refund: no payment intent id")
	}
	if amount < 0 {
		return "", fmt.Errorf("payments: refund: negative amount %d", amount)
	}
	p := &stripe.RefundParams{PaymentIntent: stripe.String(paymentIntentID)}
	if amount > 0 {
		p.Amount = stripe.Int64(amount)
	}
	p.Context = ctx
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
	r, err := s.api.Refunds.New(p)
	if err != nil {
		return "", classify(ctx, "refund", err)
	}
	return r.ID, nil
}

// SetSubscriptionQuantity reads the subscription's items and updates its
// one item's quantity. The quantity is absolute, so a repeat (or a retry
// after a lost answer) asks for the same state.
func (s *Stripe) SetSubscriptionQuantity(ctx context.Context, subscriptionID string, quantity int64, proration,
	idempotencyKey string) (int64, error) {
	if err := s.configured(); err != nil {
		return 0, err
	}
	if subscriptionID == "" {
		return 0, errors.New("payments: set subscription quantity: no subscription id")
	}
	if quantity < 1 {
		return 0, fmt.Errorf("payments: set subscription quantity: quantity %d, want at least 1", quantity)
	}
	gp := &stripe.SubscriptionParams{}
	gp.Context = ctx
	sub, err := s.api.Subscriptions.Get(subscriptionID, gp)
	if err != nil {
		return 0, classify(ctx, "read subscription", err)
	}
	if sub.Items == nil || len(sub.Items.Data) != 1 {
		n := 0
		if sub.Items != nil {
			n = len(sub.Items.Data)
		}
		return 0, &RefusedError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "items",
			Message: fmt.Sprintf("subscription %s bills %d items; a quantity is set on one", subscriptionID, n)}
	}
	p := &stripe.SubscriptionItemParams{Quantity: stripe.Int64(quantity)}
	if proration != "" {
		p.ProrationBehavior = stripe.String(proration)
	}
	p.Context = ctx
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
	it, err := s.api.SubscriptionItems.Update(sub.Items.Data[0].ID, p)
	if err != nil {
		return 0, classify(ctx, "set subscription quantity", err)
	}
	return it.Quantity, nil
}

// RefundSubscriptionShare lists the subscription's newest paid invoice
// created at or before endedAt (created[lte]; the period the phone ended
// in was paid by it, a later one is a renewal after the end) with its
// charge expanded (one call) and refunds up to amount of that charge. An
// invoice in the answer created after endedAt is skipped all the same. A
// retry after a renewal therefore lists the same invoice and repeats the
// same request under its key.
func (s *Stripe) RefundSubscriptionShare(ctx context.Context, subscriptionID string, amount int64, endedAt time.Time,
	idempotencyKey string) (string, int64, error) {
	if err := s.configured(); err != nil {
		return "", 0, err
	}
	if subscriptionID == "" {
		return "", 0, errors.New("payments: refund subscription share: no subscription id")
	}
	if amount <= 0 {
		return "", 0, fmt.Errorf("payments: refund subscription share: amount %d, want more than 0", amount)
	}
	lp := &stripe.InvoiceListParams{Subscription: stripe.String(subscriptionID), Status: stripe.String("paid")}
	if !endedAt.IsZero() {
		lp.CreatedRange = &stripe.RangeQueryParams{LesserThanOrEqual: endedAt.Unix()}
	}
	lp.Context = ctx
	lp.Limit = stripe.Int64(3)
	lp.AddExpand("data.charge")
	it := s.api.Invoices.List(lp)
	var inv *stripe.Invoice
	for it.Next() {
		if c := it.Invoice(); endedAt.IsZero() || c.Created <= endedAt.Unix() {
			inv = c
			break
		}
	}
	if err := it.Err(); err != nil {
		return "", 0, classify(ctx, "list paid invoices", err)
	}
	if inv == nil || inv.Charge == nil || inv.Charge.ID == "" {
		return "", 0, &RefusedError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "resource_missing",
			Param: "subscription", Message: "subscription " + subscriptionID + " has no paid invoice with a charge to refund"}
	}
	left := inv.Charge.Amount - inv.Charge.AmountRefunded
	if left <= 0 {
		return "", 0, nil
	}
	p := &stripe.RefundParams{Charge: stripe.String(inv.Charge.ID), Amount: stripe.Int64(min(amount, left))}
	p.Context = ctx
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
	r, err := s.api.Refunds.New(p)
	if err != nil {
		return "", 0, classify(ctx, "refund subscription share", err)
	}
	return r.ID, r.Amount, nil
}
