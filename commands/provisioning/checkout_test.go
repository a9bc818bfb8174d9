package provisioning_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// checkoutProvider is the real stripe-mock-backed provider, observed: it
// counts every call by method. Two answers stripe-mock cannot give are
// overridden where a test asks: a session that can no longer be expired
// (stripe-mock expires any id) and a non-zero customer balance
// (stripe-mock's customers hold none).
type checkoutProvider struct {
	payments.Provider
	mu           sync.Mutex
	calls        map[string]int
	notExpirable bool
	balance      int64
}

func (c *checkoutProvider) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[method]++
}

// n returns how often method was called.
func (c *checkoutProvider) n(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

func (c *checkoutProvider) CreateCheckoutSession(ctx context.Context, r payments.CheckoutRequest) (payments.CheckoutSession, error) {
	c.count("create")
	return c.Provider.CreateCheckoutSession(ctx, r)
}

func (c *checkoutProvider) ExpireCheckoutSession(ctx context.Context, id string) error {
	c.count("expire")
	c.mu.Lock()
	refuse := c.notExpirable
	c.mu.Unlock()
	if refuse {
		return fmt.Errorf("%w: session %s is complete", payments.ErrNotExpirable, id)
	}
	return c.Provider.ExpireCheckoutSession(ctx, id)
}

func (c *checkoutProvider) EnsureCustomer(ctx context.Context, orgID, existing string) (string, error) {
	c.count("customer")
	return c.Provider.EnsureCustomer(ctx, orgID, existing)
}

func (c *checkoutProvider) CustomerBalance(ctx context.Context, customerID string) (int64, error) {
	c.count("balance")
	b, err := c.Provider.CustomerBalance(ctx, customerID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.balance != 0 {
		b = c.balance
	}
	return b, err
}

// checkoutSent is what the provider was asked: each request's path, form
// and Idempotency-Key, as it went to stripe-mock.
type checkoutSent struct {
	mu       sync.Mutex
	requests []checkoutRequest
}

type checkoutRequest struct {
	path string
	form url.Values
	key  string
}

func (s *checkoutSent) to(path string) []checkoutRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []checkoutRequest
	for _, r := range s.requests {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// checkoutStripeMock is stripe-mock behind a recording proxy.
func checkoutStripeMock(t *testing.T) (string, *checkoutSent) {
	t.Helper()
	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	sent := &checkoutSent{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		form, _ := url.ParseQuery(string(body))
		sent.mu.Lock()
		sent.requests = append(sent.requests, checkoutRequest{path: r.URL.Path, form: form, key: r.Header.Get("Idempotency-Key")})
		sent.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, sent
}

// checkoutEnv is the provisioning capability over a database, with a
// clock the test moves and a provider over stripe-mock.
type checkoutEnv struct {
	t        *testing.T
	ctx      context.Context
	store    *eventstore.Store
	pool     *pgxpool.Pool
	clock    *testutil.Clock
	provider *checkoutProvider
	sent     *checkoutSent
	cfg      provisioning.Config
	p        *provisioning.Provisioning
	org      string
}

func newCheckoutEnv(t *testing.T, pool *pgxpool.Pool, configure ...func(*provisioning.Config)) *checkoutEnv {
	t.Helper()
	base, sent := checkoutStripeMock(t)
	e := &checkoutEnv{t: t, ctx: testutil.Context(t), pool: pool, sent: sent,
		store: eventstore.New(pool, eventstore.WithUpcaster(domain.Events)),
		clock: testutil.NewClock(time.Now().UTC().Truncate(time.Second)),
		provider: &checkoutProvider{calls: map[string]int{},
			Provider: payments.New(payments.Config{SecretKey: "sk_test_checkout", APIBase: base, MaxNetworkRetries: -1})},
		org: domain.NewID(domain.PrefixOrganisation)}
	e.cfg = provisioning.Config{Store: e.store, Payments: e.provider, PublicURL: "https://fleet.example/", Now: e.clock.Now}
	for _, c := range configure {
		c(&e.cfg)
	}
	e.p = provisioning.New(e.cfg)
	return e
}

func checkoutAdmin(org string) domain.Auth {
	return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
}

// checkout starts a checkout as the organisation's admin.
func (e *checkoutEnv) checkout(key, body string) (provisioning.CheckoutAnswer, error) {
	e.t.Helper()
	return e.checkoutAs(checkoutAdmin(e.org), key, body)
}

func (e *checkoutEnv) checkoutAs(a domain.Auth, key, body string) (provisioning.CheckoutAnswer, error) {
	e.t.Helper()
	req, err := domain.ReadPurchaseRequest([]byte(body))
	if err != nil {
		e.t.Fatalf("read %s: %v", body, err)
	}
	return (provisioning.StartCheckoutHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.StartCheckout{Auth: a, Request: req, IdempotencyKey: key})
}

// events returns the organisation's billing account as recorded.
func (e *checkoutEnv) events() []domain.Event {
	e.t.Helper()
	evs, err := e.store.Load(e.ctx, domain.AccountStream(e.org), 1)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]domain.Event, len(evs))
	for i, ev := range evs {
		if out[i], err = domain.Events.Decode(ev.Type, ev.SchemaVersion, ev.Data); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

func (e *checkoutEnv) eventNames() []string {
	var names []string
	for _, ev := range e.events() {
		names = append(names, ev.EventName())
	}
	return names
}

// record appends events to a stream as another part of the service would
// (the provider's webhook, the fulfilment workers).
func (e *checkoutEnv) record(stream, org string, evs ...domain.Event) {
	e.t.Helper()
	nes, err := eventstore.Encode(domain.Events, org, evs...)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Append(e.ctx, stream, eventstore.AnyVersion, nes...); err != nil {
		e.t.Fatal(err)
	}
}

// wantCheckoutCode fails unless err is a *domain.Error of code (and, when
// retryable is "yes" or "no", that retryability).
func wantCheckoutCode(t *testing.T, err error, code domain.Code, retryable string) *domain.Error {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != code {
		t.Fatalf("got %v; want %s", err, code)
	}
	if retryable != "" && (de.Retryable == nil || *de.Retryable != (retryable == "yes")) {
		t.Fatalf("got retryable %v; want %s (%v)", de.Retryable, retryable, err)
	}
	return de
}

const (
	checkoutDay   = `{"sku":"emulator","billing":"day"}`
	checkoutWeek  = `{"sku":"emulator","billing":"subscription"}`
	checkoutPaygB = `{"sku":"emulator","billing":"payg"}`
)

func pixelBody(quantity int) string {
	q := domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "pixel-8", 9900)
	return fmt.Sprintf(`{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":%q,"quantity":%d,"region":"DE","addOns":{"usFixedIp":true}}`, q, quantity)
}

func TestCheckoutOpensAPageAgainstStripeMock(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	got, err := e.checkout("", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.CheckoutURL, "https://") || !domain.HasPrefix(got.OrderID, domain.PrefixOrder) || got.Quantity != 1 ||
		!slices.Equal(got.FulfilmentIDs, []string{got.OrderID}) || !got.ExpiresAt.Equal(e.clock.Now().Add(domain.CheckoutPageLifetime)) || got.Replayed {
		t.Fatalf("got %+v; want a page for one phone whose fulfilment id is the order id, payable for an hour", got)
	}
	if names := e.eventNames(); !slices.Equal(names, []string{"checkout.started", "billing.customer_recorded", "checkout.opened"}) {
		t.Errorf("recorded %v; want the attempt started, the customer recorded once, the page opened", names)
	}
	started := e.events()[0].(domain.CheckoutStarted)
	if started.Choice.Sku != domain.SkuEmulator || started.Choice.Billing != domain.BillingSubscription || started.UnitAmount != 2900 ||
		started.Currency != "usd" || started.By != (domain.Actor{Kind: "user", ID: "user_admin"}) || started.RequestDigest == "" {
		t.Errorf("started %+v; want the default emulator subscription at the catalog's 2900 usd, by the admin", started)
	}
	creates := e.sent.to("/v1/checkout/sessions")
	if len(creates) != 1 {
		t.Fatalf("got %d session requests; want 1", len(creates))
	}
	f := creates[0].form
	for k, want := range map[string]string{
		"mode": "subscription", "currency": "usd", "client_reference_id": got.OrderID,
		"line_items[0][price_data][unit_amount]": "2900", "line_items[0][quantity]": "1",
		"line_items[0][price_data][recurring][interval]": "month", "metadata[org_id]": e.org, "metadata[order_id]": got.OrderID,
		"metadata[fulfilment_ids]": got.OrderID, "success_url": "https://fleet.example/#/billing?checkout=complete&orderId=" + got.OrderID,
		"cancel_url": "https://fleet.example/#/billing?checkout=cancelled&orderId=" + got.OrderID,
		"expires_at": fmt.Sprint(got.ExpiresAt.Unix()),
	} {
		if f.Get(k) != want {
			t.Errorf("sent %s=%q; want %q", k, f.Get(k), want)
		}
	}
	if creates[0].key != "phonefleet-checkout-"+got.OrderID {
		t.Errorf("sent Idempotency-Key %q; want one derived from the order id", creates[0].key)
	}

	// Three pixel-8 phones in DE: three fulfilment ids of their own, the
	// catalog's unit amount times three, the add-on recorded only.
	e.clock.Advance(time.Hour) // the first page has expired by now
	got, err = e.checkout("", pixelBody(3))
	if err != nil {
		t.Fatal(err)
	}
	if got.Quantity != 3 || len(got.FulfilmentIDs) != 3 || slices.Contains(got.FulfilmentIDs, got.OrderID) {
		t.Errorf("got %+v; want three fulfilment ids of their own", got)
	}
	f = e.sent.to("/v1/checkout/sessions")[1].form
	if f.Get("line_items[0][price_data][unit_amount]") != "9900" || f.Get("line_items[0][quantity]") != "3" ||
		f.Get("metadata[fulfilment_ids]") != strings.Join(got.FulfilmentIDs, ",") || f.Get("customer") == "" ||
		f.Get("line_items[0][price_data][product_data][name]") != "Cloud phone: Google Pixel 8 (DE)" {
		t.Errorf("sent %v; want 3 × 9900 for the account's customer, naming the phones", f)
	}
	evs := e.events()
	var last domain.CheckoutStarted
	var expired []domain.CheckoutExpired
	for _, ev := range evs {
		switch ev := ev.(type) {
		case domain.CheckoutStarted:
			last = ev
		case domain.CheckoutExpired:
			expired = append(expired, ev)
		}
	}
	if last.Choice.AddOns != (domain.AddOns{USFixedIP: true}) || last.Choice.Region != "DE" || last.UnitAmount != 9900 {
		t.Errorf("started %+v; want the add-on and region recorded at 9900", last)
	}
	if len(expired) != 1 || expired[0].Reason != domain.CheckoutTimedOut || e.provider.n("expire") != 0 {
		t.Errorf("got %v expired, %d expire calls; want the first page recorded expired by its time, without asking the provider", expired, e.provider.n("expire"))
	}
	if n := len(e.sent.to("/v1/customers")); n != 1 || e.provider.n("balance") != 1 {
		t.Errorf("got %d customer creations, %d balance reads; want the customer created once, its balance read by the second checkout",
			n, e.provider.n("balance"))
	}

	// A day pass pays once; pay-as-you-go saves a card.
	e.clock.Advance(time.Hour)
	if _, err := e.checkout("", checkoutDay); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if _, err := e.checkout("", checkoutPaygB); err != nil {
		t.Fatal(err)
	}
	all := e.sent.to("/v1/checkout/sessions")
	if all[2].form.Get("mode") != "payment" || all[3].form.Get("mode") != "setup" || all[3].form.Get("line_items[0][quantity]") != "" {
		t.Errorf("sent modes %q and %q; want payment for a day pass, setup (no line item) for pay-as-you-go",
			all[2].form.Get("mode"), all[3].form.Get("mode"))
	}
}

func TestCheckoutIdempotencyKeyWindow(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	first, err := e.checkout("key-1", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	// A repeat of the same request within 24 hours is the first answer,
	// whatever the spacing of its body; no new session.
	t0 := e.clock.Now()
	for _, at := range []time.Duration{time.Second, 23*time.Hour + 59*time.Minute} {
		e.clock.Set(t0.Add(at))
		again, err := e.checkout("key-1", ` {"billing":"day", "sku":"emulator"} `)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Replayed || again.OrderID != first.OrderID || again.CheckoutURL != first.CheckoutURL || !again.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("%s after the first: got %+v; want the first answer %+v, replayed", at, again, first)
		}
	}
	if e.provider.n("create") != 1 {
		t.Fatalf("got %d sessions; want 1", e.provider.n("create"))
	}
	// (23 h 59 min after the first attempt now.) The key for another purchase:
	_, err = e.checkout("key-1", checkoutWeek)
	wantCheckoutCode(t, err, domain.CodeIdempotencyConflict, "no")

	// Past 24 hours the key is free: a new attempt, a new order.
	e.clock.Set(t0.Add(24*time.Hour + time.Minute))
	later, err := e.checkout("key-1", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	if later.Replayed || later.OrderID == first.OrderID || e.provider.n("create") != 2 {
		t.Fatalf("after 24 h 1 min: got %+v with %d sessions; want a new attempt", later, e.provider.n("create"))
	}
	// And it replays in turn, even for a later request's repeat.
	again, err := e.checkout("key-1", checkoutDay)
	if err != nil || !again.Replayed || again.OrderID != later.OrderID {
		t.Fatalf("got %+v, %v; want the new attempt replayed", again, err)
	}
}

func TestCheckoutConcurrentRequestsWithOneKeyOpenOneSession(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	const n = 6
	var wg sync.WaitGroup
	start := make(chan struct{})
	answers := make([]provisioning.CheckoutAnswer, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = e.checkout("one-key", checkoutDay)
		}()
	}
	close(start)
	wg.Wait()
	if got := e.provider.n("create"); got != 1 {
		t.Fatalf("got %d provider sessions for %d concurrent requests with one key; want exactly 1", got, n)
	}
	order := ""
	for i := range n {
		if errs[i] != nil {
			wantCheckoutCode(t, errs[i], domain.CodeIdempotencyConflict, "yes")
			continue
		}
		if order == "" {
			order = answers[i].OrderID
		}
		if answers[i].OrderID != order {
			t.Errorf("request %d got order %s; want every answer to name %s", i, answers[i].OrderID, order)
		}
	}
	if order == "" {
		t.Fatal("no request got an answer")
	}
	// Repeating shortly gets the answer.
	if again, err := e.checkout("one-key", checkoutDay); err != nil || again.OrderID != order || !again.Replayed {
		t.Fatalf("got %+v, %v; want order %s replayed", again, err, order)
	}
}

func TestCheckoutAbandonedAttemptIsTakenOver(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
	now := e.clock.Now()
	orderID := domain.NewID(domain.PrefixOrder)
	// An attempt whose process died after checkout.started.
	e.record(domain.AccountStream(e.org), e.org, domain.CheckoutStarted{OrgID: e.org, OrderID: orderID, FulfilmentIDs: []string{orderID},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400,
		IdempotencyKey: domain.DigestKey("dead-key"), RequestDigest: req.Digest(), At: now})

	e.clock.Advance(time.Minute)
	_, err := e.checkout("dead-key", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeIdempotencyConflict, "yes")
	_, err = e.checkout("", checkoutWeek)
	wantCheckoutCode(t, err, domain.CodeCheckoutInProgress, "yes")

	e.clock.Advance(domain.CheckoutAbandonedAfter)
	got, err := e.checkout("dead-key", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	if got.OrderID != orderID || got.Replayed || !got.ExpiresAt.Equal(now.Add(domain.CheckoutPageLifetime)) {
		t.Fatalf("got %+v; want the abandoned attempt %s finished, its page payable an hour after it started", got, orderID)
	}
	creates := e.sent.to("/v1/checkout/sessions")
	if len(creates) != 1 || creates[0].key != "phonefleet-checkout-"+orderID || creates[0].form.Get("expires_at") != fmt.Sprint(now.Add(time.Hour).Unix()) {
		t.Fatalf("sent %+v; want one session asked with the attempt's own provider idempotency key", creates)
	}
	if again, err := e.checkout("dead-key", checkoutDay); err != nil || !again.Replayed || again.OrderID != orderID {
		t.Fatalf("got %+v, %v; want the finished attempt replayed", again, err)
	}
}

func TestCheckoutWithoutKeyRestartsAnOpenOrAbandonedAttempt(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	first, err := e.checkout("", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	second, err := e.checkout("", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	if second.OrderID == first.OrderID || second.Replayed || e.provider.n("expire") != 1 || e.provider.n("create") != 2 {
		t.Fatalf("got %+v after %+v with %d expiries, %d sessions; want the open page expired and a different attempt minted",
			second, first, e.provider.n("expire"), e.provider.n("create"))
	}
	if expires := e.sent.to("/v1/checkout/sessions/" + mustSession(t, e, first.OrderID) + "/expire"); len(expires) != 1 {
		t.Errorf("got %d expiries of the first page's session; want 1", len(expires))
	}
	var restarted []string
	for _, ev := range e.events() {
		if x, ok := ev.(domain.CheckoutExpired); ok && x.Reason == domain.CheckoutRestarted {
			restarted = append(restarted, x.OrderID)
		}
	}
	if !slices.Equal(restarted, []string{first.OrderID}) {
		t.Errorf("recorded restarted %v; want the first attempt", restarted)
	}

	// An attempt abandoned while running: its page (found with its own
	// provider key) is expired before the new one opens.
	dead := domain.NewID(domain.PrefixOrder)
	e.record(domain.AccountStream(e.org), e.org, domain.CheckoutStarted{OrgID: e.org, OrderID: dead, FulfilmentIDs: []string{dead},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400,
		RequestDigest: "x", At: e.clock.Now()})
	e.clock.Advance(domain.CheckoutAbandonedAfter)
	third, err := e.checkout("", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, r := range e.sent.to("/v1/checkout/sessions") {
		keys = append(keys, r.key)
	}
	if !slices.Contains(keys, "phonefleet-checkout-"+dead) || e.provider.n("expire") != 3 {
		t.Errorf("sent session keys %v and %d expiries; want the abandoned attempt's page found and expired, with the second's", keys, e.provider.n("expire"))
	}
	var a domain.Account
	for i, ev := range e.events() {
		a.Apply(ev, int64(i+1))
	}
	for id, want := range map[string]string{first.OrderID: domain.OrderExpired, second.OrderID: domain.OrderExpired,
		dead: domain.OrderExpired, third.OrderID: domain.OrderOpen} {
		if o, _ := a.Order(id); o.State != want {
			t.Errorf("%s: got %s; want %s", id, o.State, want)
		}
	}
}

// mustSession returns the session id recorded for an order.
func mustSession(t *testing.T, e *checkoutEnv, orderID string) string {
	t.Helper()
	for _, ev := range e.events() {
		if o, ok := ev.(domain.CheckoutOpened); ok && o.OrderID == orderID {
			return o.SessionID
		}
	}
	t.Fatalf("no page opened for %s", orderID)
	return ""
}

func TestCheckoutOpenPageThatCannotBeClosed(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	first, err := e.checkout("", checkoutDay)
	if err != nil {
		t.Fatal(err)
	}
	e.provider.notExpirable = true
	_, err = e.checkout("", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeCheckoutInProgress, "no")
	var a domain.Account
	for i, ev := range e.events() {
		a.Apply(ev, int64(i+1))
	}
	if o, _ := a.Order(first.OrderID); o.State != domain.OrderOpen || len(a.Orders) != 2 || a.Orders[1].State != domain.OrderFailed ||
		a.Orders[1].FailedCode != domain.CodeCheckoutInProgress || e.provider.n("create") != 1 {
		t.Fatalf("got orders %+v; want the first still open and the second failed without a page", a.Orders)
	}

	// Paid and being confirmed: never abandoned.
	e.provider.notExpirable = false
	e.record(domain.AccountStream(e.org), e.org, domain.OrderPaymentPending{OrderID: first.OrderID, ProviderEventID: "evt_1", At: e.clock.Now()})
	_, err = e.checkout("", checkoutDay)
	wantCheckoutCode(t, err, domain.CodePaymentInProgress, "yes")
	_, err = e.checkout("another-key", checkoutWeek)
	wantCheckoutCode(t, err, domain.CodePaymentInProgress, "yes")
	if e.provider.n("expire") != 1 || e.provider.n("create") != 1 {
		t.Errorf("got %d expiries, %d sessions; want nothing asked of the provider while a payment is confirmed", e.provider.n("expire"), e.provider.n("create"))
	}
}

func TestCheckoutProviderDownFreesTheKey(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	down := provisioning.New(provisioning.Config{Store: e.store, Now: e.clock.Now, PublicURL: "https://fleet.example",
		Payments: payments.New(payments.Config{SecretKey: "sk_test_down", APIBase: billingClosedURL(t), MaxNetworkRetries: -1})})
	req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
	_, err := (provisioning.StartCheckoutHandler{Provisioning: down}).Handle(e.ctx, provisioning.StartCheckout{Auth: checkoutAdmin(e.org), Request: req, IdempotencyKey: "k"})
	wantCheckoutCode(t, err, domain.CodeCheckoutUnavailable, "yes")
	names := e.eventNames()
	if !slices.Equal(names, []string{"checkout.started", "checkout.failed"}) {
		t.Fatalf("recorded %v; want the attempt started then failed", names)
	}
	if f := e.events()[1].(domain.CheckoutFailed); f.Code != domain.CodeCheckoutUnavailable {
		t.Errorf("failed %+v", f)
	}
	// The key is free: the same request, the provider back, opens a page.
	got, err := e.checkout("k", checkoutDay)
	if err != nil || got.Replayed || got.OrderID == e.events()[0].(domain.CheckoutStarted).OrderID {
		t.Fatalf("got %+v, %v; want a new attempt", got, err)
	}
}

func TestCheckoutCustomerBalanceBlocks(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	e.record(domain.AccountStream(e.org), e.org, domain.BillingCustomerRecorded{OrgID: e.org, CustomerID: "cus_balance"})
	e.provider.balance = -500
	_, err := e.checkout("", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeCheckoutCustomerBalance, "no")
	if names := e.eventNames(); len(names) != 1 || e.provider.n("create") != 0 || e.provider.n("balance") != 1 {
		t.Errorf("recorded %v with %d sessions; want nothing started", names, e.provider.n("create"))
	}
	e.provider.balance = 0
	if _, err := e.checkout("", checkoutDay); err != nil {
		t.Fatalf("zero balance: %v", err)
	}
}

func TestCheckoutAlreadyProvisioned(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	// A paid subscription of two phones, one provisioned, one cancelled.
	order, ful1, ful2 := domain.NewID(domain.PrefixOrder), domain.NewID(domain.PrefixFulfilment), domain.NewID(domain.PrefixFulfilment)
	choice := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US", Quantity: 2}
	at := e.clock.Now()
	e.record(domain.AccountStream(e.org), e.org,
		domain.CheckoutStarted{OrgID: e.org, OrderID: order, FulfilmentIDs: []string{ful1, ful2}, Choice: choice, At: at},
		domain.CheckoutOpened{OrderID: order, SessionID: "cs_paid", CheckoutURL: "https://pay", ExpiresAt: at.Add(time.Hour)},
		domain.OrderPaid{OrderID: order, ProviderEventID: "evt_paid", PaidAt: at})
	for _, f := range []string{ful1, ful2} {
		e.record(domain.FulfilmentStream(f), e.org, domain.FulfilmentCreated{FulfilmentID: f, OrgID: e.org, OrderID: order, Choice: choice, At: at})
	}
	e.record(domain.FulfilmentStream(ful1), e.org, domain.FulfilmentProvisioned{FulfilmentID: ful1, DeviceID: "dev_1", At: at})
	e.record(domain.FulfilmentStream(ful2), e.org, domain.FulfilmentCancelled{FulfilmentID: ful2, Reason: domain.EndCustomerCancel, At: at})

	// Whatever the configuration gaps: no provider, a body naming no price.
	gaps := provisioning.New(provisioning.Config{Store: e.store, Now: e.clock.Now})
	for _, body := range []string{"", `{"sku":"phone_robot_ios","billing":"day"}`, checkoutDay} {
		req, _ := domain.ReadPurchaseRequest([]byte(body))
		_, err := (provisioning.StartCheckoutHandler{Provisioning: gaps}).Handle(e.ctx, provisioning.StartCheckout{Auth: checkoutAdmin(e.org), Request: req})
		de := wantCheckoutCode(t, err, domain.CodeWrongState, "no")
		if de.Extra["state"] != "provisioned" {
			t.Errorf("got state %v; want provisioned", de.Extra["state"])
		}
	}
	adm, err := (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: checkoutAdmin(e.org), CheckoutServed: true})
	if err != nil || !adm.Provisioned || adm.CheckoutAvailable || adm.CheckoutBlocked != provisioning.AdmissionProvisioned ||
		adm.Fulfilments != (provisioning.FulfilmentCounts{Provisioned: 1, Cancelled: 1}) {
		t.Errorf("admission %+v, %v; want provisioned, one phone live and one cancelled", adm, err)
	}

	// Once the last live phone is cancelled, the organisation may buy again.
	e.record(domain.FulfilmentStream(ful1), e.org, domain.FulfilmentCancelled{FulfilmentID: ful1, Reason: domain.EndCustomerReturn, At: at})
	if _, err := e.checkout("", checkoutDay); err != nil {
		t.Fatalf("after every phone was cancelled: %v", err)
	}
}

func TestCheckoutCallers(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t), func(c *provisioning.Config) { c.ServedInstances = []string{"https://idp.example/"} })
	inst := func(a domain.Auth) domain.Auth { a.Instance = "https://idp.example"; return a }
	admin := inst(checkoutAdmin(e.org))
	member := inst(domain.Auth{OrgID: e.org, Kind: domain.PrincipalConsole, UserID: "user_m", Role: domain.RoleMember,
		Scopes: []domain.Scope{domain.ScopeDevicesRead}})
	key := inst(domain.Auth{OrgID: e.org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeOrdersPlace}})
	keyNoScope := inst(domain.Auth{OrgID: e.org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_2", Scopes: []domain.Scope{domain.ScopeDevicesRead}})
	app := inst(domain.Auth{OrgID: e.org, Kind: domain.PrincipalApp, UserID: "user_admin", ClientID: "cl_1", Role: domain.RoleAdmin,
		Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeOrdersPlace}})
	memberApp := inst(domain.Auth{OrgID: e.org, Kind: domain.PrincipalApp, UserID: "user_m", ClientID: "cl_1", Role: domain.RoleMember,
		Scopes: []domain.Scope{domain.ScopeDevicesRead}})
	for _, tt := range []struct {
		name string
		who  domain.Auth
		body string
	}{
		{"member", member, checkoutDay},
		{"key without orders:place", keyNoScope, checkoutDay},
		{"key buying pay-as-you-go", key, checkoutPaygB},
		{"app buying pay-as-you-go", app, checkoutPaygB},
		{"member's app", memberApp, checkoutDay},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.checkoutAs(tt.who, "", tt.body)
			de := wantCheckoutCode(t, err, domain.CodePermissionDenied, "")
			if tt.who.IsApp() && tt.who.Role == domain.RoleAdmin && de.Extra["where"] != "the console" {
				t.Errorf("got where %v; want the console", de.Extra["where"])
			}
		})
	}
	other := checkoutAdmin(e.org)
	other.Instance = "https://other-idp.example"
	_, err := e.checkoutAs(other, "", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeInstanceNotServed, "no")
	if e.provider.n("create") != 0 || len(e.events()) != 0 {
		t.Fatal("a refused caller reached the provider or recorded an attempt")
	}
	// Allowed: a prepaid plan by key, by the admin's app, by the admin.
	for _, who := range []domain.Auth{key, app, admin} {
		e.clock.Advance(time.Hour)
		if _, err := e.checkoutAs(who, "", checkoutDay); err != nil {
			t.Fatalf("%s: %v", who.Kind, err)
		}
	}
	e.clock.Advance(time.Hour)
	if _, err := e.checkoutAs(admin, "", checkoutPaygB); err != nil {
		t.Fatalf("the admin's pay-as-you-go: %v", err)
	}
}

// TestCheckoutNotServedAnswersACheckoutCode checks an application without
// the provisioning capability: its checkout answers 503
// checkout_unavailable, one of the three codes spec 2.3 allows a checkout
// 503, not the generic service_unavailable.
func TestCheckoutNotServedAnswersACheckoutCode(t *testing.T) {
	app := commands.NewApplication(commands.Capabilities{})
	req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
	_, err := app.Provisioning.StartCheckout.Handle(testutil.Context(t),
		provisioning.StartCheckout{Auth: checkoutAdmin(domain.NewID(domain.PrefixOrganisation)), Request: req})
	wantCheckoutCode(t, err, domain.CodeCheckoutUnavailable, "no")
}

// TestCheckoutIdentityCheckUnverifiable: when the step-up token cannot be
// verified because the authorization server's keys cannot be read, the
// answer is 503 checkout_unavailable (retryable), not
// reverification_required (not the person's doing) and not
// service_unavailable (spec 2.3's checkout codes).
func TestCheckoutIdentityCheckUnverifiable(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t), func(c *provisioning.Config) {
		c.RequireReverification = true
		c.StepUp = func(context.Context, string, string) (time.Time, error) {
			return time.Time{}, domain.Errorf(domain.CodeServiceUnavailable, "the authorization server's keys cannot be fetched")
		}
	})
	req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
	_, err := (provisioning.StartCheckoutHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.StartCheckout{Auth: checkoutAdmin(e.org), Request: req, StepUp: "a-token"})
	wantCheckoutCode(t, err, domain.CodeCheckoutUnavailable, "yes")
}

func TestCheckoutReverification(t *testing.T) {
	var checked []string
	authAt := time.Time{}
	e := newCheckoutEnv(t, testutil.Pool(t), func(c *provisioning.Config) {
		c.RequireReverification = true
		c.StepUp = func(_ context.Context, token, subject string) (time.Time, error) {
			checked = append(checked, token+"@"+subject)
			if token != "good" {
				return time.Time{}, errors.New("does not verify")
			}
			return authAt, nil
		}
	})
	run := func(a domain.Auth, stepUp string) error {
		req, _ := domain.ReadPurchaseRequest([]byte(checkoutDay))
		_, err := (provisioning.StartCheckoutHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.StartCheckout{Auth: a, Request: req, StepUp: stepUp})
		return err
	}
	admin := checkoutAdmin(e.org)
	for name, token := range map[string]string{"none": "", "invalid": "bad"} {
		de := wantCheckoutCode(t, run(admin, token), domain.CodeReverificationRequired, "yes")
		if de.Extra["maxAgeMinutes"] != 10 {
			t.Errorf("%s: got maxAgeMinutes %v; want 10", name, de.Extra["maxAgeMinutes"])
		}
	}
	authAt = e.clock.Now().Add(-10*time.Minute - time.Second)
	wantCheckoutCode(t, run(admin, "good"), domain.CodeReverificationRequired, "yes")
	authAt = e.clock.Now().Add(-9 * time.Minute)
	if err := run(admin, "good"); err != nil {
		t.Fatalf("an identity check 9 minutes old: %v", err)
	}
	if !slices.Contains(checked, "good@user_admin") {
		t.Errorf("checked %v; want the token checked for the admin's subject", checked)
	}
	// A key is never asked.
	e.clock.Advance(time.Hour)
	key := domain.Auth{OrgID: e.org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeOrdersPlace}}
	if err := run(key, ""); err != nil {
		t.Fatalf("a key: %v", err)
	}
}

// checkoutWithInventory is a checkout environment on a database of its own
// whose fulfilments read model runs, and a helper recording live phones of
// another organisation in a slot.
func checkoutWithInventory(t *testing.T, configure ...func(*provisioning.Config)) (*checkoutEnv, func(slot domain.PurchaseChoice, n int)) {
	t.Helper()
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), []projections.Projection{projections.Fulfilments{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := newCheckoutEnv(t, pool, configure...)
	other := domain.NewID(domain.PrefixOrganisation)
	live := func(c domain.PurchaseChoice, n int) {
		t.Helper()
		var last eventstore.Appended
		for range n {
			id := domain.NewID(domain.PrefixFulfilment)
			nes, err := eventstore.Encode(domain.Events, other,
				domain.Event(domain.FulfilmentCreated{FulfilmentID: id, OrgID: other, OrderID: "ord_x", Choice: c, At: e.clock.Now()}),
				domain.Event(domain.FulfilmentProvisioned{FulfilmentID: id, DeviceID: "dev_x", At: e.clock.Now()}))
			if err != nil {
				t.Fatal(err)
			}
			if last, err = store.Append(e.ctx, domain.FulfilmentStream(id), eventstore.NoStream, nes...); err != nil {
				t.Fatal(err)
			}
		}
		wctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()
		if err := runner.WaitFor(wctx, projections.FulfilmentsName, last); err != nil {
			t.Fatal(err)
		}
	}
	return e, live
}

func TestCheckoutStock(t *testing.T) {
	e, live := checkoutWithInventory(t)
	iphone := domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "iphone-15", 14900)
	iphoneBody := `{"sku":"cloud_phone","billing":"subscription","model":"iphone-15","quoteId":"` + iphone + `"}`
	pixel := domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "pixel-8", 9900)

	// A region sold out and not backorderable: 409, nothing charged.
	_, err := e.checkout("", `{"sku":"cloud_phone","billing":"subscription","model":"pixel-8","quoteId":"`+pixel+`","region":"JP"}`)
	wantCheckoutCode(t, err, domain.CodeOutOfStock, "no")
	// A model not backorderable: sold once its two units are live.
	live(domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "iphone-15", Quantity: 1}, 2)
	_, err = e.checkout("", iphoneBody)
	wantCheckoutCode(t, err, domain.CodeOutOfStock, "no")
	// A backorderable slot sold out: bought all the same (promised).
	live(domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "DE", Quantity: 1}, 4)
	if _, err := e.checkout("", pixelBody(1)); err != nil {
		t.Fatalf("a backorder: %v", err)
	}
	if e.provider.n("create") != 1 {
		t.Errorf("got %d sessions; want one, for the backorder", e.provider.n("create"))
	}

	// The price list shows it.
	l, err := (provisioning.GetPriceListHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetPriceList{Auth: checkoutAdmin(e.org)})
	if err != nil {
		t.Fatal(err)
	}
	var sub provisioning.PriceListRow
	for _, r := range l.Rows {
		if r.Sku == domain.SkuCloudPhone && r.Billing == domain.BillingSubscription {
			sub = r
		}
	}
	byID := map[string]provisioning.PriceListModel{}
	for _, m := range sub.Models {
		byID[m.ID] = m
	}
	regions := map[string]provisioning.PriceListRegion{}
	for _, g := range byID["pixel-8"].Regions {
		regions[g.Code] = g
	}
	if !sub.NeedsModel || sub.Amount != nil || !sub.ShipsNow || byID["iphone-15"].ShipsNow || byID["iphone-15"].Backorderable ||
		!byID["pixel-8"].ShipsNow || regions["DE"].ShipsNow || !regions["US"].ShipsNow || regions["JP"].ShipsNow || regions["JP"].Backorderable ||
		byID["pixel-8"].QuoteID != pixel || byID["pixel-8"].MaxQuantity != 3 {
		t.Errorf("got row %+v; want live inventory: iPhone sold out, pixel-8 shipping in US but not DE or JP", sub)
	}
}

func TestCheckoutStockUnreadable(t *testing.T) {
	// A database whose fulfilments read model was never set up: the
	// inventory cannot be read.
	refusing := newCheckoutEnv(t, testutil.FreshPool(t), func(c *provisioning.Config) { c.RefuseOutOfStock = true })
	_, err := refusing.checkout("", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeCheckoutUnavailable, "yes")

	e := newCheckoutEnv(t, refusing.pool)
	// A backorderable slot needs no inventory: bought.
	if _, err := e.checkout("", checkoutDay); err != nil {
		t.Fatalf("backorderable: %v", err)
	}
	// A model that cannot be backordered: its listing cannot be resolved.
	q := domain.QuoteID("usd", domain.SkuCloudPhone, domain.BillingSubscription, "iphone-15", 14900)
	e.clock.Advance(time.Hour)
	_, err = e.checkout("", `{"sku":"cloud_phone","billing":"subscription","model":"iphone-15","quoteId":"`+q+`"}`)
	wantCheckoutCode(t, err, domain.CodeOutOfStock, "yes")
	_, err = (provisioning.GetPriceListHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetPriceList{Auth: checkoutAdmin(e.org)})
	wantCheckoutCode(t, err, domain.CodeAdmissionUnavailable, "yes")
}

func TestCheckoutRefusesOutOfStockWhenConfigured(t *testing.T) {
	e, live := checkoutWithInventory(t, func(c *provisioning.Config) { c.RefuseOutOfStock = true })
	live(domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "DE", Quantity: 1}, 3)
	_, err := e.checkout("", pixelBody(2))
	wantCheckoutCode(t, err, domain.CodeOutOfStock, "no")
	if _, err := e.checkout("", pixelBody(1)); err != nil {
		t.Fatalf("the last DE unit: %v", err)
	}
}

func TestAdmission(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))
	admin := checkoutAdmin(e.org)
	adm, err := (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: admin, CheckoutServed: true})
	if err != nil || adm != (provisioning.Admission{CheckoutAvailable: true}) {
		t.Fatalf("a new organisation: got %+v, %v; want nothing bought and checkout available", adm, err)
	}
	got, err := e.checkout("", checkoutPaygB)
	if err != nil {
		t.Fatal(err)
	}
	if got.Quantity != 0 || got.FulfilmentIDs != nil {
		t.Errorf("pay-as-you-go: got %+v; want no phone (a card saved)", got)
	}
	adm, _ = (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: admin, CheckoutServed: true})
	if adm.OpenCheckout == nil || adm.OpenCheckout.OrderID != got.OrderID || !adm.OpenCheckout.ExpiresAt.Equal(got.ExpiresAt) {
		t.Errorf("got %+v; want the open checkout %s", adm, got.OrderID)
	}
	e.record(domain.AccountStream(e.org), e.org, domain.OrderPaid{OrderID: got.OrderID, ProviderEventID: "evt_payg", PaidAt: e.clock.Now()})
	key := domain.Auth{OrgID: e.org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	adm, _ = (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: key, CheckoutServed: true})
	if !adm.PaygAccess || adm.OpenCheckout != nil || adm.Provisioned || !adm.CheckoutAvailable {
		t.Errorf("after the payg payment: got %+v; want pay-as-you-go access, nothing open", adm)
	}
	adm, _ = (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: key})
	if adm.CheckoutAvailable || adm.CheckoutBlocked != provisioning.AdmissionCheckoutNotServed {
		t.Errorf("a local deployment: got %+v; want checkout_not_served", adm)
	}
	noProvider := provisioning.New(provisioning.Config{Store: e.store, Now: e.clock.Now})
	adm, _ = (provisioning.GetAdmissionHandler{Provisioning: noProvider}).Handle(e.ctx, provisioning.GetAdmission{Auth: key, CheckoutServed: true})
	if adm.CheckoutBlocked != provisioning.AdmissionNoPaymentProvider {
		t.Errorf("no provider: got %+v", adm)
	}
	app := domain.Auth{OrgID: e.org, Kind: domain.PrincipalApp, UserID: "u", ClientID: "c", Role: domain.RoleAdmin}
	_, err = (provisioning.GetAdmissionHandler{Provisioning: e.p}).Handle(e.ctx, provisioning.GetAdmission{Auth: app, CheckoutServed: true})
	wantCheckoutCode(t, err, domain.CodePermissionDenied, "")
}
