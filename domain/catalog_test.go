package domain

import (
	"strings"
	"testing"
)

func TestDefaultCatalogRows(t *testing.T) {
	c := DefaultCatalog()
	row, ok := c.Row(SkuCloudPhone, BillingSubscription)
	if !ok {
		t.Fatal("cloud_phone/subscription is not a row of the default catalog")
	}
	if !row.NeedsModel() {
		t.Error("a monthly cloud phone must need a model (spec 2.1)")
	}
	m, ok := row.Model("pixel-8")
	if !ok || m.Amount == nil || *m.Amount != 9900 || len(m.Regions) != 3 {
		t.Errorf("pixel-8 on the monthly row: got %+v, %v", m, ok)
	}
	if _, ok := row.Model("iphone-15"); !ok {
		t.Error("iphone-15 is priced monthly and must be listed on the row")
	}
	day, ok := c.Row(SkuCloudPhone, BillingDay)
	if !ok || day.NeedsModel() || day.Amount == nil {
		t.Errorf("cloud_phone/day is priced without a model: got %+v, %v", day, ok)
	}
	if _, ok := c.Row(SkuPhoneRobotIOS, BillingPayg); ok {
		t.Error("phone_robot_ios is not priced for payg")
	}
	if _, ok := c.Row("tablet", BillingDay); ok {
		t.Error("an unknown sku has no row")
	}
	var pairs []string
	for _, r := range c.Rows() {
		pairs = append(pairs, r.Sku+"/"+r.Billing)
	}
	if got := strings.Join(pairs, " "); got != "emulator/subscription emulator/payg emulator/day cloud_phone/subscription cloud_phone/day phone_robot_android/subscription phone_robot_ios/subscription" {
		t.Errorf("rows: %s", got)
	}
}

func TestQuoteIDFollowsThePrice(t *testing.T) {
	a := QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900)
	if a != QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9900) {
		t.Error("the same price must give the same quoteId")
	}
	for _, other := range []string{
		QuoteID("usd", SkuCloudPhone, BillingSubscription, "pixel-8", 9901),
		QuoteID("eur", SkuCloudPhone, BillingSubscription, "pixel-8", 9900),
		QuoteID("usd", SkuCloudPhone, BillingDay, "pixel-8", 9900),
		QuoteID("usd", SkuCloudPhone, BillingSubscription, "galaxy-s24", 9900),
	} {
		if other == a {
			t.Errorf("a changed price, currency, billing or model must change the quoteId (%s)", a)
		}
	}
}

func TestCatalogCapacity(t *testing.T) {
	c := DefaultCatalog()
	if n, b, ok := c.Capacity(SkuCloudPhone, "pixel-8", "JP"); !ok || n != 0 || b {
		t.Errorf("pixel-8 in JP: got %d units, backorderable %v, listed %v; want 0, false (the region overrides), true", n, b, ok)
	}
	if n, b, ok := c.Capacity(SkuCloudPhone, "pixel-8", "DE"); !ok || n != 4 || !b {
		t.Errorf("pixel-8 in DE: got %d, %v, %v", n, b, ok)
	}
	if n, _, ok := c.Capacity(SkuEmulator, "", ""); !ok || n != 50 {
		t.Errorf("emulator: got %d, %v", n, ok)
	}
	if _, _, ok := c.Capacity(SkuCloudPhone, "pixel-8", "FR"); ok {
		t.Error("an unlisted region has no capacity")
	}
	if Slot(SkuCloudPhone, "pixel-8", "DE") != "cloud_phone/pixel-8/DE" || Slot(SkuEmulator, "", "") != "emulator" {
		t.Error("slots name sku, model and region")
	}
}

func TestParseCatalogRefusesMistakes(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":        `{"currency":"usd","skus":[],"colour":"red"}`,
		"unknown sku":          `{"currency":"usd","skus":[{"sku":"tablet","prices":{},"maxQuantity":1}]}`,
		"unknown billing":      `{"currency":"usd","skus":[{"sku":"emulator","prices":{"weekly":5},"maxQuantity":1}]}`,
		"negative price":       `{"currency":"usd","skus":[{"sku":"emulator","prices":{"day":-5},"maxQuantity":1}]}`,
		"bad maxQuantity":      `{"currency":"usd","skus":[{"sku":"emulator","prices":{"day":5},"maxQuantity":4}]}`,
		"bad region":           `{"currency":"usd","skus":[{"sku":"cloud_phone","prices":{},"maxQuantity":1,"models":[{"id":"m","prices":{"day":1},"maxQuantity":1,"regions":[{"code":"usa"}]}]}]}`,
		"default not a row":    `{"currency":"usd","default":{"sku":"emulator","billing":"payg"},"skus":[{"sku":"emulator","prices":{"day":5},"maxQuantity":1}]}`,
		"pool of unknown sku":  `{"currency":"usd","skus":[{"sku":"emulator","prices":{"day":5},"maxQuantity":1}],"pool":{"sku":"cloud_phone","size":1}}`,
		"currency not a code":  `{"currency":"dollars","skus":[]}`,
		"duplicate model id":   `{"currency":"usd","skus":[{"sku":"cloud_phone","prices":{},"maxQuantity":1,"models":[{"id":"m","prices":{"day":1},"maxQuantity":1},{"id":"m","prices":{"day":1},"maxQuantity":1}]}]}`,
		"not json":             `{`,
		"sku listed twice":     `{"currency":"usd","skus":[{"sku":"emulator","prices":{},"maxQuantity":1},{"sku":"emulator","prices":{},"maxQuantity":1}]}`,
		"negative inventory":   `{"currency":"usd","skus":[{"sku":"emulator","prices":{},"maxQuantity":1,"inventory":-1}]}`,
		"defaultRegion shaped": `{"currency":"usd","skus":[{"sku":"cloud_phone","prices":{},"maxQuantity":1,"models":[{"id":"m","prices":{"day":1},"maxQuantity":1,"defaultRegion":"u"}]}]}`,
	} {
		if _, err := ParseCatalog([]byte(doc)); err == nil {
			t.Errorf("%s: accepted %s", name, doc)
		}
	}
	c, err := ParseCatalog([]byte(`{"currency":"usd","skus":[{"sku":"cloud_phone","prices":{},"maxQuantity":1,"models":[{"id":"m","listed":true,"prices":{"subscription":null},"maxQuantity":1}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	row, ok := c.Row(SkuCloudPhone, BillingSubscription)
	if m, found := row.Model("m"); !ok || !found || m.Amount != nil {
		t.Errorf("a null price lists the model with its price unavailable: got %+v %v %v", m, ok, found)
	}
}

func FuzzParseCatalog(f *testing.F) {
	f.Add(defaultCatalogJSON)
	f.Add([]byte(`{"currency":"usd","skus":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCatalog(b)
		if err != nil {
			return
		}
		for _, r := range c.Rows() {
			if _, ok := c.Row(r.Sku, r.Billing); !ok {
				t.Fatalf("row %s/%s listed but not found", r.Sku, r.Billing)
			}
		}
	})
}
