package provisioning

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/claims"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// StartCheckout begins a purchase (POST /v1/checkout-sessions, spec 4.1):
// it opens a hosted payment page for the organisation and answers where to
// send the browser.
type StartCheckout struct {
	Auth domain.Auth
	// Request is the body as read (domain.ReadPurchaseRequest); a request
	// without a body buys the deployment's default price.
	Request domain.PurchaseRequest
	// IdempotencyKey is the Idempotency-Key header; empty when none was
	// sent.
	IdempotencyKey string
	// StepUp is the x-service-step-up header: a fresh identity check,
	// where the deployment requires one.
	StepUp string
}

// NotServed is checkout's answer on a deployment without provisioning:
// every 503 of checkout is one of the checkout codes (spec 2.3).
func (StartCheckout) NotServed() error {
	return domain.Errorf(domain.CodeCheckoutUnavailable, "purchases are not served by this deployment").WithRetryable(false)
}

// CheckoutAnswer is a purchase started (spec 2.2).
type CheckoutAnswer struct {
	CheckoutURL string
	OrderID     string
	// Quantity is the phones bought; FulfilmentIDs their ids (the order id
	// alone for one phone), committed as fulfilments once paid. Both are
	// empty for pay-as-you-go, which buys no phone.
	Quantity      int
	FulfilmentIDs []string
	ExpiresAt     time.Time
	// Replayed is set when the answer is an earlier attempt's, repeated
	// for its Idempotency-Key (the Idempotent-Replayed header).
	Replayed bool
}

// StartCheckoutHandler handles StartCheckout.
type StartCheckoutHandler struct{ *Provisioning }

// Handle answers StartCheckout. The order of checks (spec 4.1;
// docs/decisions.md, "The price list, admission and checkout") is:
//
//  1. the Idempotency-Key's shape (400 invalid_argument), like the body's
//     JSON, which the edge read before;
//  2. the caller: a signed-in admin (a member: 403 permission_denied); an
//     API key with orders:place, prepaid plans only (pay-as-you-go: 403);
//     an admin's OAuth app, prepaid only (pay-as-you-go: 403 naming the
//     console);
//  3. reverification where configured (403 reverification_required; keys
//     are never asked);
//  4. the sign-in instance (403 instance_not_served);
//  5. the Idempotency-Key's earlier attempt: replayed, taken over when
//     abandoned, or 409 idempotency_conflict;
//  6. an already-provisioned organisation (409 wrong_state, state
//     provisioned), before any configuration gap;
//  7. the deployment's state (503 checkout_unavailable: no provider; the
//     organisation not attributable to a sign-in instance; no price for
//     what is asked; a model not listed or not priced; no default
//     region; with out-of-stock refusal, inventory unreadable);
//     the provisioning store unreadable at any step is 503
//     admission_unavailable;
//  8. the body (400 invalid_argument);
//  9. the quote (409 quote_changed);
//  10. stock (409 out_of_stock);
//  11. the customer's balance (503 checkout_customer_balance);
//  12. open attempts (409 payment_in_progress, checkout_in_progress), decided
//     with the new attempt's checkout.started at one version of the
//     account;
//  13. the provider: earlier open pages are expired (one that cannot be:
//     409 checkout_in_progress), then the page is opened (provider down:
//     503 checkout_unavailable, recorded as checkout.failed).
//
// Nothing is recorded before step 12, so every refusal before it leaves
// the key free. From step 12 on the attempt is recorded, and its outcome
// is the key's answer: its page, or a final refusal (not retryable),
// replayed to every repeat for 24 hours; a retryable refusal (the provider
// did not answer) frees the key.
func (p StartCheckoutHandler) Handle(ctx context.Context, cmd StartCheckout) (CheckoutAnswer, error) {
	if cmd.IdempotencyKey != "" {
		if err := domain.CheckCheckoutKey(cmd.IdempotencyKey); err != nil {
			return CheckoutAnswer{}, err
		}
	}
	cat, a, req := p.cfg.Catalog, cmd.Auth, cmd.Request
	if err := mayCheckout(a, cat.RequestedBilling(req)); err != nil {
		return CheckoutAnswer{}, err
	}
	if err := domain.Reverify(ctx, p.cfg.RequireReverification, p.cfg.StepUp, a, cmd.StepUp, "this purchase", p.now()); err != nil {
		return CheckoutAnswer{}, err
	}
	if err := p.served(a); err != nil {
		return CheckoutAnswer{}, err
	}
	now := p.now()
	key, digest := domain.DigestKey(cmd.IdempotencyKey), req.Digest()
	acct, _, err := p.accounts.Load(ctx, a.OrgID)
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	held, err := p.claimsHeld(ctx, acct.RunningClaims())
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	if o, use, err := acct.UseKey(key, digest, now, held); err != nil {
		return CheckoutAnswer{}, err
	} else if use == domain.KeyReplay {
		return replayOf(*o)
	} else if use == domain.KeyRetake {
		return p.takeOver(ctx, a.OrgID, o.OrderID)
	}
	states, err := p.subscriptionPhones(ctx, &acct)
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	if acct.Provisioned(states) {
		return CheckoutAnswer{}, domain.ErrAlreadyProvisioned()
	}

	if p.cfg.Payments == nil {
		return CheckoutAnswer{}, domain.Errorf(domain.CodeCheckoutUnavailable, "this deployment has no payment provider configured").WithRetryable(false)
	}
	if err := p.attributed(a); err != nil {
		return CheckoutAnswer{}, err
	}
	if err := cat.Unpurchasable(req); err != nil {
		return CheckoutAnswer{}, err
	}
	var inUse map[string]int
	if p.cfg.RefuseOutOfStock {
		if inUse, err = projections.UnitsInUse(ctx, p.pool); err != nil {
			return CheckoutAnswer{}, domain.Errorf(domain.CodeCheckoutUnavailable,
				"this deployment sells only what it can ship today and its inventory cannot be read now").WithRetryable(true).Wrap(err)
		}
	}
	purchase, err := cat.ValidatePurchase(req)
	if err != nil {
		return CheckoutAnswer{}, err
	}
	if err := purchase.CheckQuote(); err != nil {
		return CheckoutAnswer{}, err
	}
	if err := p.checkStock(ctx, purchase, inUse); err != nil {
		return CheckoutAnswer{}, err
	}
	if acct.CustomerID != "" {
		balance, err := p.cfg.Payments.CustomerBalance(ctx, acct.CustomerID)
		if err != nil {
			return CheckoutAnswer{}, payments.Refusal(err)
		}
		if balance != 0 {
			return CheckoutAnswer{}, domain.Errorf(domain.CodeCheckoutCustomerBalance,
				"the organisation's billing account holds a credit or balance that blocks checkout; settle it in the billing portal").WithRetryable(false)
		}
	}

	// The attempt's claim is held before its start is recorded, so no
	// repeat ever sees it running without its claim.
	orderID := domain.NewID(domain.PrefixOrder)
	claim, err := claims.HoldAttempt(ctx, p.pool, domain.AttemptClaim(orderID))
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	defer claim.Release()
	started := domain.CheckoutStarted{OrgID: a.OrgID, OrderID: orderID,
		FulfilmentIDs: domain.FulfilmentIDsFor(orderID, purchase.Choice), Choice: purchase.Choice,
		Currency: purchase.Currency, UnitAmount: purchase.UnitAmount, QuoteID: purchase.QuoteID,
		IdempotencyKey: key, RequestDigest: digest, By: domain.ActorOf(a), At: now, Claim: claim.Name}
	var earlier *domain.Order
	var use domain.KeyUse
	_, _, err = p.accounts.Update(ctx, a.OrgID, func(acct *domain.Account) ([]domain.Event, error) {
		o, u, err := acct.UseKey(key, digest, now, held)
		if err != nil || u != domain.KeyUnused {
			earlier, use = o, u
			return nil, err
		}
		if acct.Provisioned(states) {
			return nil, domain.ErrAlreadyProvisioned()
		}
		return acct.StartCheckout(started, now, held)
	})
	switch {
	case err != nil:
		return CheckoutAnswer{}, storeDown(err)
	case use == domain.KeyReplay:
		return replayOf(*earlier)
	case use == domain.KeyRetake:
		return p.takeOver(ctx, a.OrgID, earlier.OrderID)
	}
	return p.proceed(ctx, a.OrgID, orderID, false)
}

// mayCheckout is who may start provisioning (spec 4.1, 5.2, 5.4): an
// organisation admin signed in (or through the admin's OAuth app, for
// prepaid plans only), or an API key holding orders:place for a prepaid
// plan. billing is what the request buys ("" when the body names no valid
// billing, refused later as invalid).
func mayCheckout(a domain.Auth, billing string) error {
	if a.Kind == domain.PrincipalAPIKey {
		if err := a.Require(domain.ScopeOrdersPlace); err != nil {
			return err
		}
		if billing == domain.BillingPayg {
			return domain.Errorf(domain.CodePermissionDenied,
				"an API key may start prepaid plans only; pay-as-you-go is set up by an admin signed in to the console")
		}
		return nil
	}
	if a.Role != domain.RoleAdmin {
		return domain.Errorf(domain.CodePermissionDenied, "only an organisation admin may start a purchase")
	}
	if err := a.Require(domain.ScopeOrdersPlace); err != nil {
		return err
	}
	if billing == domain.BillingPayg {
		return a.DenyApp("pay-as-you-go purchases", "the console")
	}
	return nil
}

// served refuses an organisation signing in through an instance whose
// purchases this deployment does not handle. A credential naming no
// instance is not refused here: that is the deployment's gap (attributed),
// answered after the provisioned state.
func (p *Provisioning) served(a domain.Auth) error {
	if len(p.cfg.ServedInstances) == 0 || a.Instance == "" {
		return nil
	}
	inst := strings.TrimRight(a.Instance, "/")
	if slices.ContainsFunc(p.cfg.ServedInstances, func(s string) bool { return strings.TrimRight(s, "/") == inst }) {
		return nil
	}
	return domain.Errorf(domain.CodeInstanceNotServed,
		"this organisation signs in through an instance whose purchases this deployment does not handle").WithRetryable(false)
}

// attributed refuses, where the deployment sells by sign-in instance, an
// organisation it cannot attribute to one (the credential names none):
// spec 4.1 lists it among the 503 reasons the deployment cannot provision.
func (p *Provisioning) attributed(a domain.Auth) error {
	if len(p.cfg.ServedInstances) == 0 || a.Instance != "" {
		return nil
	}
	return domain.Errorf(domain.CodeCheckoutUnavailable,
		"this organisation cannot be attributed to a sign-in instance now; nothing was charged").WithRetryable(false)
}

// subscriptionPhones reads the state of every fulfilment of the account's
// paid subscription orders from their own streams, in one read (the write
// side, so a payment just recorded is seen).
func (p *Provisioning) subscriptionPhones(ctx context.Context, acct *domain.Account) (map[string]string, error) {
	states := map[string]string{}
	phones, _, err := p.fulfilments.LoadMany(ctx, acct.LiveSubscriptionPhones())
	if err != nil {
		return nil, err
	}
	for id, f := range phones {
		if f.Exists() && f.OrgID == acct.OrgID {
			states[id] = f.State
		}
	}
	return states, nil
}

// checkStock applies the stock rules (domain.Catalog.CheckStock). inUse is
// the inventory already read (out-of-stock refusal configured); otherwise
// it is read only for a slot that cannot be backordered, and when it
// cannot be read the chosen model's listing could not be resolved: 409
// out_of_stock (spec 4.1).
func (p *Provisioning) checkStock(ctx context.Context, purchase domain.Purchase, inUse map[string]int) error {
	cat := p.cfg.Catalog
	if inUse == nil {
		if cat.Backorderable(purchase) {
			return nil
		}
		var err error
		if inUse, err = projections.UnitsInUse(ctx, p.pool); err != nil {
			return domain.Errorf(domain.CodeOutOfStock, "the stock of %s cannot be resolved now; nothing was charged", purchase.Choice.Slot()).
				WithRetryable(true).Wrap(err)
		}
	}
	return cat.CheckStock(purchase, inUse, p.cfg.RefuseOutOfStock)
}

// takeOver finishes a running attempt its process abandoned: under the
// attempt's claim, which this request takes first. A claim another process
// holds (another repeat took the attempt over first, or the attempt's own
// process is alive after all) is answered as an attempt still running:
// idempotency_conflict, retryable. Two live processes never run one
// attempt.
func (p *Provisioning) takeOver(ctx context.Context, orgID, orderID string) (CheckoutAnswer, error) {
	claim, err := claims.HoldAttempt(ctx, p.pool, domain.AttemptClaim(orderID))
	if errors.Is(err, claims.ErrAttemptHeld) {
		return CheckoutAnswer{}, domain.ErrAttemptRunning()
	}
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	defer claim.Release()
	return p.proceed(ctx, orgID, orderID, true)
}

// claimsHeld reads which of the attempt claims are held now.
func (p *Provisioning) claimsHeld(ctx context.Context, names []string) (domain.ClaimsHeld, error) {
	held, err := claims.AttemptsHeld(ctx, p.pool, names)
	return domain.ClaimsHeld(held), err
}

// proceed opens the payment page of orderID, a running attempt this
// request holds (just started, or taken over): earlier pages that could
// still be paid are closed first, so one organisation never has two
// payable pages. It runs to the end even if the caller goes away, so an
// attempt is never left running by a closed connection.
//
// retake is set when the request is a repeat of the attempt's
// Idempotency-Key taking it over (takeOver, under the attempt's claim, so
// one repeat at a time). One that finds the attempt finished by another
// answers that recorded answer, replayed (spec 4.1, rule 1).
func (p *Provisioning) proceed(ctx context.Context, orgID, orderID string, retake bool) (CheckoutAnswer, error) {
	ctx = context.WithoutCancel(ctx)
	acct, _, err := p.accounts.Load(ctx, orgID)
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	o, ok := acct.Order(orderID)
	if !ok {
		return CheckoutAnswer{}, domain.Errorf(domain.CodeInternal, "checkout attempt %s vanished", orderID)
	}
	switch {
	case o.State == domain.OrderFailed && o.FailedFinal:
		// Another request taking the attempt over failed it meanwhile, for
		// good: that is the key's answer.
		return replayOf(*o)
	case o.State == domain.OrderFailed:
		// Another request taking the attempt over failed it meanwhile; its
		// key is free again.
		return CheckoutAnswer{}, domain.ErrKeyFreed()
	case o.State != domain.OrderRunning:
		return answerOf(*o, retake), nil
	}
	provider := p.cfg.Payments
	if provider == nil {
		return p.fail(ctx, orgID, orderID, "", retake, domain.Errorf(domain.CodeCheckoutUnavailable,
			"this deployment has no payment provider configured").WithRetryable(false))
	}
	customer, err := provider.EnsureCustomer(ctx, orgID, acct.CustomerID)
	if err != nil {
		return p.fail(ctx, orgID, orderID, "", retake, payments.Refusal(err))
	}
	now := p.now()
	held, err := p.claimsHeld(ctx, acct.RunningClaims())
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	for _, other := range acct.PayableAttempts(orderID, now, held) {
		reason, page := domain.CheckoutRestarted, (*domain.CheckoutPage)(nil)
		var err error
		switch {
		case other.State == domain.OrderOpen && !now.Before(other.ExpiresAt):
			reason = domain.CheckoutTimedOut
		case other.State == domain.OrderOpen:
			err = provider.ExpireCheckoutSession(ctx, other.SessionID)
		default:
			// Abandoned while running: find the page it may have made
			// (its own provider idempotency key), then close it.
			var found domain.CheckoutPage
			if found, err = p.openPage(ctx, customer, other); err == nil {
				page = &found
				err = provider.ExpireCheckoutSession(ctx, found.SessionID)
			}
		}
		if errors.Is(err, payments.ErrNotExpirable) && page == nil {
			// Not payable any more, or paid: read which (unclosable).
			refusal, err := p.unclosable(ctx, orgID, other, other.SessionID, now)
			if err != nil {
				return CheckoutAnswer{}, storeDown(err)
			}
			if refusal != nil {
				return p.fail(ctx, orgID, orderID, customer, retake, refusal)
			}
			continue
		}
		if errors.Is(err, payments.ErrNotExpirable) {
			return p.fail(ctx, orgID, orderID, customer, retake, domain.Errorf(domain.CodeCheckoutInProgress,
				"another checkout of this organisation is open and can no longer be closed; it may have been paid").WithRetryable(false).Wrap(err))
		}
		if err != nil {
			return p.fail(ctx, orgID, orderID, customer, retake, payments.Refusal(err))
		}
		if _, _, err := p.accounts.Update(ctx, orgID, func(acct *domain.Account) ([]domain.Event, error) {
			return acct.CloseAttempt(other.OrderID, page, reason, now), nil
		}); err != nil {
			return CheckoutAnswer{}, storeDown(err)
		}
	}
	page, err := p.openPage(ctx, customer, *o)
	if err != nil {
		return p.fail(ctx, orgID, orderID, customer, retake, payments.Refusal(err))
	}
	recorded := false
	after, _, err := p.accounts.Update(ctx, orgID, func(acct *domain.Account) ([]domain.Event, error) {
		evs, err := acct.OpenCheckout(orderID, page, p.now())
		// Decided again after a lost race: only the last decision counts.
		recorded = len(evs) > 0
		return evs, err
	})
	if err != nil {
		return CheckoutAnswer{}, storeDown(err)
	}
	opened, _ := after.Order(orderID)
	return answerOf(*opened, retake && !recorded), nil
}

// CheckoutReturnPath is where, under the deployment's public URL
// ({base_url}), the hosted payment page sends the browser back: the
// console's billing page, with checkout=complete or checkout=cancelled and
// the order's id in the route's query. It is a fragment because the
// console is one document whose pages are hash routes; the provider keeps
// a fragment of a return address.
const CheckoutReturnPath = "/#/billing"

// openPage asks the provider for o's hosted payment page. The request is
// the same on every call for o (amounts from its checkout.started, expiry
// from its start, the provider idempotency key from its order id), so a
// repeat (a taken-over attempt) answers the page already made.
func (p *Provisioning) openPage(ctx context.Context, customer string, o domain.Order) (domain.CheckoutPage, error) {
	mode := payments.ModePayment
	switch o.Choice.Billing {
	case domain.BillingSubscription:
		mode = payments.ModeSubscription
	case domain.BillingPayg:
		mode = payments.ModeSetup
	}
	expires := o.At.Add(domain.CheckoutPageLifetime)
	// The provider sends the browser back to the console's billing page
	// (a hash route: the console is one document, see
	// CheckoutReturnPath), which shows the outcome of the order.
	back := strings.TrimRight(p.cfg.PublicURL, "/") + CheckoutReturnPath + "?checkout=%s&orderId=" + url.QueryEscape(o.OrderID)
	s, err := p.cfg.Payments.CreateCheckoutSession(ctx, payments.CheckoutRequest{
		OrgID: o.OrgID, OrderID: o.OrderID, CustomerID: customer, Mode: mode, Currency: o.Currency,
		UnitAmount: o.UnitAmount, Quantity: o.Choice.Quantity, ProductName: p.productName(o.Choice),
		SuccessURL:     strings.Replace(back, "%s", "complete", 1),
		CancelURL:      strings.Replace(back, "%s", "cancelled", 1),
		ExpiresAt:      expires,
		IdempotencyKey: "phonefleet-checkout-" + o.OrderID,
		Metadata:       map[string]string{"fulfilment_ids": strings.Join(o.FulfilmentIDs, ",")},
	})
	if err != nil {
		return domain.CheckoutPage{}, err
	}
	page := domain.CheckoutPage{SessionID: s.ID, URL: s.URL, ExpiresAt: s.ExpiresAt.UTC(), CustomerID: customer}
	if page.ExpiresAt.IsZero() {
		page.ExpiresAt = expires
	}
	if page.SessionID == "" || page.URL == "" {
		return domain.CheckoutPage{}, errors.New("payments: the provider answered a checkout session without an id or url")
	}
	return page, nil
}

// productName is what the payment page shows: the price list's names.
func (p *Provisioning) productName(c domain.PurchaseChoice) string {
	name := c.Sku
	if row, ok := p.cfg.Catalog.Row(c.Sku, c.Billing); ok {
		name = row.Name
		if m, ok := row.Model(c.Model); ok {
			name += ": " + m.Name
		}
	} else if c.Model != "" {
		name += ": " + c.Model
	}
	if c.Region != "" {
		name += " (" + c.Region + ")"
	}
	return name
}

// fail records that orderID made no payable page and answers refusal: a
// final refusal (not retryable) becomes its key's answer, any other frees
// the key (domain.Account.FailCheckout). A failure to record leaves the
// attempt running; a repeat takes it over once abandoned. A repeat taking
// the attempt over (retake) that finds another repeat settled it first
// answers what that one recorded, replayed: its page, or its final
// refusal.
func (p *Provisioning) fail(ctx context.Context, orgID, orderID, customer string, retake bool, refusal *domain.Error) (CheckoutAnswer, error) {
	recorded := false
	after, _, err := p.accounts.Update(ctx, orgID, func(acct *domain.Account) ([]domain.Event, error) {
		evs := acct.FailCheckout(orderID, refusal, customer, p.now())
		recorded = len(evs) > 0
		return evs, nil
	})
	if err != nil {
		return CheckoutAnswer{}, errors.Join(refusal, err)
	}
	if o, ok := after.Order(orderID); retake && !recorded && ok && o.KeyAttempt().Answers() && o.State != domain.OrderExpired {
		return replayOf(*o)
	}
	return CheckoutAnswer{}, refusal
}

// answerOf is an attempt's answer; one that buys no phone (pay-as-you-go)
// has no quantity and no fulfilment ids.
func answerOf(o domain.Order, replayed bool) CheckoutAnswer {
	a := CheckoutAnswer{CheckoutURL: o.CheckoutURL, OrderID: o.OrderID, ExpiresAt: o.ExpiresAt, Replayed: replayed}
	if len(o.FulfilmentIDs) > 0 {
		a.Quantity, a.FulfilmentIDs = len(o.FulfilmentIDs), slices.Clone(o.FulfilmentIDs)
	}
	return a
}

// storeDown is the answer when the provisioning store cannot be read or
// written: 503 admission_unavailable, retryable, with Retry-After (spec
// 7.2 names that code for it). A refusal already decided passes through.
func storeDown(err error) error {
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	return domain.Errorf(domain.CodeAdmissionUnavailable, "the provisioning store cannot be read now; nothing was charged").
		WithRetryable(true).Wrap(err)
}
