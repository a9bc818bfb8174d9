package proxies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"

	"phonefleet/domain"
	"phonefleet/internal/claims"
	"phonefleet/internal/payments"
)

// PlaceProxyOrder orders one proxy of a product (POST /v1/proxy-orders):
// it opens a hosted payment page; the proxy is issued only once the
// provider's signed event says the order was paid.
type PlaceProxyOrder struct {
	Auth      domain.Auth
	ProductID string
	// QuoteID, when sent, must be the product's current quote
	// (quote_changed otherwise), as checkout's is.
	QuoteID *string
	// IdempotencyKey is the Idempotency-Key header ("" when none).
	IdempotencyKey string
	// StepUp is the x-service-step-up header.
	StepUp string
}

// PlacedOrder is an order started (or, Replayed, the first answer to its
// Idempotency-Key).
type PlacedOrder struct {
	Order    domain.ProxyOrder
	Replayed bool
}

// PlaceProxyOrderHandler handles PlaceProxyOrder.
type PlaceProxyOrderHandler struct{ *Proxies }

// Metadata the payment page carries so the provider's events about it find
// their way back here (and not to provisioning's checkout).
const (
	MetaKind       = "kind"
	MetaKindProxy  = "proxy_order"
	MetaProxyID    = "proxy_id"
	ProxiesConsole = "/#/proxies"
)

// Handle checks, in order: the Idempotency-Key's shape (400); the caller
// (403: a member, an app, a key without orders:place); reverification
// where configured (403 reverification_required); the key's earlier order
// (replayed; 409 idempotency_conflict, retryable while it runs); the
// provider (503 checkout_unavailable); the product (400) and the quote
// (409 quote_changed). Nothing is recorded before the order starts, so
// every refusal until then leaves the key free. From then on the order's
// outcome is the key's answer, as checkout's (domain.HeldKey): its page,
// or a final refusal (not retryable) replayed to every repeat for 24
// hours; a retryable refusal (the provider did not answer) frees the key.
func (h PlaceProxyOrderHandler) Handle(ctx context.Context, cmd PlaceProxyOrder) (PlacedOrder, error) {
	if cmd.IdempotencyKey != "" {
		if err := domain.CheckCheckoutKey(cmd.IdempotencyKey); err != nil {
			return PlacedOrder{}, err
		}
	}
	a := cmd.Auth
	if err := mayPay(a, "buy proxies"); err != nil {
		return PlacedOrder{}, err
	}
	if err := domain.Reverify(ctx, h.cfg.RequireReverification, h.cfg.StepUp, a, cmd.StepUp, "this proxy purchase", h.now()); err != nil {
		return PlacedOrder{}, err
	}
	now := h.now()
	key, digest := domain.DigestKey(cmd.IdempotencyKey), orderDigest(cmd)
	acct, _, err := h.accounts.Load(ctx, a.OrgID)
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	held, err := claims.AttemptsHeld(ctx, h.cfg.Store.Pool(), acct.RunningClaims())
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	if o, use, err := acct.UseOrderKey(key, digest, now, held); err != nil {
		return PlacedOrder{}, err
	} else if use == domain.KeyReplay {
		return replayOf(*o)
	} else if use == domain.KeyRetake {
		return h.takeOver(ctx, a.OrgID, o.OrderID)
	}
	if h.cfg.Payments == nil {
		return PlacedOrder{}, domain.Errorf(domain.CodeCheckoutUnavailable, "this deployment has no payment provider configured").WithRetryable(false)
	}
	q, err := h.quote(cmd.ProductID)
	if err != nil {
		return PlacedOrder{}, err
	}
	if cmd.QuoteID != nil && *cmd.QuoteID != q.QuoteID {
		return PlacedOrder{}, domain.Errorf(domain.CodeQuoteChanged,
			"the price has changed since that quote; ask POST /v1/proxy-quotes again and send its quoteId").
			WithRetryable(false).With("quoteId", q.QuoteID)
	}
	// The order's claim is held before its start is recorded
	// (domain.AttemptClaim).
	orderID := domain.NewID(domain.PrefixProxyOrder)
	claim, err := claims.HoldAttempt(ctx, h.cfg.Store.Pool(), domain.AttemptClaim(orderID))
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	defer claim.Release()
	started := domain.ProxyOrderStarted{OrgID: a.OrgID, OrderID: orderID, ProxyID: domain.NewID(domain.PrefixProxy), Product: q.Product,
		Currency: q.Currency, QuoteID: q.QuoteID, IdempotencyKey: key, RequestDigest: digest, By: domain.ActorOf(a), At: now,
		Claim: claim.Name}
	var earlier *domain.ProxyOrder
	var use domain.KeyUse
	if _, _, err := h.accounts.Update(ctx, a.OrgID, func(acct *domain.ProxyAccount) ([]domain.Event, error) {
		o, u, err := acct.UseOrderKey(key, digest, now, held)
		if err != nil || u != domain.KeyUnused {
			earlier, use = o, u
			return nil, err
		}
		return []domain.Event{started}, nil
	}); err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	switch use {
	case domain.KeyReplay:
		return replayOf(*earlier)
	case domain.KeyRetake:
		return h.takeOver(ctx, a.OrgID, earlier.OrderID)
	}
	return h.proceed(ctx, a.OrgID, orderID, false)
}

// replayOf is a recorded order's answer to a repeat of its key: the order
// (its page), or its final refusal, replayed (domain.ReplayRefusal).
func replayOf(o domain.ProxyOrder) (PlacedOrder, error) {
	if o.State == domain.ProxyOrderFailedState {
		return PlacedOrder{}, domain.ReplayRefusal(domain.Errorf(domain.Code(o.FailedCode), "%s", o.FailedMessage))
	}
	return PlacedOrder{Order: o, Replayed: true}, nil
}

// orderDigest identifies what an order asks for, so a key reused for
// another order is told apart.
func orderDigest(cmd PlaceProxyOrder) string {
	q := "\x00"
	if cmd.QuoteID != nil {
		q = *cmd.QuoteID
	}
	s := sha256.Sum256([]byte("proxy-order\x00" + cmd.ProductID + "\x00" + q))
	return hex.EncodeToString(s[:])
}

// takeOver finishes a running order its process abandoned, under the
// order's claim, which this request takes first; a claim another process
// holds answers as an order still running (idempotency_conflict,
// retryable), as checkout's does.
func (h PlaceProxyOrderHandler) takeOver(ctx context.Context, orgID, orderID string) (PlacedOrder, error) {
	claim, err := claims.HoldAttempt(ctx, h.cfg.Store.Pool(), domain.AttemptClaim(orderID))
	if errors.Is(err, claims.ErrAttemptHeld) {
		return PlacedOrder{}, domain.ErrAttemptRunning()
	}
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	defer claim.Release()
	return h.proceed(ctx, orgID, orderID, true)
}

// proceed opens the payment page of a running order this request holds;
// it runs to the end even if the caller goes away.
//
// retake is set when the request is a repeat of the order's
// Idempotency-Key taking it over. Several repeats may take one order over
// at once; the one that records its outcome gives the first answer, and
// every other answers that recorded answer, replayed (spec 4.1, rule 1).
func (h PlaceProxyOrderHandler) proceed(ctx context.Context, orgID, orderID string, retake bool) (PlacedOrder, error) {
	ctx = context.WithoutCancel(ctx)
	acct, _, err := h.accounts.Load(ctx, orgID)
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	o, ok := acct.Order(orderID)
	if !ok {
		return PlacedOrder{}, domain.Errorf(domain.CodeInternal, "proxy order %s vanished", orderID)
	}
	switch k := o.KeyAttempt(); {
	case k.Answers():
		// Another request taking the order over settled it meanwhile:
		// that is the key's answer.
		return replayOf(*o)
	case !k.Running:
		return PlacedOrder{}, domain.ErrKeyFreed()
	}
	provider := h.cfg.Payments
	if provider == nil {
		return h.fail(ctx, orgID, orderID, retake, domain.Errorf(domain.CodeCheckoutUnavailable,
			"this deployment has no payment provider configured").WithRetryable(false))
	}
	customer, err := provider.EnsureCustomer(ctx, orgID, "")
	if err != nil {
		return h.fail(ctx, orgID, orderID, retake, payments.Refusal(err))
	}
	expires := o.At.Add(domain.CheckoutPageLifetime)
	back := strings.TrimRight(h.cfg.PublicURL, "/") + ProxiesConsole + "?order=" + url.QueryEscape(orderID)
	s, err := provider.CreateCheckoutSession(ctx, payments.CheckoutRequest{
		OrgID: orgID, OrderID: orderID, CustomerID: customer, Mode: payments.ModeSubscription, Currency: o.Currency,
		UnitAmount: o.Product.MonthlyPrice, Quantity: 1, Interval: domain.ProxyBillingPeriod,
		ProductName: "Managed proxy: " + o.Product.Name, SuccessURL: back + "&checkout=complete", CancelURL: back + "&checkout=cancelled",
		ExpiresAt: expires, IdempotencyKey: "phonefleet-proxy-order-" + orderID,
		Metadata: map[string]string{MetaKind: MetaKindProxy, MetaProxyID: o.ProxyID},
	})
	if err == nil && (s.ID == "" || s.URL == "") {
		err = errors.New("payments: the provider answered a checkout session without an id or url")
	}
	if err != nil {
		return h.fail(ctx, orgID, orderID, retake, payments.Refusal(err))
	}
	if !s.ExpiresAt.IsZero() {
		expires = s.ExpiresAt.UTC()
	}
	after, recorded, err := h.settle(ctx, orgID, orderID, domain.ProxyOrderOpened{OrderID: orderID, SessionID: s.ID, CheckoutURL: s.URL,
		CustomerID: customer, ExpiresAt: expires, At: h.now()})
	if err != nil {
		return PlacedOrder{}, storeDown(err)
	}
	opened, _ := after.Order(orderID)
	if !recorded && retake {
		return replayOf(*opened)
	}
	return PlacedOrder{Order: *opened}, nil
}

// fail records that an order made no payable page and answers refusal: a
// final refusal (not retryable) becomes its key's answer, any other frees
// the key (domain.IsFinal). A repeat taking the order over (retake) that
// finds another repeat settled it first answers what that one recorded,
// replayed: its page, or its final refusal.
func (h PlaceProxyOrderHandler) fail(ctx context.Context, orgID, orderID string, retake bool, refusal *domain.Error) (PlacedOrder, error) {
	after, recorded, err := h.settle(ctx, orgID, orderID, domain.ProxyOrderFailed{OrderID: orderID, Code: string(refusal.Code),
		Message: refusal.Message, Final: domain.IsFinal(refusal), At: h.now()})
	if err != nil {
		return PlacedOrder{}, errors.Join(refusal, err)
	}
	if o, ok := after.Order(orderID); retake && !recorded && ok && o.KeyAttempt().Answers() {
		return replayOf(*o)
	}
	return PlacedOrder{}, refusal
}

// settle records an order's outcome (its page or its failure) if it is
// still running; recorded is false when another request settled it first
// (decided again after a lost race: only the last decision counts).
func (h PlaceProxyOrderHandler) settle(ctx context.Context, orgID, orderID string, outcome domain.Event) (after domain.ProxyAccount, recorded bool, err error) {
	after, err = h.decide(ctx, orgID, func(acct *domain.ProxyAccount) ([]domain.Event, error) {
		o, ok := acct.Order(orderID)
		recorded = ok && o.State == domain.ProxyOrderRunning
		if !recorded {
			return nil, nil
		}
		return []domain.Event{outcome}, nil
	})
	return after, recorded, err
}
