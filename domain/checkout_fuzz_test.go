package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzReadPurchaseRequest feeds arbitrary checkout bodies through the
// purchase-choice parser and the price list's checks in the route's order
// (ReadPurchaseRequest, Unpurchasable, ValidatePurchase, CheckQuote) and
// holds them to spec 2.1: nothing panics; every refusal is an error of
// the closed set with the code its step may answer (invalid_argument with
// a field the route reads, checkout_unavailable, quote_changed); the
// request digest does not depend on spacing, member order or ignored
// members; and every purchase accepted is one the price list sells, with
// quantity only beside a model and within the row's limit, a region only
// beside a model listing it, add-ons only on a cloud phone with a model,
// and the catalog's price, never one from the body.
func FuzzReadPurchaseRequest(f *testing.F) {
	pixel := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900)
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `{"sku":`, `{} {}`,
		`{"sku":"emulator","billing":"day"}`,
		`{"sku":"emulator","billing":"subscription","quoteId":""}`,
		`{"sku":"emulator","billing":"payg","ignored":{"a":[1,2,null]}}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixel + `"}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixel + `","quantity":3,"region":"DE","addOns":{"usFixedIp":true,"preinstallApps":false}}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixel + `","quantity":2.0}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixel + `","quantity":1e400}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + pixel + `","quantity":-0.5e1}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"qt_stale","region":"JP"}`,
		`{"sku":"cloud_phone","billing":"day","model":"pixel-8","quantity":2}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"iphone-15","region":"US"}`,
		`{"sku":"cloud_phone","billing":"subscription","model":"ééééé"}`,
		`{"sku":"phone_robot_ios","billing":"day"}`,
		`{"model":"pixel-8","sku":null,"billing":null}`,
		`{"sku":"emulator","billing":"day","addOns":{"usFixedIp":1}}`,
		`{"sku":5,"billing":true,"quantity":"2","region":["US"]}`,
		"{\"sku\":\"emulator\",\"billing\":\"day\",\"model\":\"\xff\xfe\"}",
	} {
		f.Add([]byte(seed))
	}
	cat := DefaultCatalog()
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ReadPurchaseRequest(body)
		if err != nil {
			if codeOf(err) != CodeInvalidArgument {
				t.Fatalf("read %q: got %v; want invalid_argument (unreadable JSON)", body, err)
			}
			return
		}
		if r.Sent && len(bytes.TrimSpace(body)) == 0 {
			t.Fatalf("read %q: an empty body was read as sent", body)
		}
		checkDigestIsCanonical(t, body, r)

		if err := cat.Unpurchasable(r); err != nil && codeOf(err) != CodeCheckoutUnavailable {
			t.Fatalf("unpurchasable %q: got %v; want checkout_unavailable", body, err)
		}
		p, err := cat.ValidatePurchase(r)
		if err != nil {
			var de *Error
			switch {
			case !errors.As(err, &de):
				t.Fatalf("validate %q: got %v; want a domain error", body, err)
			case de.Code == CodeCheckoutUnavailable:
			case de.Code != CodeInvalidArgument:
				t.Fatalf("validate %q: got %v; want invalid_argument or checkout_unavailable", body, err)
			case !slices.Contains(purchaseFields, de.Extra["field"].(string)):
				t.Fatalf("validate %q: refusal names field %v, not one the route reads", body, de.Extra["field"])
			}
			return
		}
		if err := p.CheckQuote(); err != nil {
			if codeOf(err) != CodeQuoteChanged {
				t.Fatalf("quote %q: got %v; want quote_changed", body, err)
			}
		}
		checkPurchaseSells(t, cat, body, r, p)
	})
}

// checkDigestIsCanonical re-encodes a body that was read as an object
// (keys sorted, no spacing, the same members) and requires the same
// digest: two spellings of one request are one purchase for its
// Idempotency-Key.
func checkDigestIsCanonical(t *testing.T, body []byte, r PurchaseRequest) {
	t.Helper()
	if !r.Sent {
		if r.Digest() != mustDigest(t, nil) {
			t.Fatalf("%q: no body must have the no-body digest", body)
		}
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q was read but does not decode as an object: %v", body, err)
	}
	v["ignored member"] = []any{1, "two"}
	again, err := json.Marshal(v)
	if err != nil {
		return // a number json.Marshal refuses to write back; nothing to compare
	}
	r2, err := ReadPurchaseRequest(again)
	if err != nil {
		t.Fatalf("%q re-encoded as %s is refused: %v", body, again, err)
	}
	if r2.Digest() != r.Digest() {
		t.Fatalf("%q and its re-encoding %s have different digests", body, again)
	}
}

func mustDigest(t *testing.T, body []byte) string {
	t.Helper()
	r, err := ReadPurchaseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return r.Digest()
}

// checkPurchaseSells holds an accepted purchase to spec 2.1 and the price
// list.
func checkPurchaseSells(t *testing.T, cat *Catalog, body []byte, r PurchaseRequest, p Purchase) {
	t.Helper()
	c := p.Choice
	row, ok := cat.Row(c.Sku, c.Billing)
	if !ok {
		t.Fatalf("%q: accepted %+v, a pair the price list does not hold", body, c)
	}
	if r.Sent && (*r.Sku != c.Sku || *r.Billing != c.Billing) {
		t.Fatalf("%q: accepted %+v, not the pair sent", body, c)
	}
	limit := 1
	if c.Model == "" {
		if row.Amount == nil || p.UnitAmount != *row.Amount {
			t.Fatalf("%q: accepted %+v at %d; want the row's price", body, c, p.UnitAmount)
		}
		if c.Region != "" || c.AddOns != (AddOns{}) || r.Quantity != nil || r.Region != nil || r.AddOns != nil {
			t.Fatalf("%q: accepted %+v: quantity, region and addOns are legal only beside a model", body, c)
		}
	} else {
		m, ok := row.Model(c.Model)
		if !ok || !m.Listed || m.Amount == nil || p.UnitAmount != *m.Amount {
			t.Fatalf("%q: accepted model %s at %d; want a listed, priced model of the row at its price", body, c.Model, p.UnitAmount)
		}
		if n := utf8.RuneCountInString(c.Model); n < 1 || n > MaxModelLength {
			t.Fatalf("%q: accepted a model of %d characters", body, n)
		}
		if r.QuoteID == nil || *r.QuoteID == "" {
			t.Fatalf("%q: accepted a model without its quoteId", body)
		}
		switch {
		case len(m.Regions) == 0 && (c.Region != "" || r.Region != nil):
			t.Fatalf("%q: accepted region %q for a model listing none", body, c.Region)
		case len(m.Regions) > 0 && !slices.ContainsFunc(m.Regions, func(g CatalogRegion) bool { return g.Code == c.Region }):
			t.Fatalf("%q: accepted region %q, not one model %s lists", body, c.Region, m.ID)
		case r.Region != nil && *r.Region != c.Region:
			t.Fatalf("%q: accepted region %q, not the one sent", body, c.Region)
		case len(m.Regions) > 0 && r.Region == nil && c.Region != m.DefaultRegion:
			t.Fatalf("%q: accepted region %q; want the default %s", body, c.Region, m.DefaultRegion)
		}
		if r.AddOns != nil && c.Sku != SkuCloudPhone {
			t.Fatalf("%q: accepted addOns on %s", body, c.Sku)
		}
		for k, v := range r.AddOns {
			if _, isBool := v.(bool); !isBool || (k != "usFixedIp" && k != "preinstallApps") {
				t.Fatalf("%q: accepted add-on %s = %v (STRICT: two boolean keys only)", body, k, v)
			}
		}
		limit = row.QuantityLimit(m)
	}
	if c.Quantity < 1 || c.Quantity > limit || c.Quantity > MaxCheckoutQuantity {
		t.Fatalf("%q: accepted quantity %d; want 1 to %d", body, c.Quantity, limit)
	}
	if p.QuoteID != QuoteID(cat.Currency, c.Sku, c.Billing, c.Model, p.UnitAmount) || p.Currency != cat.Currency {
		t.Fatalf("%q: accepted %+v with quote %s; want the quote of the charged price", body, c, p.QuoteID)
	}
}
