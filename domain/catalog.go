package domain

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The price list (ARCHITECTURE.md, "Provisioning"): skus, billing modes,
// models, regions, maxQuantity, backorderable and prices come from a catalog
// file (SERVICE_CATALOG_FILE) with an embedded default; inventory is what the
// deployment can hand out now (sim units in development). A quoteId is a
// digest of a model's current price, so a changed price changes it.

// Skus are the four things one can buy (spec 2.1).
const (
	SkuEmulator          = "emulator"
	SkuCloudPhone        = "cloud_phone"
	SkuPhoneRobotAndroid = "phone_robot_android"
	SkuPhoneRobotIOS     = "phone_robot_ios"
)

// Billing modes (spec 2.1). Subscription and day are prepaid plans (paid on
// the hosted page before anything is delivered); payg is metered use of the
// shared pool (a card is saved, device time is billed afterwards).
const (
	BillingSubscription = "subscription"
	BillingPayg         = "payg"
	BillingDay          = "day"
)

// Skus and BillingModes list the values spec 2.1 allows, in its order.
var (
	Skus         = []string{SkuEmulator, SkuCloudPhone, SkuPhoneRobotAndroid, SkuPhoneRobotIOS}
	BillingModes = []string{BillingSubscription, BillingPayg, BillingDay}
)

// Prepaid reports whether billing is a prepaid plan (the only kind an API
// key with orders:place may start, spec 4.1).
func Prepaid(billing string) bool { return billing == BillingSubscription || billing == BillingDay }

//go:embed catalogdata/default.json
var defaultCatalogJSON []byte

// Catalog is the deployment's price list and inventory.
type Catalog struct {
	// Currency is the ISO 4217 code, lower case, of every price.
	Currency string `json:"currency"`
	// Default is the single default price an absent checkout body buys;
	// nil means the deployment has none (such a checkout answers
	// checkout_unavailable).
	Default *CatalogChoice `json:"default,omitempty"`
	Skus    []CatalogSku   `json:"skus"`
	// Pool is the shared pay-as-you-go pool; nil means none.
	Pool *CatalogPool `json:"pool,omitempty"`
	// Proxies are the managed proxy products (proxy.go); none means the
	// deployment sells no proxy.
	Proxies []ProxyProduct `json:"proxies,omitempty"`
	// CopilotTokensPerDevice is the copilot's monthly allowance in tokens
	// (input and output together) that each live subscription purchase
	// includes (spec 2.4); pay-as-you-go and day passes include none. Nil
	// means no allowance is configured: a hosted deployment's allowance
	// read answers checkout_unavailable.
	CopilotTokensPerDevice *int64 `json:"copilotTokensPerDevice,omitempty"`
}

// CatalogChoice names a sku and billing pair.
type CatalogChoice struct {
	Sku     string `json:"sku"`
	Billing string `json:"billing"`
}

// CatalogSku is one sku: its prices per billing mode when bought without a
// model, and its models.
type CatalogSku struct {
	Sku  string `json:"sku"`
	Name string `json:"name"`
	// Prices are unit amounts in the smallest currency unit, per billing
	// mode. A billing mode absent here and present on a model means the
	// model is required for it (a monthly cloud phone).
	Prices        Prices `json:"prices"`
	MaxQuantity   int    `json:"maxQuantity"`
	Backorderable bool   `json:"backorderable"`
	// Inventory is how many units of the sku (bought without a model) the
	// deployment can hand out at all.
	Inventory int            `json:"inventory"`
	Models    []CatalogModel `json:"models,omitempty"`
	// SimModel is the simulator model (internal/sim) the sku's units are
	// while the deployment hands out sim units: the pool's devices and
	// the phones of its fulfilments. Empty: the simulator's default model.
	// The service checks it against the simulator's models at start-up.
	SimModel string `json:"simModel,omitempty"`
}

// CatalogModel is one model of a sku.
type CatalogModel struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Listed reports whether the supplier listing of the model has
	// succeeded; a model not listed yet cannot be sold (checkout answers
	// checkout_unavailable).
	Listed bool `json:"listed"`
	// Prices per billing mode. A billing mode present with a null price
	// lists the model on that row but its price is unavailable now
	// (checkout_unavailable).
	Prices        Prices `json:"prices"`
	MaxQuantity   int    `json:"maxQuantity"`
	Backorderable bool   `json:"backorderable"`
	// DefaultRegion applies when a checkout names the model without a
	// region; it must be one of Regions when there are regions.
	DefaultRegion string          `json:"defaultRegion,omitempty"`
	Regions       []CatalogRegion `json:"regions,omitempty"`
	// Inventory is the model's units when it lists no regions.
	Inventory int `json:"inventory,omitempty"`
}

// CatalogRegion is where a model can be placed.
type CatalogRegion struct {
	Code      string `json:"code"`
	Inventory int    `json:"inventory"`
	// Backorderable, when set, overrides the model's for this region.
	Backorderable *bool `json:"backorderable,omitempty"`
}

// CatalogPool is the shared pay-as-you-go pool: Size sim units of Sku that
// organisations with pay-as-you-go access take one at a time.
type CatalogPool struct {
	Sku  string `json:"sku"`
	Size int    `json:"size"`
}

// Prices maps a billing mode to a unit amount; a nil amount is listed but
// unavailable.
type Prices map[string]*int64

var regionCode = regexp.MustCompile(`^[A-Z]{2}$`)

// DefaultCatalog returns the embedded price list.
func DefaultCatalog() *Catalog {
	c, err := ParseCatalog(defaultCatalogJSON)
	if err != nil {
		panic(fmt.Sprintf("embedded catalog: %v", err)) // a defect of the build, caught by every test run
	}
	return c
}

// ParseCatalog reads and checks a catalog file. Unknown fields are refused,
// so a misspelt setting is found when the service starts, not when a
// customer pays.
func ParseCatalog(b []byte) (*Catalog, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return &c, nil
}

func (c *Catalog) check() error {
	if len(c.Currency) != 3 {
		return fmt.Errorf("currency must be a three-letter code")
	}
	if err := checkProxyProducts(c.Proxies); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range c.Skus {
		if !slices.Contains(Skus, s.Sku) {
			return fmt.Errorf("unknown sku %q (want one of %v)", s.Sku, Skus)
		}
		if seen[s.Sku] {
			return fmt.Errorf("sku %q listed twice", s.Sku)
		}
		seen[s.Sku] = true
		if err := checkPrices(s.Prices); err != nil {
			return fmt.Errorf("sku %s: %w", s.Sku, err)
		}
		if s.MaxQuantity < 1 || s.MaxQuantity > 3 || s.Inventory < 0 {
			return fmt.Errorf("sku %s: maxQuantity must be 1 to 3 and inventory at least 0", s.Sku)
		}
		models := map[string]bool{}
		for _, m := range s.Models {
			if n := utf8.RuneCountInString(m.ID); n < 1 || n > MaxModelLength || models[m.ID] {
				return fmt.Errorf("sku %s: model id %q must be 1 to 64 characters and unique", s.Sku, m.ID)
			}
			models[m.ID] = true
			if err := checkPrices(m.Prices); err != nil {
				return fmt.Errorf("model %s: %w", m.ID, err)
			}
			if m.MaxQuantity < 1 || m.MaxQuantity > 3 || m.Inventory < 0 {
				return fmt.Errorf("model %s: maxQuantity must be 1 to 3 and inventory at least 0", m.ID)
			}
			codes := map[string]bool{}
			for _, r := range m.Regions {
				if !regionCode.MatchString(r.Code) || codes[r.Code] || r.Inventory < 0 {
					return fmt.Errorf("model %s: region %q must be two capital letters, listed once, inventory at least 0", m.ID, r.Code)
				}
				codes[r.Code] = true
			}
			if m.DefaultRegion != "" && !regionCode.MatchString(m.DefaultRegion) {
				return fmt.Errorf("model %s: defaultRegion %q must be two capital letters", m.ID, m.DefaultRegion)
			}
		}
	}
	if c.Default != nil {
		if _, ok := c.Row(c.Default.Sku, c.Default.Billing); !ok {
			return fmt.Errorf("default %s/%s is not a row of the price list", c.Default.Sku, c.Default.Billing)
		}
	}
	if c.CopilotTokensPerDevice != nil && *c.CopilotTokensPerDevice < 0 {
		return fmt.Errorf("copilotTokensPerDevice must be at least 0")
	}
	if c.Pool != nil && (c.Pool.Size < 0 || !seen[c.Pool.Sku]) {
		return fmt.Errorf("pool: sku must be listed and size at least 0")
	}
	return nil
}

func checkPrices(p Prices) error {
	for billing, amount := range p {
		if !slices.Contains(BillingModes, billing) {
			return fmt.Errorf("unknown billing mode %q", billing)
		}
		if amount != nil && *amount < 0 {
			return fmt.Errorf("price for %s is negative", billing)
		}
	}
	return nil
}

// Sku returns the catalog entry of sku.
func (c *Catalog) Sku(sku string) (CatalogSku, bool) {
	for _, s := range c.Skus {
		if s.Sku == sku {
			return s, true
		}
	}
	return CatalogSku{}, false
}

// SimModel is the simulator model a unit of sku is registered as (see
// CatalogSku.SimModel): "" for the simulator's default.
func (c *Catalog) SimModel(sku string) string {
	s, _ := c.Sku(sku)
	return s.SimModel
}

// PriceRow is one row of the price list: a sku and billing pair the
// deployment prices, with the models listed on it.
type PriceRow struct {
	Sku     string
	Billing string
	Name    string
	// Amount is the price without a model; nil when the row needs a model.
	Amount        *int64
	MaxQuantity   int
	Backorderable bool
	Models        []PriceModel
}

// PriceModel is a model as listed on one row.
type PriceModel struct {
	CatalogModel
	// Amount is the model's price on this row; nil when listed but
	// unavailable now.
	Amount *int64
}

// NeedsModel reports whether a purchase on this row must name a model.
func (r PriceRow) NeedsModel() bool { return r.Amount == nil && len(r.Models) > 0 }

// Model returns the model id listed on the row.
func (r PriceRow) Model(id string) (PriceModel, bool) {
	for _, m := range r.Models {
		if m.ID == id {
			return m, true
		}
	}
	return PriceModel{}, false
}

// Row returns the price-list row of a sku and billing pair: present when
// the sku has a price for billing or lists a model with one.
func (c *Catalog) Row(sku, billing string) (PriceRow, bool) {
	s, ok := c.Sku(sku)
	if !ok {
		return PriceRow{}, false
	}
	row := PriceRow{Sku: sku, Billing: billing, Name: s.Name, MaxQuantity: s.MaxQuantity, Backorderable: s.Backorderable}
	amount, priced := s.Prices[billing]
	if priced {
		row.Amount = amount
	}
	for _, m := range s.Models {
		if a, ok := m.Prices[billing]; ok {
			row.Models = append(row.Models, PriceModel{CatalogModel: m, Amount: a})
		}
	}
	if !priced && len(row.Models) == 0 {
		return PriceRow{}, false
	}
	if priced && amount == nil && len(row.Models) == 0 {
		// Listed with no price and no model: nothing can be bought on it.
		return row, true
	}
	return row, true
}

// Rows returns every row of the price list, in sku then billing order.
func (c *Catalog) Rows() []PriceRow {
	var out []PriceRow
	for _, s := range c.Skus {
		for _, b := range BillingModes {
			if r, ok := c.Row(s.Sku, b); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// QuoteID is the digest of a price: the sku, billing, model, currency and
// amount. A changed price changes it, so a checkout carrying an old quoteId
// is refused with quote_changed instead of charging a price the customer
// did not see. It is never used as the charge amount.
func QuoteID(currency, sku, billing, model string, amount int64) string {
	h := sha256.Sum256([]byte(currency + "\x00" + sku + "\x00" + billing + "\x00" + model + "\x00" + strconv.FormatInt(amount, 10)))
	return "qt_" + hex.EncodeToString(h[:12])
}

// Slot names where a unit comes from, for inventory: the sku, and the model
// and region when a purchase names them ("cloud_phone/pixel-8/US").
func Slot(sku, model, region string) string {
	s := sku
	if model != "" {
		s += "/" + model
		if region != "" {
			s += "/" + region
		}
	}
	return s
}

// Capacity returns how many units the deployment can hand out at slot in
// all (before subtracting those in use), and whether a sold-out slot may be
// paid for as a backorder. ok is false for a slot the catalog does not list.
func (c *Catalog) Capacity(sku, model, region string) (units int, backorderable bool, ok bool) {
	s, found := c.Sku(sku)
	if !found {
		return 0, false, false
	}
	if model == "" {
		return s.Inventory, s.Backorderable, true
	}
	for _, m := range s.Models {
		if m.ID != model {
			continue
		}
		if len(m.Regions) == 0 {
			return m.Inventory, m.Backorderable, region == ""
		}
		for _, r := range m.Regions {
			if r.Code == region {
				b := m.Backorderable
				if r.Backorderable != nil {
					b = *r.Backorderable
				}
				return r.Inventory, b, true
			}
		}
		return 0, false, false
	}
	return 0, false, false
}
