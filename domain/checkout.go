package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Checkout (spec 4.1): a PurchaseChoice body read as sent, resolved against
// the price list in stages that follow the route's order of checks (what
// the deployment cannot sell, 503, before what the body got wrong, 400,
// before a stale quote and stock, 409), and the billing account's
// decisions about idempotency keys and open attempts.

// Checkout limits and lifetimes (spec 4.1, 8).
const (
	// CheckoutKeyWindow is how long an Idempotency-Key replays its first
	// attempt's answer; after it the key is free again.
	CheckoutKeyWindow = 24 * time.Hour
	// CheckoutAbandonedAfter is how long an attempt recorded without a
	// claim (before attempts took one, attempt_claims.go) may stay running
	// (its payment page asked for, no answer recorded) before a repeat
	// treats its process as dead and takes it over; an attempt with a
	// claim is taken over as soon as its claim is free. The provider is asked again
	// with the attempt's own provider idempotency key, so a page it did
	// make is found, never made twice.
	CheckoutAbandonedAfter = 2 * time.Minute
	// CheckoutPageLifetime is how long a hosted payment page stays
	// payable (the provider accepts 30 minutes to 24 hours).
	CheckoutPageLifetime = time.Hour
	// MaxIdempotencyKeyLength bounds the Idempotency-Key header.
	MaxIdempotencyKeyLength = 255
	// MaxCheckoutQuantity bounds quantity in the body; the price list's
	// maxQuantity (at most 3) is the tighter limit.
	MaxCheckoutQuantity = 20
	// MaxModelLength bounds model in the body.
	MaxModelLength = 64
	// ReverificationMaxAge is how recent the identity check must be where
	// a deployment requires one.
	ReverificationMaxAge = 10 * time.Minute
)

// ErrReverificationRequired is the one answer to a checkout that needs a
// fresh identity check (spec 2.3): always retryable, always
// maxAgeMinutes 10.
func ErrReverificationRequired(message string) *Error {
	return Errorf(CodeReverificationRequired, "%s", message).WithRetryable(true).
		With("maxAgeMinutes", int(ReverificationMaxAge/time.Minute))
}

// CheckCheckoutKey refuses an Idempotency-Key header that is not 1 to 255
// printable ASCII characters (spec 8).
func CheckCheckoutKey(key string) error {
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLength {
		return Errorf(CodeInvalidArgument, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLength).
			With("field", "Idempotency-Key")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return Errorf(CodeInvalidArgument, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLength).
				With("field", "Idempotency-Key")
		}
	}
	return nil
}

// DigestKey is how an Idempotency-Key is kept on CheckoutStarted: its
// SHA-256, hex.
func DigestKey(key string) string {
	if key == "" {
		return ""
	}
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// PurchaseRequest is a checkout body as sent (spec 2.1): each field the
// route reads, nil when absent (or null), nothing checked yet beyond
// being JSON. A field of the wrong JSON type is kept as a problem, refused
// with the other body problems (400) in its place in the order of checks.
type PurchaseRequest struct {
	// Sent is false for a checkout without a body: the deployment's
	// single default price.
	Sent                                 bool
	Sku, Billing, Model, QuoteID, Region *string
	Quantity                             *int64
	// AddOns holds the addOns object's members as sent.
	AddOns map[string]any
	// problems are the fields of the wrong JSON type, as messages.
	problems []string
	digest   string
}

// purchaseFields are the members of a PurchaseChoice the route reads;
// every other member is ignored (spec 2.1).
var purchaseFields = []string{"sku", "billing", "model", "quoteId", "addOns", "quantity", "region"}

// ReadPurchaseRequest reads a checkout body. An empty body (or JSON null)
// is a checkout without a body. Only a body that is not one JSON value,
// or not an object, is refused here (invalid_argument, "unreadable
// JSON"); every other problem waits for ValidatePurchase.
func ReadPurchaseRequest(body []byte) (PurchaseRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return PurchaseRequest{digest: digestOf(nil)}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return PurchaseRequest{}, Errorf(CodeInvalidArgument, "request body is not valid JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
		}
		return PurchaseRequest{}, Errorf(CodeInvalidArgument, "request body is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return PurchaseRequest{}, Errorf(CodeInvalidArgument, "request body must hold exactly one JSON value")
	}
	if v == nil {
		return PurchaseRequest{digest: digestOf(nil)}, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return PurchaseRequest{}, Errorf(CodeInvalidArgument, "request body must be a JSON object (a PurchaseChoice), or absent")
	}
	r := PurchaseRequest{Sent: true}
	known := map[string]any{}
	str := func(name string, dst **string) {
		switch s := obj[name].(type) {
		case nil:
		case string:
			*dst = &s
			known[name] = s
		default:
			r.problems = append(r.problems, name+" must be a string")
			known[name] = s
		}
	}
	str("sku", &r.Sku)
	str("billing", &r.Billing)
	str("model", &r.Model)
	str("quoteId", &r.QuoteID)
	str("region", &r.Region)
	switch q := obj["quantity"].(type) {
	case nil:
	case json.Number:
		known["quantity"] = q
		if n, ok := wholeNumber(q); ok {
			r.Quantity = &n
			// 2 and 2.0 are one purchase.
			known["quantity"] = json.Number(strconv.FormatInt(n, 10))
		} else {
			r.problems = append(r.problems, "quantity must be a whole number")
		}
	default:
		known["quantity"] = q
		r.problems = append(r.problems, "quantity must be a whole number")
	}
	switch a := obj["addOns"].(type) {
	case nil:
	case map[string]any:
		r.AddOns = a
		known["addOns"] = a
	default:
		known["addOns"] = a
		r.problems = append(r.problems, "addOns must be an object")
	}
	r.digest = digestOf(known)
	return r, nil
}

// wholeNumber reads a JSON number that is a whole number, as JSON Schema's
// integer does (2, 2.0, 2e0 and 20e-1 are all 2; 2.5 and 1e-400 are not),
// saturating at the int64 range (a whole number beyond it is still out of
// every range the route allows); ok is false for a number with a
// fractional part. n is a number as the JSON decoder read it.
func wholeNumber(n json.Number) (int64, bool) {
	if v, err := n.Int64(); err == nil {
		return v, true
	}
	s := strings.TrimPrefix(string(n), "-")
	mantissa, exponent := s, "0"
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mantissa, exponent = s[:i], s[i+1:]
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := whole + frac
	if significant := strings.TrimRight(digits, "0"); strings.Trim(significant, "0") != "" {
		// digits × 10^(e − len(frac)) is whole when the digits end in at
		// least len(frac) − e zeros.
		e, err := strconv.Atoi(exponent)
		switch {
		case err != nil || e < -1<<30:
			if strings.HasPrefix(exponent, "-") {
				return 0, false
			}
		case e <= 1<<30 && len(frac)-e > len(digits)-len(significant):
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64, true
	case f <= math.MinInt64:
		return math.MinInt64, true
	}
	return int64(f), true
}

// digestOf is the request digest: the members the route reads, as
// canonical JSON (keys sorted, numbers as sent), or "no body".
func digestOf(known map[string]any) string {
	b := []byte("no body")
	if known != nil {
		b, _ = json.Marshal(known) // strings, json.Numbers, bools, maps and slices of them always encode
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Digest identifies the request: two bodies that read the same fields with
// the same values have the same digest, whatever their spacing, member
// order or ignored members. A key repeated with another digest is
// idempotency_conflict.
func (r PurchaseRequest) Digest() string {
	if r.digest == "" {
		return digestOf(nil)
	}
	return r.digest
}

// pair returns the sku and billing named, when both are strings.
func (r PurchaseRequest) pair() (sku, billing string, ok bool) {
	if r.Sku == nil || r.Billing == nil {
		return "", "", false
	}
	return *r.Sku, *r.Billing, true
}

// RequestedBilling returns the billing mode the request buys: the
// default's for a checkout without a body, "" when it cannot be told (the
// body is refused later).
func (c *Catalog) RequestedBilling(r PurchaseRequest) string {
	if !r.Sent {
		if c.Default == nil {
			return ""
		}
		return c.Default.Billing
	}
	if r.Billing == nil {
		return ""
	}
	return *r.Billing
}

// Unpurchasable is the price list's part of the deployment-state checks
// (503 checkout_unavailable, spec 4.1): no default price for a checkout
// without a body; no price for the named pair (never the default charged
// instead); a row listed without a price; for a named model on its row,
// no supplier listing yet, no price now, or a default region (when none
// is named) that the model does not list. It reads only what it can of
// the request: a field that is malformed or unknown here is left to
// ValidatePurchase, which runs after every 503.
func (c *Catalog) Unpurchasable(r PurchaseRequest) error {
	unavailable := func(format string, args ...any) error {
		return Errorf(CodeCheckoutUnavailable, format, args...).WithRetryable(false)
	}
	if !r.Sent {
		if c.Default == nil {
			return unavailable("this deployment has no default price; name a sku and billing from GET /v1/skus")
		}
		row, ok := c.Row(c.Default.Sku, c.Default.Billing)
		if !ok || row.Amount == nil {
			return unavailable("the default price (%s, %s) is not available now", c.Default.Sku, c.Default.Billing)
		}
		return nil
	}
	sku, billing, ok := r.pair()
	if !ok || !slices.Contains(Skus, sku) || !slices.Contains(BillingModes, billing) {
		return nil
	}
	row, ok := c.Row(sku, billing)
	if !ok {
		return unavailable("this deployment holds no price for %s billed %s", sku, billing)
	}
	if r.Model == nil {
		if row.Amount == nil && !row.NeedsModel() {
			return unavailable("the price of %s billed %s is not available now", sku, billing)
		}
		return nil
	}
	m, ok := row.Model(*r.Model)
	if !ok {
		return nil
	}
	switch {
	case !m.Listed:
		return unavailable("model %s is not listed by its supplier yet", m.ID)
	case m.Amount == nil:
		return unavailable("the %s price of model %s is not available now", billing, m.ID)
	case r.Region == nil && len(m.Regions) > 0 && !slices.ContainsFunc(m.Regions, func(g CatalogRegion) bool { return g.Code == m.DefaultRegion }):
		return unavailable("model %s has no default region listed; name a region", m.ID)
	}
	return nil
}

// Purchase is a checkout request resolved against the price list: what
// will be bought and the price charged, which is always the catalog's.
type Purchase struct {
	Choice PurchaseChoice
	// UnitAmount is the price of one phone in the smallest currency unit.
	UnitAmount int64
	Currency   string
	// QuoteID is the current quote of that price (QuoteID).
	QuoteID string
	// ProductName is what the payment page shows.
	ProductName string
	// sentQuote is the quoteId the body carried, checked by CheckQuote.
	sentQuote *string
}

// QuantityLimit is how many phones of model one purchase on the row may
// hold: the model's maxQuantity on the monthly cloud phone row (spec 2.1:
// the first month of a monthly cloud payment allows up to 3), 1 on every
// other plan, whatever the catalog lists there.
func (r PriceRow) QuantityLimit(m PriceModel) int {
	if r.Sku != SkuCloudPhone || r.Billing != BillingSubscription {
		return 1
	}
	return m.MaxQuantity
}

// ValidatePurchase checks the body (400 invalid_argument, spec 4.1's
// table: unknown sku or billing, one of the pair without the other, a
// model not on the row or without a pair, a region without a model, for a
// model listing none, or not listed (the message names the codes), bad
// addOns, quantity out of range) and resolves it. Run it after
// Unpurchasable: a pair without a price answers checkout_unavailable here
// too, never the default's price.
func (c *Catalog) ValidatePurchase(r PurchaseRequest) (Purchase, error) {
	bad := func(field, format string, args ...any) (Purchase, error) {
		return Purchase{}, Errorf(CodeInvalidArgument, format, args...).With("field", field)
	}
	if !r.Sent {
		if err := c.Unpurchasable(r); err != nil {
			return Purchase{}, err
		}
		row, _ := c.Row(c.Default.Sku, c.Default.Billing)
		return c.purchase(row, nil, "", PurchaseChoice{Sku: row.Sku, Billing: row.Billing, Quantity: 1}, nil), nil
	}
	if len(r.problems) > 0 {
		field, _, _ := strings.Cut(r.problems[0], " ")
		return bad(field, "%s", r.problems[0])
	}
	switch {
	case r.Sku == nil && r.Billing == nil && r.Model != nil:
		return bad("model", "model needs a sku and billing beside it")
	case r.Sku == nil && r.Billing == nil:
		return bad("sku", "sku and billing are required when a body is sent (send no body for the default price)")
	case r.Sku == nil:
		return bad("sku", "sku and billing go together: billing was sent without sku")
	case r.Billing == nil:
		return bad("billing", "sku and billing go together: sku was sent without billing")
	case !slices.Contains(Skus, *r.Sku):
		return bad("sku", "unknown sku %q; want one of %s", *r.Sku, strings.Join(Skus, ", "))
	case !slices.Contains(BillingModes, *r.Billing):
		return bad("billing", "unknown billing %q; want one of %s", *r.Billing, strings.Join(BillingModes, ", "))
	}
	row, ok := c.Row(*r.Sku, *r.Billing)
	if !ok {
		return Purchase{}, c.Unpurchasable(r)
	}
	choice := PurchaseChoice{Sku: row.Sku, Billing: row.Billing, Quantity: 1}
	var model *PriceModel
	if r.Model != nil {
		id := *r.Model
		if n := utf8.RuneCountInString(id); n < 1 || n > MaxModelLength {
			return bad("model", "model must be 1 to %d characters", MaxModelLength)
		}
		m, ok := row.Model(id)
		if !ok {
			if len(row.Models) == 0 {
				return bad("model", "%s billed %s lists no models; send it without model", row.Sku, row.Billing)
			}
			return bad("model", "model %q is not listed for %s billed %s; listed: %s", id, row.Sku, row.Billing, modelIDs(row))
		}
		if err := c.Unpurchasable(r); err != nil {
			return Purchase{}, err
		}
		model, choice.Model = &m, m.ID
	} else if row.NeedsModel() {
		return bad("model", "%s billed %s needs a model; choose one of %s", row.Sku, row.Billing, modelIDs(row))
	}
	if r.Region != nil {
		code := *r.Region
		switch {
		case model == nil:
			return bad("region", "region is legal only beside a model")
		case !regionCode.MatchString(code):
			return bad("region", "region must be two capital letters (ISO 3166-1 alpha-2)")
		case len(model.Regions) == 0:
			return bad("region", "model %s lists no regions; send it without region", model.ID)
		case !slices.ContainsFunc(model.Regions, func(g CatalogRegion) bool { return g.Code == code }):
			return bad("region", "region %s is not listed for model %s; listed: %s", code, model.ID, regionCodes(*model))
		}
		choice.Region = code
	} else if model != nil && len(model.Regions) > 0 {
		choice.Region = model.DefaultRegion
	}
	if r.AddOns != nil {
		if row.Sku != SkuCloudPhone || model == nil {
			return bad("addOns", "addOns are legal only on a cloud_phone purchase naming a model")
		}
		for _, k := range slices.Sorted(maps.Keys(r.AddOns)) {
			b, isBool := r.AddOns[k].(bool)
			switch {
			case k == "usFixedIp" && isBool:
				choice.AddOns.USFixedIP = b
			case k == "preinstallApps" && isBool:
				choice.AddOns.PreinstallApps = b
			case k == "usFixedIp" || k == "preinstallApps":
				return bad("addOns", "addOns.%s must be a boolean", k)
			default:
				return bad("addOns", "unknown add-on %q; addOns may hold usFixedIp and preinstallApps (booleans)", k)
			}
		}
	}
	if r.Quantity != nil {
		q := *r.Quantity
		switch {
		case model == nil:
			return bad("quantity", "quantity is legal only beside a model")
		case q < 1 || q > MaxCheckoutQuantity:
			return bad("quantity", "quantity must be 1 to %d", MaxCheckoutQuantity)
		case q > int64(row.QuantityLimit(*model)):
			return bad("quantity", "at most %d of model %s can be bought billed %s in one purchase", row.QuantityLimit(*model), model.ID, row.Billing)
		}
		choice.Quantity = int(q)
	}
	if model != nil && (r.QuoteID == nil || *r.QuoteID == "") {
		return bad("quoteId", "quoteId is required beside a model: send the quoteId GET /v1/skus lists for model %s", model.ID)
	}
	return c.purchase(row, model, choice.Region, choice, r.QuoteID), nil
}

func (c *Catalog) purchase(row PriceRow, m *PriceModel, region string, choice PurchaseChoice, sentQuote *string) Purchase {
	if sentQuote != nil && *sentQuote == "" {
		sentQuote = nil
	}
	p := Purchase{Choice: choice, Currency: c.Currency, sentQuote: sentQuote, ProductName: row.Name}
	if m != nil {
		p.UnitAmount = *m.Amount
		p.ProductName += ": " + m.Name
		if region != "" {
			p.ProductName += " (" + region + ")"
		}
	} else {
		p.UnitAmount = *row.Amount
	}
	p.QuoteID = QuoteID(c.Currency, choice.Sku, choice.Billing, choice.Model, p.UnitAmount)
	return p
}

// CheckQuote refuses with 409 quote_changed a quoteId that is not the
// current quote of the price charged (nothing is created). A purchase
// without a model may leave quoteId out; one sent is checked all the same.
func (p Purchase) CheckQuote() error {
	if p.sentQuote == nil || *p.sentQuote == p.QuoteID {
		return nil
	}
	return Errorf(CodeQuoteChanged, "the price has changed since that quote; read GET /v1/skus again and send its quoteId").
		WithRetryable(false).With("quoteId", p.QuoteID)
}

// Free returns a slot's free units (capacity less those in use, never
// below 0) and whether a sold-out slot may be paid for as a backorder.
// ok is false for a slot the catalog does not list.
func (c *Catalog) Free(sku, model, region string, inUse map[string]int) (free int, backorderable, ok bool) {
	units, backorderable, ok := c.Capacity(sku, model, region)
	if !ok {
		return 0, false, false
	}
	return max(0, units-inUse[Slot(sku, model, region)]), backorderable, true
}

// Backorderable reports whether the purchase's slot may be paid for when
// it is sold out.
func (c *Catalog) Backorderable(p Purchase) bool {
	_, b, ok := c.Capacity(p.Choice.Sku, p.Choice.Model, p.Choice.Region)
	return ok && b
}

// CheckStock refuses with 409 out_of_stock (nothing charged) a purchase
// whose slot has fewer free units than it buys, when the deployment
// refuses sales it cannot ship today (refuse) or the slot may not be
// backordered (a sold-out model or region). Otherwise a shortfall is
// bought as awaiting_provisioning: the phone is promised.
func (c *Catalog) CheckStock(p Purchase, inUse map[string]int, refuse bool) error {
	free, backorderable, ok := c.Free(p.Choice.Sku, p.Choice.Model, p.Choice.Region, inUse)
	if !ok || free >= p.Choice.Quantity {
		return nil
	}
	switch {
	case refuse:
		return Errorf(CodeOutOfStock, "this deployment sells only what it can ship today, and %s has %d free", p.Choice.Slot(), free).
			WithRetryable(false)
	case !backorderable:
		return Errorf(CodeOutOfStock, "%s is sold out (%d free) and cannot be backordered", p.Choice.Slot(), free).
			WithRetryable(false)
	}
	return nil
}

func modelIDs(row PriceRow) string {
	ids := make([]string, len(row.Models))
	for i, m := range row.Models {
		ids[i] = m.ID
	}
	return strings.Join(ids, ", ")
}

func regionCodes(m PriceModel) string {
	codes := make([]string, len(m.Regions))
	for i, g := range m.Regions {
		codes[i] = g.Code
	}
	return strings.Join(codes, ", ")
}

// FulfilmentIDsFor mints the per-phone ids of an attempt (spec 2.2): a
// quantity-one purchase keeps the order id as its one fulfilment id, as
// before purchases held several phones; each phone of a larger purchase
// gets an id of its own. Pay-as-you-go buys no phone (it saves a card for
// the shared pool): none.
func FulfilmentIDsFor(orderID string, c PurchaseChoice) []string {
	switch {
	case c.Billing == BillingPayg:
		return nil
	case c.Quantity <= 1:
		return []string{orderID}
	}
	ids := make([]string, c.Quantity)
	for i := range ids {
		ids[i] = NewID(PrefixFulfilment)
	}
	return ids
}

// KeyUse is what an Idempotency-Key's earlier use tells a repeat.
type KeyUse int

// What a key's earlier attempt asks of a repeat.
const (
	// KeyUnused: no attempt in the window holds the key (or its attempt
	// failed in a way a retry may cure): the request is a new attempt.
	KeyUnused KeyUse = iota
	// KeyReplay: the attempt opened a page, or failed finally; the repeat
	// answers that again.
	KeyReplay
	// KeyRetake: the attempt has run longer than CheckoutAbandonedAfter
	// with no outcome: its process died; the repeat finishes it.
	KeyRetake
)

// UseKey looks up the attempt holding an Idempotency-Key (its digest) at
// now, by checkout's rules (HeldKey): the newest attempt with the key
// started within CheckoutKeyWindow, unless it failed in a way a retry may
// cure (a failure that is not Final frees the key; a final one is
// replayed like a page).
//
// An attempt running is taken over as soon as its process is known gone
// (AttemptAbandoned, with held read for the running attempts' claims).
func (a *Account) UseKey(key, request string, now time.Time, held ClaimsHeld) (*Order, KeyUse, error) {
	i, use, err := HeldKey(len(a.Orders), func(i int) KeyAttempt {
		o := &a.Orders[i]
		k := o.KeyAttempt()
		k.Abandoned = k.Running && AttemptAbandoned(o.At, o.Claim, held, now)
		return k
	}, key, request, "purchase", now)
	if i < 0 {
		return nil, use, err
	}
	return &a.Orders[i], use, err
}

// KeyAttempt is what the Idempotency-Key rules read of the attempt.
func (o *Order) KeyAttempt() KeyAttempt {
	return KeyAttempt{Key: o.IdempotencyKey, Request: o.RequestDigest, At: o.At, Running: o.State == OrderRunning,
		Freed: o.State == OrderFailed && !o.FailedFinal}
}

// RunningClaims lists the claims of the attempts still running (those
// recorded with one), to read which are held before deciding.
func (a *Account) RunningClaims() []string {
	return runningClaims(a.Orders, func(o Order) (string, bool) { return o.Claim, o.State == OrderRunning })
}

// LiveSubscriptionPhones lists the fulfilments whose state decides whether
// the organisation is already provisioned: those of its paid
// subscription orders.
func (a *Account) LiveSubscriptionPhones() []string {
	var ids []string
	for _, o := range a.Orders {
		if o.State == OrderPaidState && o.Choice.Billing == BillingSubscription {
			ids = append(ids, o.FulfilmentIDs...)
		}
	}
	return ids
}

// Provisioned reports whether the organisation is already provisioned
// (spec 4.1, ARCHITECTURE.md): a fulfilment of a paid subscription order
// is provisioned or awaiting provisioning. states maps fulfilment ids to
// their states; a fulfilment missing from it (paid after states was read,
// or not created yet) counts as live, so a payment racing a checkout errs
// towards refusing a second subscription.
func (a *Account) Provisioned(states map[string]string) bool {
	for _, id := range a.LiveSubscriptionPhones() {
		s, known := states[id]
		if !known || s == FulfilmentProvisionedState || s == FulfilmentAwaitingState {
			return true
		}
	}
	return false
}

// ErrAlreadyProvisioned is the checkout refusal of a provisioned
// organisation: 409 wrong_state naming the state (ARCHITECTURE.md).
func ErrAlreadyProvisioned() *Error {
	return Errorf(CodeWrongState, "the organisation is already provisioned; add phones or change the plan in the billing portal").
		WithRetryable(false).With("state", FulfilmentProvisionedState)
}

// StartCheckout decides a new attempt (spec 4.1's rules without a key; the
// caller has settled the attempt's key with UseKey on the same state): an
// order paid and being confirmed is never abandoned (409
// payment_in_progress); another attempt still asking the provider for a
// page is not interrupted (409 checkout_in_progress, retryable); otherwise
// the attempt starts. Open pages of earlier attempts are closed by the
// caller once it holds the new attempt (PayableAttempts).
func (a *Account) StartCheckout(s CheckoutStarted, now time.Time, held ClaimsHeld) ([]Event, error) {
	for _, o := range a.Orders {
		switch {
		case o.State == OrderPendingState:
			return nil, Errorf(CodePaymentInProgress, "the previous checkout was paid and the payment is being confirmed").WithRetryable(true)
		case o.State == OrderRunning && !AttemptAbandoned(o.At, o.Claim, held, now):
			return nil, Errorf(CodeCheckoutInProgress, "another checkout of this organisation is being opened; repeat shortly").WithRetryable(true)
		}
	}
	return []Event{s}, nil
}

// PayableAttempts returns the attempts other than orderID whose page may
// still be paid and must be closed before orderID's opens: open pages, and
// attempts abandoned while running (their page may exist at the
// provider).
func (a *Account) PayableAttempts(orderID string, now time.Time, held ClaimsHeld) []Order {
	var out []Order
	for _, o := range a.Orders {
		if o.OrderID == orderID {
			continue
		}
		if o.State == OrderOpen || o.State == OrderRunning && AttemptAbandoned(o.At, o.Claim, held, now) {
			out = append(out, o)
		}
	}
	return out
}

// CheckoutPage is a hosted payment page the provider made for an attempt.
type CheckoutPage struct {
	SessionID  string
	URL        string
	ExpiresAt  time.Time
	CustomerID string
}

// OpenCheckout records the page made for orderID, and the organisation's
// provider customer the first time one is known. An attempt no longer
// running was settled by another request: opened with the same page, it
// answers as is (no event); closed meanwhile (restarted by a newer
// attempt), it is checkout_in_progress.
func (a *Account) OpenCheckout(orderID string, page CheckoutPage, now time.Time) ([]Event, error) {
	o, ok := a.Order(orderID)
	if !ok {
		return nil, Errorf(CodeInternal, "no checkout attempt %s", orderID)
	}
	switch o.State {
	case OrderRunning:
	case OrderFailed, OrderExpired:
		return nil, Errorf(CodeCheckoutInProgress, "another checkout replaced this attempt while its page was being opened").WithRetryable(true)
	default:
		return nil, nil
	}
	evs := a.recordCustomer(page.CustomerID, now)
	return append(evs, CheckoutOpened{OrderID: orderID, SessionID: page.SessionID, CheckoutURL: page.URL,
		ExpiresAt: page.ExpiresAt, CustomerID: page.CustomerID, At: now}), nil
}

// FailCheckout records that orderID made no payable page (the provider did
// not answer or refused, or an earlier page could not be closed). A
// refusal that is not retryable is final: its key answers it again for
// the key's window, as it would a page. A retryable one (the provider did
// not answer) frees the key: replaying it would make "retryable" untrue.
// customerID, when the provider made one, is recorded.
func (a *Account) FailCheckout(orderID string, refusal *Error, customerID string, now time.Time) []Event {
	o, ok := a.Order(orderID)
	if !ok || o.State != OrderRunning {
		return nil
	}
	evs := a.recordCustomer(customerID, now)
	return append(evs, CheckoutFailed{OrderID: orderID, Code: refusal.Code, Message: refusal.Message, Final: IsFinal(refusal), At: now})
}

// CloseAttempt records that an earlier attempt's page can no longer be
// paid (reason CheckoutRestarted or CheckoutTimedOut). An abandoned
// running attempt whose page was found at the provider (page not nil) is
// recorded opened first, so its history says which page was closed.
func (a *Account) CloseAttempt(orderID string, page *CheckoutPage, reason string, now time.Time) []Event {
	o, ok := a.Order(orderID)
	if !ok {
		return nil
	}
	switch {
	case o.State == OrderOpen:
		return []Event{CheckoutExpired{OrderID: orderID, Reason: reason, At: now}}
	case o.State == OrderRunning && page != nil:
		evs := a.recordCustomer(page.CustomerID, now)
		return append(evs, CheckoutOpened{OrderID: orderID, SessionID: page.SessionID, CheckoutURL: page.URL,
			ExpiresAt: page.ExpiresAt, CustomerID: page.CustomerID, At: now},
			CheckoutExpired{OrderID: orderID, Reason: reason, At: now})
	}
	return nil
}

func (a *Account) recordCustomer(customerID string, now time.Time) []Event {
	if customerID == "" || a.CustomerID != "" {
		return nil
	}
	return []Event{BillingCustomerRecorded{OrgID: a.OrgID, CustomerID: customerID, At: now}}
}
