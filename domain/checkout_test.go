package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustRead(t *testing.T, body string) PurchaseRequest {
	t.Helper()
	r, err := ReadPurchaseRequest([]byte(body))
	if err != nil {
		t.Fatalf("read %s: %v", body, err)
	}
	return r
}

func TestReadPurchaseRequest(t *testing.T) {
	for _, body := range []string{"", "  \n", "null"} {
		if r := mustRead(t, body); r.Sent {
			t.Errorf("%q: got a body; want the default price (no body)", body)
		}
	}
	for _, body := range []string{`{"sku":`, `[1]`, `"emulator"`, `{} {}`, `{"sku":"emulator"}x`} {
		if _, err := ReadPurchaseRequest([]byte(body)); codeOf(err) != CodeInvalidArgument {
			t.Errorf("%q: got %v; want invalid_argument (unreadable)", body, err)
		}
	}
	r := mustRead(t, `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quantity":2,"region":"DE","addOns":{"usFixedIp":true},"extra":[1,2]}`)
	if !r.Sent || *r.Sku != "cloud_phone" || *r.Billing != "subscription" || *r.Model != "pixel-8" || *r.Quantity != 2 || *r.Region != "DE" || r.AddOns["usFixedIp"] != true {
		t.Errorf("got %+v", r)
	}
	// A wrong JSON type is not unreadable JSON: it is refused with the body's other problems.
	r = mustRead(t, `{"sku":5,"billing":"day"}`)
	if _, err := DefaultCatalog().ValidatePurchase(r); codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "sku must be a string") {
		t.Errorf("sku 5: got %v; want invalid_argument naming sku", err)
	}
}

func TestPurchaseDigest(t *testing.T) {
	a := mustRead(t, `{"sku":"emulator","billing":"day","ignored":1}`)
	b := mustRead(t, ` { "billing" : "day", "sku": "emulator", "model": null }`)
	c := mustRead(t, `{"sku":"emulator","billing":"subscription"}`)
	none, empty := mustRead(t, ""), mustRead(t, "{}")
	if a.Digest() != b.Digest() {
		t.Error("the same fields in another order, spacing, with nulls and ignored members: got different digests")
	}
	if a.Digest() == c.Digest() || none.Digest() == empty.Digest() || none.Digest() != mustRead(t, "null").Digest() {
		t.Error("different requests (or no body and {}) must have different digests; no body and null the same")
	}
}

func TestValidatePurchaseCauses(t *testing.T) {
	cat := DefaultCatalog()
	pixelQuote := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900)
	tests := []struct {
		name, body, field string
		code              Code
		contains          string
	}{
		{"empty object", `{}`, "sku", CodeInvalidArgument, "required"},
		{"unknown sku", `{"sku":"tablet","billing":"day"}`, "sku", CodeInvalidArgument, "emulator, cloud_phone"},
		{"unknown billing", `{"sku":"emulator","billing":"weekly"}`, "billing", CodeInvalidArgument, "subscription, payg, day"},
		{"sku alone", `{"sku":"emulator"}`, "billing", CodeInvalidArgument, "together"},
		{"billing alone", `{"billing":"day"}`, "sku", CodeInvalidArgument, "together"},
		{"model without a pair", `{"model":"pixel-8"}`, "model", CodeInvalidArgument, "sku and billing"},
		{"model not on the row", `{"sku":"cloud_phone","billing":"subscription","model":"nokia","quoteId":"x"}`, "model", CodeInvalidArgument, "pixel-8, galaxy-s24, iphone-15"},
		{"model on a row without models", `{"sku":"emulator","billing":"day","model":"pixel-8","quoteId":"x"}`, "model", CodeInvalidArgument, "lists no models"},
		{"model too long", `{"sku":"cloud_phone","billing":"subscription","model":"` + strings.Repeat("m", 65) + `"}`, "model", CodeInvalidArgument, "1 to 64"},
		{"model empty", `{"sku":"cloud_phone","billing":"subscription","model":""}`, "model", CodeInvalidArgument, "1 to 64"},
		{"model required", `{"sku":"cloud_phone","billing":"subscription"}`, "model", CodeInvalidArgument, "needs a model"},
		{"region without a model", `{"sku":"cloud_phone","billing":"day","region":"US"}`, "region", CodeInvalidArgument, "only beside a model"},
		{"region pattern", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","region":"us"}`, "region", CodeInvalidArgument, "two capital letters"},
		{"region for a model listing none", `{"sku":"cloud_phone","billing":"subscription","model":"iphone-15","quoteId":"q","region":"US"}`, "region", CodeInvalidArgument, "lists no regions"},
		{"region not listed names the codes", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","region":"FR"}`, "region", CodeInvalidArgument, "US, DE, JP"},
		{"addOns unknown key", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","addOns":{"esim":true}}`, "addOns", CodeInvalidArgument, "unknown add-on"},
		{"addOns non-boolean", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","addOns":{"usFixedIp":"yes"}}`, "addOns", CodeInvalidArgument, "boolean"},
		{"addOns not an object", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","addOns":[true]}`, "addOns", CodeInvalidArgument, "object"},
		{"addOns off cloud phones", `{"sku":"emulator","billing":"day","addOns":{}}`, "addOns", CodeInvalidArgument, "cloud_phone"},
		{"quantity without a model", `{"sku":"emulator","billing":"day","quantity":1}`, "quantity", CodeInvalidArgument, "only beside a model"},
		{"quantity zero", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","quantity":0}`, "quantity", CodeInvalidArgument, "1 to 20"},
		{"quantity 21", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","quantity":21}`, "quantity", CodeInvalidArgument, "1 to 20"},
		{"quantity over maxQuantity", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixelQuote + `","quantity":4}`, "quantity", CodeInvalidArgument, "at most 3"},
		{"quantity over a day pass's 1", `{"sku":"cloud_phone","billing":"day","model":"pixel-8","quoteId":"q","quantity":2}`, "quantity", CodeInvalidArgument, "at most 1"},
		{"quantity not whole", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quantity":1.5}`, "quantity", CodeInvalidArgument, "whole number"},
		{"quoteId missing beside a model", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8"}`, "quoteId", CodeInvalidArgument, "quoteId is required"},
		{"no price for the pair", `{"sku":"phone_robot_ios","billing":"day"}`, "", CodeCheckoutUnavailable, "no price"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cat.ValidatePurchase(mustRead(t, tt.body))
			var de *Error
			if !errors.As(err, &de) || de.Code != tt.code || !strings.Contains(de.Message, tt.contains) {
				t.Fatalf("got %v; want %s containing %q", err, tt.code, tt.contains)
			}
			if tt.field != "" && de.Extra["field"] != tt.field {
				t.Errorf("got field %v; want %s", de.Extra["field"], tt.field)
			}
		})
	}
}

func TestValidatePurchaseResolves(t *testing.T) {
	cat := DefaultCatalog()
	p, err := cat.ValidatePurchase(mustRead(t, ""))
	if err != nil || p.Choice != (PurchaseChoice{Sku: SkuEmulator, Billing: BillingSubscription, Quantity: 1}) || p.UnitAmount != 2900 || p.Currency != "usd" {
		t.Fatalf("no body: got %+v, %v; want the default emulator subscription at 2900", p, err)
	}
	q := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900)
	p, err = cat.ValidatePurchase(mustRead(t, `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"`+q+`","quantity":3,"addOns":{"preinstallApps":true}}`))
	want := PurchaseChoice{Sku: SkuCloudPhone, Billing: BillingSubscription, Model: "pixel-8", Region: "US", Quantity: 3, AddOns: AddOns{PreinstallApps: true}}
	if err != nil || p.Choice != want || p.UnitAmount != 9900 || p.QuoteID != q || p.CheckQuote() != nil {
		t.Fatalf("pixel-8: got %+v, %v; want %+v at 9900 in the default region", p, err, want)
	}
	if p.ProductName != "Cloud phone: Google Pixel 8 (US)" {
		t.Errorf("got product name %q", p.ProductName)
	}
	stale := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9500)
	p, _ = cat.ValidatePurchase(mustRead(t, `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"`+stale+`"}`))
	if err := p.CheckQuote(); codeOf(err) != CodeQuoteChanged {
		t.Errorf("stale quote: got %v; want quote_changed", err)
	}
	// A row without a model may leave quoteId out; one sent is checked.
	p, _ = cat.ValidatePurchase(mustRead(t, `{"sku":"emulator","billing":"day"}`))
	if p.CheckQuote() != nil {
		t.Error("no quoteId without a model: got a refusal")
	}
	p, _ = cat.ValidatePurchase(mustRead(t, `{"sku":"emulator","billing":"day","quoteId":"qt_old"}`))
	if codeOf(p.CheckQuote()) != CodeQuoteChanged {
		t.Error("a wrong quoteId without a model: got no refusal")
	}
}

// TestModelLengthCountsCharacters checks spec 2.1's "length 1 to 64" of
// model in characters, not bytes: a model of 64 characters that takes
// more bytes is a model the row does not list (the message names the
// listed ones), not one too long; a catalog may list such a model.
func TestModelLengthCountsCharacters(t *testing.T) {
	cat := DefaultCatalog()
	body := func(model string) string {
		return `{"sku":"cloud_phone","billing":"subscription","model":"` + model + `","quoteId":"q"}`
	}
	_, err := cat.ValidatePurchase(mustRead(t, body(strings.Repeat("é", 64))))
	if codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "is not listed") {
		t.Errorf("64 characters (128 bytes): got %v; want the model refused as not listed", err)
	}
	_, err = cat.ValidatePurchase(mustRead(t, body(strings.Repeat("é", 65))))
	if codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "1 to 64 characters") {
		t.Errorf("65 characters: got %v; want the model refused as too long", err)
	}
	long := strings.Repeat("é", 64)
	listed, err := ParseCatalog([]byte(`{"currency":"usd","skus":[{"sku":"cloud_phone","name":"C","prices":{},"maxQuantity":1,
		"models":[{"id":"` + long + `","name":"Long","listed":true,"prices":{"subscription":100},"maxQuantity":1,"inventory":1}]}]}`))
	if err != nil {
		t.Fatalf("a catalog model id of 64 characters: %v", err)
	}
	q := QuoteID("usd", SkuCloudPhone, BillingSubscription, long, 100)
	p, err := listed.ValidatePurchase(mustRead(t, `{"sku":"cloud_phone","billing":"subscription","model":"`+long+`","quoteId":"`+q+`"}`))
	if err != nil || p.Choice.Model != long {
		t.Errorf("buying it: got %+v, %v", p.Choice, err)
	}
}

// TestQuantityIsAnInteger checks quantity as spec 2.1's (and the
// contract's JSON Schema) integer: a whole number however it is written
// is that number (and the same purchase for an Idempotency-Key); a
// fraction is not a whole number; a whole number too large for any
// integer type is out of range, not "not a whole number".
func TestQuantityIsAnInteger(t *testing.T) {
	cat := DefaultCatalog()
	q := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900)
	body := func(quantity string) string {
		return `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + q + `","quantity":` + quantity + `}`
	}
	two := mustRead(t, body("2"))
	for _, spelling := range []string{"2.0", "2e0", "20e-1", "0.2E1", "2.000"} {
		r := mustRead(t, body(spelling))
		p, err := cat.ValidatePurchase(r)
		if err != nil || p.Choice.Quantity != 2 {
			t.Errorf("quantity %s: got %+v, %v; want 2", spelling, p.Choice, err)
		}
		if r.Digest() != two.Digest() {
			t.Errorf("quantity %s: got another digest than quantity 2", spelling)
		}
	}
	for _, spelling := range []string{"1.5", "2.0000001", "1e-400", "25e-1"} {
		_, err := cat.ValidatePurchase(mustRead(t, body(spelling)))
		if codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "whole number") {
			t.Errorf("quantity %s: got %v; want not a whole number", spelling, err)
		}
	}
	for _, spelling := range []string{"99999999999999999999", "1e400", "-1e30", "-99999999999999999999"} {
		_, err := cat.ValidatePurchase(mustRead(t, body(spelling)))
		if codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "1 to 20") {
			t.Errorf("quantity %s: got %v; want out of range 1 to 20", spelling, err)
		}
	}
}

// TestQuantityBeyondOneOnlyForMonthlyCloudPhones checks spec 2.1's
// "first-month modern cloud payments allow up to 3, every other plan 1":
// a catalog listing maxQuantity 3 on a model of another sku's
// subscription still sells one at a time there.
func TestQuantityBeyondOneOnlyForMonthlyCloudPhones(t *testing.T) {
	cat, err := ParseCatalog([]byte(`{"currency":"usd","skus":[
		{"sku":"phone_robot_android","name":"R","prices":{},"maxQuantity":1,"inventory":0,"models":[
			{"id":"arm-2","name":"Arm 2","listed":true,"prices":{"subscription":100},"maxQuantity":3,"backorderable":true,"inventory":5}]},
		{"sku":"cloud_phone","name":"C","prices":{},"maxQuantity":1,"inventory":0,"models":[
			{"id":"p8","name":"P8","listed":true,"prices":{"subscription":100,"day":10},"maxQuantity":3,"backorderable":true,"inventory":5}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	buy := func(sku, billing, model, quantity string) (Purchase, error) {
		q := QuoteID("usd", sku, billing, model, map[string]int64{"subscription": 100, "day": 10}[billing])
		return cat.ValidatePurchase(mustRead(t, `{"sku":"`+sku+`","billing":"`+billing+`","model":"`+model+`","quoteId":"`+q+`","quantity":`+quantity+`}`))
	}
	if _, err := buy(SkuPhoneRobotAndroid, BillingSubscription, "arm-2", "2"); codeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "at most 1") {
		t.Errorf("two robots on a subscription: got %v; want at most 1", err)
	}
	if _, err := buy(SkuCloudPhone, BillingDay, "p8", "2"); codeOf(err) != CodeInvalidArgument {
		t.Errorf("two cloud day passes: got %v; want at most 1", err)
	}
	if p, err := buy(SkuCloudPhone, BillingSubscription, "p8", "3"); err != nil || p.Choice.Quantity != 3 {
		t.Errorf("three monthly cloud phones: got %+v, %v", p.Choice, err)
	}
}

func TestUnpurchasable(t *testing.T) {
	cat, err := ParseCatalog([]byte(`{"currency":"eur","skus":[
		{"sku":"emulator","name":"E","prices":{"day":null},"maxQuantity":1,"inventory":1},
		{"sku":"cloud_phone","name":"C","prices":{},"maxQuantity":1,"inventory":0,"models":[
			{"id":"new","name":"N","listed":false,"prices":{"subscription":100},"maxQuantity":1},
			{"id":"unpriced","name":"U","listed":true,"prices":{"subscription":null},"maxQuantity":1},
			{"id":"lost","name":"L","listed":true,"prices":{"subscription":100},"maxQuantity":1,"defaultRegion":"FR","regions":[{"code":"US","inventory":1}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"no default price":               "",
		"no price for the pair":          `{"sku":"phone_robot_ios","billing":"subscription"}`,
		"row listed without a price":     `{"sku":"emulator","billing":"day"}`,
		"model not listed by a supplier": `{"sku":"cloud_phone","billing":"subscription","model":"new"}`,
		"model price unavailable":        `{"sku":"cloud_phone","billing":"subscription","model":"unpriced"}`,
		"default region not listed":      `{"sku":"cloud_phone","billing":"subscription","model":"lost"}`,
	} {
		if err := cat.Unpurchasable(mustRead(t, body)); codeOf(err) != CodeCheckoutUnavailable {
			t.Errorf("%s: got %v; want checkout_unavailable", name, err)
		}
	}
	// Problems of the body itself are not the deployment's: left for validation.
	for _, body := range []string{`{"sku":"tablet","billing":"day"}`, `{"sku":"emulator"}`, `{"sku":5}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"nokia"}`, `{"sku":"cloud_phone","billing":"subscription","model":"lost","region":"US"}`} {
		if err := cat.Unpurchasable(mustRead(t, body)); err != nil {
			t.Errorf("%s: got %v; want no deployment refusal", body, err)
		}
	}
}

func TestCheckStock(t *testing.T) {
	cat := DefaultCatalog()
	read := func(body string) Purchase {
		p, err := cat.ValidatePurchase(mustRead(t, body))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	jp := read(`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"x","region":"JP"}`)
	if err := cat.CheckStock(jp, map[string]int{}, false); codeOf(err) != CodeOutOfStock {
		t.Errorf("JP (sold out, not backorderable): got %v; want out_of_stock", err)
	}
	de := read(`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"x","region":"DE","quantity":2}`)
	full := map[string]int{"cloud_phone/pixel-8/DE": 3}
	if err := cat.CheckStock(de, full, false); err != nil {
		t.Errorf("DE short but backorderable: got %v; want the purchase taken (promised)", err)
	}
	if err := cat.CheckStock(de, full, true); codeOf(err) != CodeOutOfStock {
		t.Errorf("DE short with out-of-stock refusal: got %v; want out_of_stock", err)
	}
	if err := cat.CheckStock(de, map[string]int{"cloud_phone/pixel-8/DE": 2}, true); err != nil {
		t.Errorf("DE with 2 free for 2: got %v; want it shipped", err)
	}
}

func TestFulfilmentIDsFor(t *testing.T) {
	if ids := FulfilmentIDsFor("ord_1", PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay, Quantity: 1}); len(ids) != 1 || ids[0] != "ord_1" {
		t.Errorf("quantity one: got %v; want the order id kept", ids)
	}
	if ids := FulfilmentIDsFor("ord_1", PurchaseChoice{Sku: SkuEmulator, Billing: BillingPayg, Quantity: 1}); ids != nil {
		t.Errorf("pay-as-you-go: got %v; want no phone", ids)
	}
	ids := FulfilmentIDsFor("ord_1", PurchaseChoice{Sku: SkuCloudPhone, Billing: BillingSubscription, Model: "pixel-8", Quantity: 3})
	if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] || !HasPrefix(ids[0], PrefixFulfilment) {
		t.Errorf("quantity three: got %v; want three distinct ful_ ids", ids)
	}
}

func TestCheckCheckoutKey(t *testing.T) {
	for key, ok := range map[string]bool{"k": true, strings.Repeat("k", 255): true, "a b~!": true,
		"": false, strings.Repeat("k", 256): false, "tab\there": false, "é": false} {
		if err := CheckCheckoutKey(key); (err == nil) != ok {
			t.Errorf("%q: got %v; want ok %v", key, err, ok)
		}
	}
}

func TestAccountKeysAndAttempts(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	key, req := DigestKey("k1"), "digest-1"
	var a Account
	a.Apply(CheckoutStarted{OrgID: "org_a", OrderID: "ord_1", IdempotencyKey: key, RequestDigest: req, At: t0,
		Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay, Quantity: 1}}, 1)

	if _, _, err := a.UseKey(key, req, t0.Add(time.Second), nil); codeOf(err) != CodeIdempotencyConflict || err.(*Error).Retryable == nil || !*err.(*Error).Retryable {
		t.Errorf("running: got %v; want idempotency_conflict, retryable", err)
	}
	if _, _, err := a.UseKey(key, "other", t0.Add(time.Second), nil); codeOf(err) != CodeIdempotencyConflict || *err.(*Error).Retryable {
		t.Errorf("another request: got %v; want idempotency_conflict, not retryable", err)
	}
	if o, use, err := a.UseKey(key, req, t0.Add(CheckoutAbandonedAfter), nil); err != nil || use != KeyRetake || o.OrderID != "ord_1" {
		t.Errorf("abandoned: got %v %v %v; want a retake of ord_1", o, use, err)
	}
	if _, err := a.StartCheckout(CheckoutStarted{OrderID: "ord_2"}, t0.Add(time.Second), nil); codeOf(err) != CodeCheckoutInProgress {
		t.Errorf("another attempt while one runs: got %v; want checkout_in_progress", err)
	}

	evs, err := a.OpenCheckout("ord_1", CheckoutPage{SessionID: "cs_1", URL: "https://pay/1", ExpiresAt: t0.Add(time.Hour), CustomerID: "cus_1"}, t0)
	if err != nil || len(evs) != 2 {
		t.Fatalf("open: got %v, %v; want customer recorded and page opened", evs, err)
	}
	for i, e := range evs {
		a.Apply(e, int64(2+i))
	}
	if a.CustomerID != "cus_1" {
		t.Errorf("customer: got %q", a.CustomerID)
	}
	for _, d := range []time.Duration{time.Minute, 23*time.Hour + 59*time.Minute} {
		if o, use, err := a.UseKey(key, req, t0.Add(d), nil); err != nil || use != KeyReplay || o.CheckoutURL != "https://pay/1" {
			t.Errorf("after %s: got %v %v %v; want the first answer replayed", d, o, use, err)
		}
	}
	if _, use, err := a.UseKey(key, "other", t0.Add(24*time.Hour+time.Minute), nil); err != nil || use != KeyUnused {
		t.Errorf("after 24 h 1 min: got %v %v; want the key free", use, err)
	}
	if got := a.PayableAttempts("ord_2", t0, nil); len(got) != 1 || got[0].OrderID != "ord_1" {
		t.Errorf("payable attempts: got %v; want ord_1's open page", got)
	}
	if evs := a.CloseAttempt("ord_1", nil, CheckoutRestarted, t0); len(evs) != 1 || evs[0].(CheckoutExpired).Reason != CheckoutRestarted {
		t.Errorf("close: got %v", evs)
	}

	// A failed attempt frees its key; a pending payment blocks new attempts.
	var b Account
	b.Apply(CheckoutStarted{OrgID: "org_b", OrderID: "ord_3", IdempotencyKey: key, RequestDigest: req, At: t0}, 1)
	for i, e := range b.FailCheckout("ord_3", Errorf(CodeCheckoutUnavailable, "down"), "", t0) {
		b.Apply(e, int64(2+i))
	}
	if _, use, err := b.UseKey(key, "other", t0.Add(time.Second), nil); err != nil || use != KeyUnused {
		t.Errorf("after a failure: got %v %v; want the key free", use, err)
	}
	b.Apply(CheckoutStarted{OrgID: "org_b", OrderID: "ord_4", At: t0}, 3)
	b.Apply(CheckoutOpened{OrderID: "ord_4", SessionID: "cs_4"}, 4)
	b.Apply(OrderPaymentPending{OrderID: "ord_4"}, 5)
	if _, err := b.StartCheckout(CheckoutStarted{OrderID: "ord_5"}, t0.Add(time.Hour), nil); codeOf(err) != CodePaymentInProgress {
		t.Errorf("pending payment: got %v; want payment_in_progress", err)
	}
}

func TestAccountProvisioned(t *testing.T) {
	var a Account
	a.Apply(CheckoutStarted{OrgID: "org_a", OrderID: "ord_1", FulfilmentIDs: []string{"ful_1", "ful_2"},
		Choice: PurchaseChoice{Sku: SkuCloudPhone, Billing: BillingSubscription, Model: "pixel-8", Quantity: 2}}, 1)
	a.Apply(CheckoutStarted{OrgID: "org_a", OrderID: "ord_2", FulfilmentIDs: []string{"ord_2"},
		Choice: PurchaseChoice{Sku: SkuEmulator, Billing: BillingDay, Quantity: 1}}, 2)
	a.Apply(OrderPaid{OrderID: "ord_2"}, 3)
	if a.Provisioned(nil) {
		t.Error("an unpaid subscription and a paid day pass: got provisioned")
	}
	a.Apply(OrderPaid{OrderID: "ord_1"}, 4)
	for _, tt := range []struct {
		states map[string]string
		want   bool
	}{
		{map[string]string{"ful_1": FulfilmentCancelledState, "ful_2": FulfilmentCancelledState}, false},
		{map[string]string{"ful_1": FulfilmentCancelledState, "ful_2": FulfilmentAwaitingState}, true},
		{map[string]string{"ful_1": FulfilmentProvisionedState, "ful_2": FulfilmentCancelledState}, true},
		{map[string]string{"ful_1": FulfilmentCancelledState}, true}, // ful_2 unknown: counted live
	} {
		if got := a.Provisioned(tt.states); got != tt.want {
			t.Errorf("%v: got provisioned %v; want %v", tt.states, got, tt.want)
		}
	}
	if err := ErrAlreadyProvisioned(); err.Code != CodeWrongState || err.Extra["state"] != "provisioned" {
		t.Errorf("got %+v", err)
	}
}

func TestErrReverificationRequired(t *testing.T) {
	e := ErrReverificationRequired("x")
	if e.Code != CodeReverificationRequired || e.Retryable == nil || !*e.Retryable || e.Extra["maxAgeMinutes"] != 10 {
		t.Errorf("got %+v; want retryable with maxAgeMinutes 10", e)
	}
}
