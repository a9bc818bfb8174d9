package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// coPrincipal returns the caller a checkout test request names with
// X-Test-Principal, in the organisation X-Test-Org names.
func coPrincipal(name, org string) (domain.Auth, bool) {
	const inst = "https://idp.example"
	switch name {
	case "admin":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes, Instance: inst}, true
	case "member":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_member", Role: domain.RoleMember,
			Scopes: []domain.Scope{domain.ScopeDevicesRead}, Instance: inst}, true
	case "key":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_orders", Scopes: []domain.Scope{domain.ScopeOrdersPlace}, Instance: inst}, true
	case "reader-key":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_read", Scopes: []domain.Scope{domain.ScopeDevicesRead}, Instance: inst}, true
	case "app":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalApp, UserID: "user_admin", ClientID: "client_1", Role: domain.RoleAdmin,
			Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeOrdersPlace}, Instance: inst}, true
	case "unattributed":
		// A credential naming no sign-in instance (spec 4.1: the
		// organisation cannot be attributed to an authentication instance).
		return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes}, true
	case "elsewhere":
		return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes,
			Instance: "https://other-idp.example"}, true
	}
	return domain.Auth{}, false
}

type coAuthenticator struct{}

func (coAuthenticator) Authenticate(r *http.Request) (domain.Auth, error) {
	if r.Header.Get("Authorization") == "" {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonMissingCredentials, "send a bearer token")
	}
	a, ok := coPrincipal(r.Header.Get("X-Test-Principal"), r.Header.Get("X-Test-Org"))
	if !ok {
		return domain.Auth{}, domain.Unauthorized(domain.ReasonInvalidToken, "no such test principal")
	}
	return a, nil
}

// coProvider is the real stripe-mock provider, observed (sessions opened
// are counted); notExpirable and balance stand in for the two answers
// stripe-mock cannot give (a session that can no longer be expired, a
// customer holding a balance).
type coProvider struct {
	payments.Provider
	mu           sync.Mutex
	creates      int
	notExpirable bool
	balance      int64
}

func (c *coProvider) CreateCheckoutSession(ctx context.Context, r payments.CheckoutRequest) (payments.CheckoutSession, error) {
	c.mu.Lock()
	c.creates++
	c.mu.Unlock()
	return c.Provider.CreateCheckoutSession(ctx, r)
}

func (c *coProvider) ExpireCheckoutSession(ctx context.Context, id string) error {
	if c.notExpirable {
		return fmt.Errorf("%w: %s is complete", payments.ErrNotExpirable, id)
	}
	return c.Provider.ExpireCheckoutSession(ctx, id)
}

func (c *coProvider) CustomerBalance(ctx context.Context, id string) (int64, error) {
	b, err := c.Provider.CustomerBalance(ctx, id)
	if err == nil && c.balance != 0 {
		b = c.balance
	}
	return b, err
}

// coDB is one database with the fulfilments read model running, shared
// by the servers of a test.
type coDB struct {
	pool   *pgxpool.Pool
	store  *eventstore.Store
	runner *projections.Runner
}

func newCODB(t *testing.T) *coDB {
	t.Helper()
	pool, store := testStore(t, 8)
	runner := runProjections(t, store, projections.Fulfilments{})
	return &coDB{pool: pool, store: store, runner: runner}
}

// coEnv is a hosted server whose checkout routes run against db and
// stripe-mock.
type coEnv struct {
	t        *testing.T
	db       *coDB
	s        *Server
	v        *apitest.Validator
	clock    *testutil.Clock
	provider *coProvider
	org      string
}

type coOptions struct {
	mode     string
	provider payments.Provider // nil: stripe-mock; use noProvider for none
	none     bool
	config   func(*provisioning.Config)
	deps     func(*Deps)
}

func newCOEnv(t *testing.T, db *coDB, o coOptions) *coEnv {
	t.Helper()
	e := &coEnv{t: t, db: db, clock: testutil.NewClock(time.Now().UTC().Truncate(time.Second)), org: domain.NewID(domain.PrefixOrganisation)}
	cfg := provisioning.Config{Store: db.store, PublicURL: "https://fleet.example", Now: e.clock.Now,
		ServedInstances: []string{"https://idp.example"}}
	if !o.none {
		inner := o.provider
		if inner == nil {
			inner = payments.New(payments.Config{SecretKey: "sk_test_checkout", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1})
		}
		e.provider = &coProvider{Provider: inner}
		cfg.Payments = e.provider
	}
	if o.config != nil {
		o.config(&cfg)
	}
	app := commands.NewApplication(commands.Capabilities{Provisioning: provisioning.New(cfg)})
	mode := o.mode
	if mode == "" {
		mode = "hosted"
	}
	deps := Deps{Mode: mode, Auth: coAuthenticator{}, App: &app}
	if o.deps != nil {
		o.deps(&deps)
	}
	e.s, _ = newTestServer(t, deps)
	e.v = apitest.FromHandler(t, e.s.Handler())
	return e
}

// coAnswer is one exchange, checked against the served document.
type coAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a coAnswer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, a.body)
	}
	return m
}

func (a coAnswer) err(t *testing.T) map[string]any {
	t.Helper()
	return decodeErrorBody(t, a.body)
}

// do sends method path as principal (none: no Authorization) with body
// and header pairs, and checks the answer against the document.
func (e *coEnv) do(principal, method, path, body string, header ...string) coAnswer {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if principal != "" {
		req.Header.Set("Authorization", "Bearer test")
		req.Header.Set("X-Test-Org", e.org)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, raw := call(e.t, e.s, e.v, principal, req)
	return coAnswer{resp.StatusCode, resp.Header, raw}
}

func (e *coEnv) checkout(principal, body string, header ...string) coAnswer {
	e.t.Helper()
	return e.do(principal, http.MethodPost, "/v1/checkout-sessions", body, header...)
}

// want fails unless a is status with error code (and, when retryable is
// "yes" or "no", that retryability); it returns the error body.
func (a coAnswer) want(t *testing.T, status int, code string, retryable string) map[string]any {
	t.Helper()
	if a.status != status {
		t.Fatalf("got %d %s; want %d %s", a.status, a.body, status, code)
	}
	if code == "" {
		return nil
	}
	e := a.err(t)
	if e["code"] != code {
		t.Fatalf("got code %v (%s); want %s", e["code"], a.body, code)
	}
	if retryable != "" && e["retryable"] != (retryable == "yes") {
		t.Fatalf("got retryable %v; want %s (%s)", e["retryable"], retryable, a.body)
	}
	return e
}

func (e *coEnv) record(stream string, evs ...domain.Event) {
	e.t.Helper()
	nes, err := eventstore.Encode(domain.Events, e.org, evs...)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.store.Append(testutil.Context(e.t), stream, eventstore.AnyVersion, nes...); err != nil {
		e.t.Fatal(err)
	}
}

var (
	coPixel = domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "pixel-8", 9900)
	coDay   = `{"sku":"emulator","billing":"day"}`
)

func coPixelBody(extra string) string {
	return `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"` + coPixel + `"` + extra + `}`
}

// TestCheckoutAnswers200 covers the success row and the idempotency
// headers of spec 4.1.
func TestCheckoutAnswers200(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{})
	a := e.checkout("admin", "", "Idempotency-Key", "buy-1")
	a.want(t, http.StatusOK, "", "")
	got := a.json(t)
	if a.header.Get("Idempotent-Replayed") != "" || a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("first answer headers %v; want no Idempotent-Replayed", a.header)
	}
	keys := []string{}
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"checkoutUrl", "expiresAt", "fulfilmentIds", "orderId", "quantity"}) {
		t.Errorf("got members %v; want exactly spec 2.2's", keys)
	}
	again := e.checkout("admin", "", "Idempotency-Key", "buy-1")
	again.want(t, http.StatusOK, "", "")
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(a.body) {
		t.Errorf("repeat: got %s %v; want the first answer with Idempotent-Replayed: true", again.body, again.header)
	}
	t0 := e.clock.Now()
	e.clock.Set(t0.Add(23*time.Hour + 59*time.Minute))
	if late := e.checkout("admin", "", "Idempotency-Key", "buy-1"); late.header.Get("Idempotent-Replayed") != "true" || string(late.body) != string(a.body) {
		t.Errorf("23 h 59 min later: got %d %s; want the first answer replayed", late.status, late.body)
	}
	e.clock.Set(t0.Add(24*time.Hour + time.Minute))
	fresh := e.checkout("admin", "", "Idempotency-Key", "buy-1")
	fresh.want(t, http.StatusOK, "", "")
	if fresh.header.Get("Idempotent-Replayed") != "" || fresh.json(t)["orderId"] == got["orderId"] {
		t.Errorf("24 h 1 min later: got %s %v; want a new attempt, not replayed", fresh.body, fresh.header)
	}
	// A purchase of three phones, by the admin's app.
	e.clock.Advance(time.Hour)
	three := e.checkout("app", coPixelBody(`,"quantity":3,"region":"US"`))
	three.want(t, http.StatusOK, "", "")
	if m := three.json(t); m["quantity"] != float64(3) || len(m["fulfilmentIds"].([]any)) != 3 {
		t.Errorf("got %v; want three phones", m)
	}
	// A prepaid plan by a key with orders:place.
	e.clock.Advance(time.Hour)
	e.checkout("key", coDay).want(t, http.StatusOK, "", "")
	if e.provider.creates != 4 {
		t.Errorf("got %d sessions; want 4 (the replays opened none)", e.provider.creates)
	}
}

// TestCheckoutAnswers400 covers every 400 cause of spec 4.1's table.
func TestCheckoutAnswers400(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{})
	for _, tt := range []struct {
		name, body, field, mentions string
		header                      []string
	}{
		{name: "unreadable JSON", body: `{"sku":`},
		{name: "not an object", body: `["emulator"]`},
		{name: "unknown sku", body: `{"sku":"tablet","billing":"day"}`, field: "sku"},
		{name: "unknown billing", body: `{"sku":"emulator","billing":"hourly"}`, field: "billing"},
		{name: "sku without billing", body: `{"sku":"emulator"}`, field: "billing"},
		{name: "billing without sku", body: `{"billing":"day"}`, field: "sku"},
		{name: "model not on the row", body: `{"sku":"cloud_phone","billing":"subscription","model":"nokia-3310","quoteId":"q"}`, field: "model", mentions: "pixel-8"},
		{name: "model without a pair", body: `{"model":"pixel-8"}`, field: "model"},
		{name: "model required", body: `{"sku":"cloud_phone","billing":"subscription"}`, field: "model"},
		{name: "model too long", body: `{"sku":"cloud_phone","billing":"subscription","model":"` + strings.Repeat("x", 65) + `"}`, field: "model"},
		{name: "region without model", body: `{"sku":"cloud_phone","billing":"day","region":"US"}`, field: "region"},
		{name: "region for a model listing none", body: `{"sku":"cloud_phone","billing":"subscription","model":"iphone-15","quoteId":"q","region":"US"}`, field: "region"},
		{name: "region not listed", body: coPixelBody(`,"region":"FR"`), field: "region", mentions: "US, DE, JP"},
		{name: "region pattern", body: coPixelBody(`,"region":"usa"`), field: "region"},
		{name: "addOns unknown key", body: coPixelBody(`,"addOns":{"esim":true}`), field: "addOns"},
		{name: "addOns non-boolean", body: coPixelBody(`,"addOns":{"preinstallApps":1}`), field: "addOns"},
		{name: "addOns on an emulator", body: `{"sku":"emulator","billing":"day","addOns":{"usFixedIp":true}}`, field: "addOns"},
		{name: "quantity 0", body: coPixelBody(`,"quantity":0`), field: "quantity"},
		{name: "quantity 21", body: coPixelBody(`,"quantity":21`), field: "quantity"},
		{name: "quantity over maxQuantity", body: coPixelBody(`,"quantity":4`), field: "quantity"},
		{name: "quantity without a model", body: `{"sku":"emulator","billing":"day","quantity":1}`, field: "quantity"},
		{name: "quantity not an integer", body: coPixelBody(`,"quantity":"2"`), field: "quantity"},
		{name: "quoteId missing beside a model", body: `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8"}`, field: "quoteId"},
		{name: "Idempotency-Key too long", body: coDay, header: []string{"Idempotency-Key", strings.Repeat("k", 256)}},
		{name: "Idempotency-Key not printable", body: coDay, header: []string{"Idempotency-Key", "k\x7f"}},
		{name: "Idempotency-Key empty", body: coDay, header: []string{"Idempotency-Key", ""}},
		{name: "two Idempotency-Keys", body: coDay, header: []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := e.checkout("admin", tt.body, tt.header...)
			errBody := a.want(t, http.StatusBadRequest, "invalid_argument", "")
			if tt.field != "" && errBody["field"] != tt.field {
				t.Errorf("got field %v; want %s (%s)", errBody["field"], tt.field, a.body)
			}
			if !strings.Contains(fmt.Sprint(errBody["message"]), tt.mentions) {
				t.Errorf("got message %v; want it to name %s", errBody["message"], tt.mentions)
			}
		})
	}
	if e.provider.creates != 0 {
		t.Errorf("got %d sessions; want none for refused bodies", e.provider.creates)
	}
	// Unreadable JSON is refused before the caller is looked at; the body's
	// other problems after.
	e.checkout("member", `{"sku":`).want(t, http.StatusBadRequest, "invalid_argument", "")
	e.checkout("member", `{"sku":"tablet","billing":"day"}`).want(t, http.StatusForbidden, "permission_denied", "")
}

// TestCheckoutAnswers401And403 covers the callers refused.
func TestCheckoutAnswers401And403(t *testing.T) {
	db := newCODB(t)
	e := newCOEnv(t, db, coOptions{})
	a := e.checkout("", coDay)
	a.want(t, http.StatusUnauthorized, "unauthorized", "")
	if a.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without a bearer challenge")
	}
	for _, tt := range []struct {
		name, who, body, code string
	}{
		{"member", "member", coDay, "permission_denied"},
		{"key without orders:place", "reader-key", coDay, "permission_denied"},
		{"pay-as-you-go with a key", "key", `{"sku":"emulator","billing":"payg"}`, "permission_denied"},
		{"pay-as-you-go through an app", "app", `{"sku":"emulator","billing":"payg"}`, "permission_denied"},
		{"another sign-in instance", "elsewhere", coDay, "instance_not_served"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errBody := e.checkout(tt.who, tt.body).want(t, http.StatusForbidden, tt.code, "")
			if tt.who == "app" && errBody["where"] != "the console" {
				t.Errorf("got where %v; want the console", errBody["where"])
			}
		})
	}
	// Reverification where configured: a person without a fresh identity
	// check is refused; a key is never asked.
	strict := newCOEnv(t, db, coOptions{config: func(c *provisioning.Config) { c.RequireReverification = true }})
	errBody := strict.checkout("admin", coDay).want(t, http.StatusForbidden, "reverification_required", "yes")
	if errBody["maxAgeMinutes"] != float64(10) {
		t.Errorf("got maxAgeMinutes %v; want 10", errBody["maxAgeMinutes"])
	}
	strict.checkout("app", coDay, "x-service-step-up", "not-a-token").want(t, http.StatusForbidden, "reverification_required", "yes")
	strict.checkout("key", coDay).want(t, http.StatusOK, "", "")
}

// TestCheckoutAnswers409 covers every 409 of spec 4.1.
func TestCheckoutAnswers409(t *testing.T) {
	db := newCODB(t)
	e := newCOEnv(t, db, coOptions{})

	t.Run("quote_changed", func(t *testing.T) {
		stale := domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "pixel-8", 9000)
		a := e.checkout("admin", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"`+stale+`"}`)
		if a.want(t, http.StatusConflict, "quote_changed", "no")["quoteId"] != coPixel {
			t.Errorf("got %s; want the current quote named", a.body)
		}
	})
	t.Run("out_of_stock", func(t *testing.T) {
		e.checkout("admin", coPixelBody(`,"region":"JP"`)).want(t, http.StatusConflict, "out_of_stock", "no")
	})
	if e.provider.creates != 0 {
		t.Fatalf("got %d sessions; want nothing created by a stale quote or a sold-out region", e.provider.creates)
	}
	t.Run("idempotency_conflict", func(t *testing.T) {
		e.checkout("admin", coDay, "Idempotency-Key", "k-409").want(t, http.StatusOK, "", "")
		e.checkout("admin", `{"sku":"emulator","billing":"subscription"}`, "Idempotency-Key", "k-409").
			want(t, http.StatusConflict, "idempotency_conflict", "no")
		// A first attempt still running.
		req, _ := domain.ReadPurchaseRequest([]byte(coDay))
		o := domain.NewID(domain.PrefixOrder)
		e.clock.Advance(time.Hour)
		e.record(domain.AccountStream(e.org), domain.CheckoutStarted{OrgID: e.org, OrderID: o, FulfilmentIDs: []string{o},
			Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400,
			IdempotencyKey: domain.DigestKey("k-running"), RequestDigest: req.Digest(), At: e.clock.Now()})
		e.checkout("admin", coDay, "Idempotency-Key", "k-running").want(t, http.StatusConflict, "idempotency_conflict", "yes")
		// Another attempt while it runs.
		e.checkout("admin", coDay).want(t, http.StatusConflict, "checkout_in_progress", "yes")
		e.clock.Advance(domain.CheckoutAbandonedAfter) // it is abandoned, then taken over
		e.checkout("admin", coDay, "Idempotency-Key", "k-running").want(t, http.StatusOK, "", "")
	})
	t.Run("checkout_in_progress", func(t *testing.T) {
		e.provider.notExpirable = true
		defer func() { e.provider.notExpirable = false }()
		e.checkout("admin", coDay).want(t, http.StatusConflict, "checkout_in_progress", "no")
	})
	t.Run("payment_in_progress", func(t *testing.T) {
		o := domain.NewID(domain.PrefixOrder)
		e.clock.Advance(time.Hour)
		e.record(domain.AccountStream(e.org),
			domain.CheckoutStarted{OrgID: e.org, OrderID: o, FulfilmentIDs: []string{o}, Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, At: e.clock.Now()},
			domain.CheckoutOpened{OrderID: o, SessionID: "cs_x", CheckoutURL: "https://pay", ExpiresAt: e.clock.Now().Add(time.Hour)},
			domain.OrderPaymentPending{OrderID: o, ProviderEventID: "evt_pending"})
		e.checkout("admin", coDay).want(t, http.StatusConflict, "payment_in_progress", "yes")
		e.record(domain.AccountStream(e.org), domain.OrderPaid{OrderID: o, ProviderEventID: "evt_paid"})
	})
	t.Run("wrong_state", func(t *testing.T) {
		p := newCOEnv(t, db, coOptions{none: true}) // a configuration gap: no provider
		o := domain.NewID(domain.PrefixOrder)
		choice := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}
		p.record(domain.AccountStream(p.org), domain.CheckoutStarted{OrgID: p.org, OrderID: o, FulfilmentIDs: []string{o}, Choice: choice},
			domain.CheckoutOpened{OrderID: o, SessionID: "cs_y", CheckoutURL: "https://pay"}, domain.OrderPaid{OrderID: o, ProviderEventID: "evt_y"})
		p.record(domain.FulfilmentStream(o), domain.FulfilmentCreated{FulfilmentID: o, OrgID: p.org, OrderID: o, Choice: choice},
			domain.FulfilmentAwaitingProvisioning{FulfilmentID: o, EstimatedBy: time.Now().Add(24 * time.Hour)})
		if p.checkout("admin", "").want(t, http.StatusConflict, "wrong_state", "no")["state"] != "provisioned" {
			t.Error("wrong_state without state provisioned")
		}
		adm := p.do("admin", http.MethodGet, "/v1/admission", "")
		adm.want(t, http.StatusOK, "", "")
		if m := adm.json(t); m["provisioned"] != true || m["checkoutBlocked"] != "provisioned" {
			t.Errorf("admission %v; want provisioned", m)
		}
	})
}

// TestCheckoutAnswers413And429 covers the limits.
func TestCheckoutAnswers413And429(t *testing.T) {
	db := newCODB(t)
	e := newCOEnv(t, db, coOptions{deps: func(d *Deps) {
		d.Identity.RateLimiter = &identity.RateLimiter{DB: db.pool}
		d.Identity.RateLimitAuthenticated, d.Identity.RateLimitAnonymous = 3, 3
	}})
	big := `{"sku":"emulator","billing":"day","pad":"` + strings.Repeat("p", 1<<20) + `"}`
	e.checkout("admin", big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large", "")
	// The 413 of a declared length is answered before counting; three
	// requests spend the budget, the fourth is refused before any work.
	var last coAnswer
	for range 4 {
		last = e.checkout("admin", coDay)
	}
	last.want(t, http.StatusTooManyRequests, "rate_limited", "")
	for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"} {
		if last.header.Get(h) == "" {
			t.Errorf("429 without %s", h)
		}
	}
}

// TestCheckoutAnswers503 covers every reason the deployment cannot sell.
func TestCheckoutAnswers503(t *testing.T) {
	db := newCODB(t)
	odd, err := domain.ParseCatalog([]byte(`{"currency":"usd","skus":[
		{"sku":"emulator","name":"Emulator","prices":{"day":400},"maxQuantity":1,"backorderable":true,"inventory":5},
		{"sku":"cloud_phone","name":"Cloud phone","prices":{},"maxQuantity":1,"inventory":0,"models":[
			{"id":"soon","name":"Soon","listed":false,"prices":{"subscription":100},"maxQuantity":1,"backorderable":true},
			{"id":"unpriced","name":"Unpriced","listed":true,"prices":{"subscription":null},"maxQuantity":1,"backorderable":true},
			{"id":"stray","name":"Stray","listed":true,"prices":{"subscription":100},"maxQuantity":1,"backorderable":true,
			 "defaultRegion":"FR","regions":[{"code":"US","inventory":1}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	withOdd := newCOEnv(t, db, coOptions{config: func(c *provisioning.Config) { c.Catalog = odd }})
	for _, tt := range []struct{ name, body string }{
		{"no default price for an absent body", ""},
		{"no price for the named pair", `{"sku":"phone_robot_ios","billing":"subscription"}`},
		{"model not listed by its supplier yet", `{"sku":"cloud_phone","billing":"subscription","model":"soon","quoteId":"q"}`},
		{"monthly price unavailable", `{"sku":"cloud_phone","billing":"subscription","model":"unpriced","quoteId":"q"}`},
		{"default region not listed", `{"sku":"cloud_phone","billing":"subscription","model":"stray","quoteId":"q"}`},
		// The deployment's state is checked before the body's problems.
		{"no price, and a bad quantity", `{"sku":"phone_robot_ios","billing":"subscription","quantity":99}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			withOdd.checkout("admin", tt.body).want(t, http.StatusServiceUnavailable, "checkout_unavailable", "no")
		})
	}
	t.Run("no payment provider", func(t *testing.T) {
		newCOEnv(t, db, coOptions{none: true}).checkout("admin", "").want(t, http.StatusServiceUnavailable, "checkout_unavailable", "no")
	})
	t.Run("provider did not answer", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		down := newCOEnv(t, db, coOptions{provider: payments.New(payments.Config{SecretKey: "sk_test_down", APIBase: closed, MaxNetworkRetries: -1})})
		down.checkout("admin", coDay, "Idempotency-Key", "k").want(t, http.StatusServiceUnavailable, "checkout_unavailable", "yes")
	})
	t.Run("inventory unreadable with out-of-stock refusal", func(t *testing.T) {
		// A database whose fulfilments read model was never set up.
		pool, store := testStore(t, 4)
		bare := &coDB{pool: pool, store: store}
		e := newCOEnv(t, bare, coOptions{config: func(c *provisioning.Config) { c.RefuseOutOfStock = true }})
		e.checkout("admin", coDay).want(t, http.StatusServiceUnavailable, "checkout_unavailable", "yes")
		a := e.do("admin", http.MethodGet, "/v1/skus", "")
		a.want(t, http.StatusServiceUnavailable, "admission_unavailable", "yes")
		if a.header.Get("Retry-After") == "" {
			t.Error("admission_unavailable without Retry-After")
		}
	})
	t.Run("organisation not attributable to a sign-in instance", func(t *testing.T) {
		e := newCOEnv(t, db, coOptions{})
		e.checkout("unattributed", coDay).want(t, http.StatusServiceUnavailable, "checkout_unavailable", "no")
		// A configuration gap: an already-provisioned organisation still
		// answers 409 (spec 4.1, order of checks).
		o := domain.NewID(domain.PrefixOrder)
		choice := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}
		e.record(domain.AccountStream(e.org), domain.CheckoutStarted{OrgID: e.org, OrderID: o, FulfilmentIDs: []string{o}, Choice: choice},
			domain.CheckoutOpened{OrderID: o, SessionID: "cs_u", CheckoutURL: "https://pay"}, domain.OrderPaid{OrderID: o, ProviderEventID: "evt_u"})
		e.record(domain.FulfilmentStream(o), domain.FulfilmentCreated{FulfilmentID: o, OrgID: e.org, OrderID: o, Choice: choice},
			domain.FulfilmentProvisioned{FulfilmentID: o, DeviceID: "dev_u"})
		e.checkout("unattributed", coDay).want(t, http.StatusConflict, "wrong_state", "no")
		if e.provider.creates != 0 {
			t.Error("a session was opened for an organisation with no sign-in instance")
		}
	})
	t.Run("identity check cannot be verified now", func(t *testing.T) {
		// The authorization server's keys cannot be read: not the person's
		// doing, and still one of the three checkout codes (spec 2.3).
		e := newCOEnv(t, db, coOptions{config: func(c *provisioning.Config) {
			c.RequireReverification = true
			c.StepUp = func(context.Context, string, string) (time.Time, error) {
				return time.Time{}, domain.Errorf(domain.CodeServiceUnavailable, "the authorization server's keys cannot be fetched")
			}
		}})
		e.checkout("admin", coDay, "x-service-step-up", "a-token").want(t, http.StatusServiceUnavailable, "checkout_unavailable", "yes")
		if e.provider.creates != 0 {
			t.Error("a session was opened without the identity check")
		}
	})
	t.Run("customer balance", func(t *testing.T) {
		e := newCOEnv(t, db, coOptions{})
		e.record(domain.AccountStream(e.org), domain.BillingCustomerRecorded{OrgID: e.org, CustomerID: "cus_owing"})
		e.provider.balance = 2500
		e.checkout("admin", coDay).want(t, http.StatusServiceUnavailable, "checkout_customer_balance", "no")
	})
	t.Run("provisioning store unreadable", func(t *testing.T) {
		pool, store := testStore(t, 4)
		pool.Close() // every read fails
		gone := newCOEnv(t, &coDB{pool: pool, store: store}, coOptions{})
		// Spec 7.2: admission_unavailable is the provisioning store that
		// cannot be read; retry after Retry-After.
		unread := gone.checkout("admin", coDay)
		unread.want(t, http.StatusServiceUnavailable, "admission_unavailable", "yes")
		if unread.header.Get("Retry-After") == "" {
			t.Error("checkout admission_unavailable without Retry-After")
		}
		a := gone.do("reader-key", http.MethodGet, "/v1/admission", "")
		a.want(t, http.StatusServiceUnavailable, "admission_unavailable", "yes")
		if a.header.Get("Retry-After") == "" {
			t.Error("admission_unavailable without Retry-After")
		}
	})
}

// TestCheckoutLocalModeAnswers404 proves a local deployment does not serve
// checkout, while the price list and admission are served.
func TestCheckoutLocalModeAnswers404(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{mode: "local"})
	req := httptest.NewRequest(http.MethodPost, "/v1/checkout-sessions", strings.NewReader(coDay))
	req.Header.Set("Authorization", "Bearer test")
	req.Header.Set("X-Test-Principal", "admin")
	req.Header.Set("X-Test-Org", e.org)
	resp, body := apitest.Do(t, e.s.Handler(), req)
	if resp.StatusCode != http.StatusNotFound || decodeErrorBody(t, body)["code"] != "not_found" {
		t.Fatalf("got %d %s; want 404 not_found", resp.StatusCode, body)
	}
	e.v.CheckSchema(t, "Error", body)
	// The same answer as a path that was never served.
	other := httptest.NewRequest(http.MethodPost, "/v1/never-served", strings.NewReader(coDay))
	_, otherBody := apitest.Do(t, e.s.Handler(), other)
	if decodeErrorBody(t, otherBody)["message"] != decodeErrorBody(t, body)["message"] {
		t.Errorf("got %s; want the answer of an unserved path, %s", body, otherBody)
	}
	if e.provider.creates != 0 {
		t.Error("a local deployment opened a session")
	}
	adm := e.do("admin", http.MethodGet, "/v1/admission", "")
	adm.want(t, http.StatusOK, "", "")
	if m := adm.json(t); m["checkoutAvailable"] != false || m["checkoutBlocked"] != "checkout_not_served" {
		t.Errorf("local admission %v; want checkout_not_served", m)
	}
	e.do("admin", http.MethodGet, "/v1/skus", "").want(t, http.StatusOK, "", "")
}

// TestPriceListAndAdmissionRoutes reads both routes, as every kind of
// caller that may, and checks them against the document.
func TestPriceListAndAdmissionRoutes(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{})
	for _, who := range []string{"admin", "member", "reader-key", "app"} {
		a := e.do(who, http.MethodGet, "/v1/skus", "")
		a.want(t, http.StatusOK, "", "")
		m := a.json(t)
		if m["currency"] != "usd" || m["default"].(map[string]any)["sku"] != "emulator" {
			t.Fatalf("%s: got %v", who, m)
		}
		var pixel map[string]any
		for _, row := range m["skus"].([]any) {
			r := row.(map[string]any)
			if r["sku"] == "cloud_phone" && r["billing"] == "subscription" {
				if r["modelRequired"] != true || r["unitAmount"] != nil {
					t.Errorf("monthly cloud phone row %v; want a model required and no row price", r)
				}
				for _, mm := range r["models"].([]any) {
					if mm.(map[string]any)["id"] == "pixel-8" {
						pixel = mm.(map[string]any)
					}
				}
			}
		}
		if pixel == nil || pixel["quoteId"] != coPixel || pixel["unitAmount"] != float64(9900) || pixel["maxQuantity"] != float64(3) ||
			pixel["defaultRegion"] != "US" || len(pixel["regions"].([]any)) != 3 {
			t.Errorf("%s: pixel-8 %v; want its price, quote, default region and three regions", who, pixel)
		}
	}
	a := e.do("member", http.MethodGet, "/v1/admission", "")
	a.want(t, http.StatusOK, "", "")
	if m := a.json(t); m["checkoutAvailable"] != true || m["provisioned"] != false || m["openCheckout"] != nil {
		t.Errorf("admission %v; want a new organisation able to buy", m)
	}
	e.do("app", http.MethodGet, "/v1/admission", "").want(t, http.StatusForbidden, "permission_denied", "")
	e.checkout("admin", coDay).want(t, http.StatusOK, "", "")
	if m := e.do("reader-key", http.MethodGet, "/v1/admission", "").json(t); m["openCheckout"] == nil {
		t.Errorf("admission %v; want the open checkout", m)
	}
}

// TestAppsAreToldWhereToBuy walks the provisioning routes spec 5.2 keeps
// from OAuth apps (reading, cancelling and returning orders, billing and
// the portal, usage, onboarding status, a pay-as-you-go purchase): each
// answers 403 permission_denied whose where (and message) names where to
// do it instead; the price list and a prepaid checkout stay open to an
// admin's app.
func TestAppsAreToldWhereToBuy(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{})
	orders, billing := "the console's orders page", "the console's billing page"
	for _, tt := range []struct{ method, path, body, where string }{
		{http.MethodGet, "/v1/fulfilments", "", orders},
		{http.MethodGet, "/v1/fulfilments/ful_x/estimate-history", "", orders},
		{http.MethodGet, "/v1/fulfilments/ful_x/renewal-status", "", orders},
		{http.MethodPost, "/v1/fulfilments/ful_x/cancel", "", orders},
		{http.MethodPost, "/v1/fulfilments/ful_x/return", "", orders},
		{http.MethodPost, "/v1/fulfilments/ful_x/cancel-renewal", "", orders},
		{http.MethodGet, "/v1/billing/upcoming", "", billing},
		{http.MethodPost, "/v1/billing/portal-sessions", "", billing},
		{http.MethodGet, "/v1/usage", "", "the console's usage page"},
		{http.MethodGet, "/v1/admission", "", "the console"},
		{http.MethodPost, "/v1/checkout-sessions", `{"sku":"emulator","billing":"payg"}`, "the console"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			errBody := e.do("app", tt.method, tt.path, tt.body).want(t, http.StatusForbidden, "permission_denied", "")
			if errBody["where"] != tt.where || !strings.Contains(fmt.Sprint(errBody["message"]), tt.where) {
				t.Errorf("got %v; want where and message naming %q", errBody, tt.where)
			}
		})
	}
	e.do("app", http.MethodGet, "/v1/skus", "").want(t, http.StatusOK, "", "")
	e.checkout("app", coDay).want(t, http.StatusOK, "", "")
}

// TestCheckoutRoutesDocumentedAndMounted is the contract test for a hosted
// deployment's checkout routes: mounted and documented.
func TestCheckoutRoutesDocumentedAndMounted(t *testing.T) {
	e := newCOEnv(t, newCODB(t), coOptions{})
	mounted := apitest.RoutesOf(e.s.Router())
	documented := e.v.Operations()
	for _, r := range []apitest.Route{{Method: "GET", Path: "/v1/skus"}, {Method: "GET", Path: "/v1/admission"}, {Method: "POST", Path: "/v1/checkout-sessions"}} {
		if !slices.Contains(mounted, r) || !slices.Contains(documented, r) {
			t.Errorf("%s: mounted %v, documented %v; want both", r, slices.Contains(mounted, r), slices.Contains(documented, r))
		}
	}
}
