package payments

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/testutil"
)

// newMockProvider is a provider against the test binary's stripe-mock.
func newMockProvider(t *testing.T) *Stripe {
	t.Helper()
	return New(Config{SecretKey: "sk_test_phonefleet", APIBase: testutil.StripeMock(t)})
}

func checkoutRequest(mode string) CheckoutRequest {
	return CheckoutRequest{
		OrgID: "org_a", OrderID: "ord_1", CustomerID: "cus_123", Mode: mode, Currency: "eur",
		UnitAmount: 4900, Quantity: 2, ProductName: "Pixel 8 — monthly", SuccessURL: "https://example.test/ok",
		CancelURL: "https://example.test/cancel", ExpiresAt: time.Now().Add(time.Hour),
		IdempotencyKey: "checkout-ord_1-" + mode, Metadata: map[string]string{"sku": "pixel-8", MetaOrderID: "ignored"},
	}
}

func TestCreateCheckoutSessionInEveryMode(t *testing.T) {
	p := newMockProvider(t)
	for _, mode := range []string{ModeSubscription, ModePayment, ModeSetup} {
		t.Run(mode, func(t *testing.T) {
			cs, err := p.CreateCheckoutSession(context.Background(), checkoutRequest(mode))
			if err != nil {
				t.Fatalf("got %v; want a session (stripe-mock accepted the request)", err)
			}
			if !strings.HasPrefix(cs.ID, "cs_") || cs.URL == "" || cs.ExpiresAt.IsZero() {
				t.Fatalf("got %+v; want a cs_ id, a URL and an expiry", cs)
			}
		})
	}
}

// TestCheckoutRequestSent checks what goes over the wire, since stripe-mock
// answers fixtures and does not echo what it was sent.
func TestCheckoutRequestSent(t *testing.T) {
	base := testutil.StripeMock(t)
	var mu sync.Mutex
	var forms []map[string][]string
	var keys []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("parse form: %v", err)
		}
		mu.Lock()
		forms = append(forms, r.PostForm)
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		// Forward to stripe-mock, so that it still validates the request.
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), strings.NewReader(r.PostForm.Encode()))
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	defer proxy.Close()
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: proxy.URL})

	for _, tc := range []struct {
		mode string
		want map[string]string
		none []string
	}{
		{ModeSubscription, map[string]string{
			"mode": "subscription", "customer": "cus_123", "client_reference_id": "ord_1", "currency": "eur",
			"line_items[0][price_data][unit_amount]": "4900", "line_items[0][price_data][currency]": "eur",
			"line_items[0][price_data][recurring][interval]": "month", "line_items[0][quantity]": "2",
			"line_items[0][price_data][product_data][name]": "Pixel 8 — monthly",
			"metadata[org_id]": "org_a", "metadata[order_id]": "ord_1", "metadata[sku]": "pixel-8",
			"subscription_data[metadata][org_id]": "org_a", "subscription_data[metadata][order_id]": "ord_1",
		}, []string{"payment_intent_data[metadata][org_id]"}},
		{ModePayment, map[string]string{
			"mode": "payment", "line_items[0][price_data][unit_amount]": "4900", "line_items[0][quantity]": "2",
			"payment_intent_data[metadata][org_id]": "org_a", "payment_intent_data[metadata][order_id]": "ord_1",
		}, []string{"line_items[0][price_data][recurring][interval]", "subscription_data[metadata][org_id]"}},
		{ModeSetup, map[string]string{
			"mode": "setup", "currency": "eur", "setup_intent_data[metadata][org_id]": "org_a",
			"setup_intent_data[metadata][order_id]": "ord_1",
		}, []string{"line_items[0][quantity]"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			mu.Lock()
			forms, keys = nil, nil
			mu.Unlock()
			if _, err := p.CreateCheckoutSession(context.Background(), checkoutRequest(tc.mode)); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(forms) != 1 {
				t.Fatalf("got %d requests; want 1", len(forms))
			}
			for k, v := range tc.want {
				if got := forms[0][k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s: got %q; want %q", k, got, v)
				}
			}
			for _, k := range tc.none {
				if got, ok := forms[0][k]; ok {
					t.Errorf("%s: got %q; want it absent", k, got)
				}
			}
			if want := "checkout-ord_1-" + tc.mode; keys[0] != want {
				t.Errorf("Idempotency-Key: got %q; want %q", keys[0], want)
			}
		})
	}
}

func TestCheckoutRequestValidation(t *testing.T) {
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: "http://127.0.0.1:1"})
	for _, tc := range []struct {
		name   string
		change func(*CheckoutRequest)
	}{
		{"unknown mode", func(r *CheckoutRequest) { r.Mode = "rent" }},
		{"no quantity", func(r *CheckoutRequest) { r.Quantity = 0 }},
		{"negative amount", func(r *CheckoutRequest) { r.UnitAmount = -1 }},
		{"no currency", func(r *CheckoutRequest) { r.Currency = "" }},
		{"no order", func(r *CheckoutRequest) { r.OrderID = "" }},
		{"no success URL", func(r *CheckoutRequest) { r.SuccessURL = "" }},
		{"long key", func(r *CheckoutRequest) { r.IdempotencyKey = strings.Repeat("k", 256) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkoutRequest(ModePayment)
			tc.change(&r)
			_, err := p.CreateCheckoutSession(context.Background(), r)
			if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "invalid checkout request") {
				t.Fatalf("got %v; want an invalid checkout request refused before anything is sent", err)
			}
		})
	}
}

func TestExpireCheckoutSession(t *testing.T) {
	p := newMockProvider(t)
	if err := p.ExpireCheckoutSession(context.Background(), "cs_test_123"); err != nil {
		t.Fatalf("got %v; want the session expired", err)
	}
}

func TestReadCheckoutSession(t *testing.T) {
	p := newMockProvider(t)
	cs, err := p.CheckoutSession(context.Background(), "cs_test_123")
	if err != nil || cs.ID == "" || cs.Status == "" || cs.PaymentStatus == "" {
		t.Fatalf("got %+v, %v; want the session with its status and payment status", cs, err)
	}
	srv := answering(t, http.StatusNotFound, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such checkout.session"}}`)
	missing := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL, MaxNetworkRetries: -1})
	var refused *RefusedError
	if _, err := missing.CheckoutSession(context.Background(), "cs_gone"); !errors.As(err, &refused) || refused.Status != http.StatusNotFound {
		t.Fatalf("got %v; want a refusal (404)", err)
	}
}

func TestExpireCheckoutSessionNotExpirable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   error
	}{
		{"complete", http.StatusBadRequest, `{"error":{"type":"invalid_request_error","message":"Only Checkout Sessions with a status in [\"open\"] can be expired."}}`, ErrNotExpirable},
		{"unknown", http.StatusNotFound, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"session","message":"No such checkout.session"}}`, ErrNotExpirable},
		{"provider down", http.StatusServiceUnavailable, `{"error":{"type":"api_error","message":"try later"}}`, ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := answering(t, tc.status, tc.body)
			p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL, MaxNetworkRetries: -1})
			err := p.ExpireCheckoutSession(context.Background(), "cs_test_123")
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v; want %v", err, tc.want)
			}
			if tc.want == ErrNotExpirable && errors.Is(err, ErrUnavailable) {
				t.Fatalf("got %v; want not ErrUnavailable", err)
			}
		})
	}
}

func TestCustomerAndBalance(t *testing.T) {
	p := newMockProvider(t)
	ctx := context.Background()
	id, err := p.EnsureCustomer(ctx, "org_a", "")
	if err != nil || !strings.HasPrefix(id, "cus_") {
		t.Fatalf("got %q, %v; want a new cus_ id", id, err)
	}
	if again, err := p.EnsureCustomer(ctx, "org_a", "cus_recorded"); err != nil || again != "cus_recorded" {
		t.Fatalf("got %q, %v; want the recorded id without a call", again, err)
	}
	if _, err := p.CustomerBalance(ctx, id); err != nil {
		t.Fatalf("got %v; want the balance read", err)
	}
}

func TestEnsureCustomerSendsOrganisationAndKey(t *testing.T) {
	var form map[string][]string
	var key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		form, key = r.PostForm, r.Header.Get("Idempotency-Key")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"cus_new","object":"customer","balance":0}`))
	}))
	defer srv.Close()
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL})
	id, err := p.EnsureCustomer(context.Background(), "org_a", "")
	if err != nil || id != "cus_new" {
		t.Fatalf("got %q, %v; want cus_new", id, err)
	}
	if got := form["metadata[org_id]"]; len(got) != 1 || got[0] != "org_a" {
		t.Fatalf("metadata[org_id]: got %q; want org_a", got)
	}
	if key != "phonefleet-customer-org_a" {
		t.Fatalf("Idempotency-Key: got %q; want one per organisation", key)
	}
}

func TestCustomerBalanceAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int64
		refused    bool
	}{
		{"owes", `{"id":"cus_1","object":"customer","balance":1250}`, 1250, false},
		{"credit", `{"id":"cus_1","object":"customer","balance":-300}`, -300, false},
		{"deleted", `{"id":"cus_1","object":"customer","deleted":true}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := answering(t, http.StatusOK, tc.body)
			got, err := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL}).CustomerBalance(context.Background(), "cus_1")
			var refused *RefusedError
			if tc.refused != errors.As(err, &refused) || got != tc.want {
				t.Fatalf("got %d, %v; want %d (refused %v)", got, err, tc.want, tc.refused)
			}
		})
	}
}

func TestCreatePortalSession(t *testing.T) {
	p := newMockProvider(t)
	u, err := p.CreatePortalSession(context.Background(), "cus_123", "https://example.test/billing")
	if err != nil || !strings.HasPrefix(u, "http") {
		t.Fatalf("got %q, %v; want a portal URL", u, err)
	}
}

func TestUpcomingInvoice(t *testing.T) {
	p := newMockProvider(t)
	inv, err := p.UpcomingInvoice(context.Background(), "cus_123")
	if err != nil {
		t.Fatalf("got %v; want the preview", err)
	}
	if inv.Currency == "" || inv.PeriodEnd.IsZero() || len(inv.Lines) == 0 {
		t.Fatalf("got %+v; want a currency, a period end and lines", inv)
	}
}

func TestUpcomingInvoiceNone(t *testing.T) {
	srv := answering(t, http.StatusNotFound,
		`{"error":{"type":"invalid_request_error","code":"invoice_upcoming_none","message":"No upcoming invoices for customer: cus_1"}}`)
	_, err := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL}).UpcomingInvoice(context.Background(), "cus_1")
	if !errors.Is(err, ErrNoUpcomingInvoice) {
		t.Fatalf("got %v; want ErrNoUpcomingInvoice", err)
	}
}

func TestReconciliationLists(t *testing.T) {
	p := newMockProvider(t)
	ctx := context.Background()
	subs, err := p.ListSubscriptions(ctx)
	if err != nil || len(subs) == 0 || !strings.HasPrefix(subs[0].ID, "sub_") || subs[0].Status == "" {
		t.Fatalf("subscriptions: got %+v, %v; want sub_ records with a status", subs, err)
	}
	pays, err := p.ListPayments(ctx)
	if err != nil || len(pays) == 0 || !strings.HasPrefix(pays[0].ID, "pi_") || pays[0].Status == "" {
		t.Fatalf("payments: got %+v, %v; want pi_ records with a status", pays, err)
	}
	refunds, err := p.ListRefunds(ctx)
	if err != nil || len(refunds) == 0 || !strings.HasPrefix(refunds[0].ID, "re_") {
		t.Fatalf("refunds: got %+v, %v; want re_ records", refunds, err)
	}
	disputes, err := p.ListDisputes(ctx)
	if err != nil || len(disputes) == 0 || !strings.HasPrefix(disputes[0].ID, "dp_") || disputes[0].Status == "" ||
		disputes[0].ChargeID == "" {
		t.Fatalf("disputes: got %+v, %v; want dp_ records with a status and a charge", disputes, err)
	}
}

// TestListsFollowPages serves two pages and checks that every record and
// its metadata come back.
func TestListsFollowPages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("status") != "all" {
			t.Errorf("status: got %q; want all", r.URL.Query().Get("status"))
		}
		if r.URL.Query().Get("starting_after") == "" {
			_, _ = w.Write([]byte(`{"object":"list","url":"/v1/subscriptions","has_more":true,"data":[
				{"id":"sub_1","object":"subscription","status":"active","customer":"cus_1","metadata":{"org_id":"org_a","order_id":"ord_1"},"current_period_end":1767225600}]}`))
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","url":"/v1/subscriptions","has_more":false,"data":[
			{"id":"sub_2","object":"subscription","status":"canceled","customer":{"id":"cus_2","object":"customer"},"metadata":{"org_id":"org_b","order_id":"ord_2"},"canceled_at":1764547200}]}`))
	}))
	defer srv.Close()
	subs, err := New(Config{SecretKey: "sk_test_phonefleet", APIBase: srv.URL}).ListSubscriptions(context.Background())
	if err != nil || len(subs) != 2 {
		t.Fatalf("got %+v, %v; want both pages", subs, err)
	}
	if s := subs[0]; s.ID != "sub_1" || s.CustomerID != "cus_1" || s.Metadata[MetaOrderID] != "ord_1" || !s.CurrentPeriodEnd.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("first: got %+v", s)
	}
	if s := subs[1]; s.ID != "sub_2" || s.Status != "canceled" || s.CustomerID != "cus_2" || s.Metadata[MetaOrgID] != "org_b" || s.CanceledAt.IsZero() {
		t.Fatalf("second: got %+v", s)
	}
}

func TestUnavailable(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()

	for _, tc := range []struct {
		name string
		base func(t *testing.T) string
	}{
		{"unreachable", func(*testing.T) string { return dead }},
		{"5xx", func(t *testing.T) string {
			return answering(t, http.StatusInternalServerError, `{"error":{"type":"api_error","message":"boom"}}`).URL
		}},
		{"not a Stripe answer", func(t *testing.T) string {
			return answering(t, http.StatusBadGateway, `<html>bad gateway</html>`).URL
		}},
		{"rate limited", func(t *testing.T) string {
			return answering(t, http.StatusTooManyRequests, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"slow down"}}`).URL
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: tc.base(t), MaxNetworkRetries: -1})
			ctx := context.Background()
			_, err := p.CreateCheckoutSession(ctx, checkoutRequest(ModePayment))
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("checkout: got %v; want ErrUnavailable", err)
			}
			if _, err := p.ListPayments(ctx); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("list: got %v; want ErrUnavailable", err)
			}
		})
	}
	t.Run("with the default retries", func(t *testing.T) {
		_, err := New(Config{SecretKey: "sk_test_phonefleet", APIBase: dead}).CustomerBalance(context.Background(), "cus_1")
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v; want ErrUnavailable", err)
		}
	})
	t.Run("no key", func(t *testing.T) {
		_, err := New(Config{APIBase: testutil.StripeMock(t)}).CreateCheckoutSession(context.Background(), checkoutRequest(ModePayment))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v; want ErrUnavailable", err)
		}
	})
}

func TestRefused(t *testing.T) {
	p := newMockProvider(t)
	// stripe-mock validates against Stripe's API: an unknown interval is refused.
	r := checkoutRequest(ModeSubscription)
	r.Interval = "fortnight"
	_, err := p.CreateCheckoutSession(context.Background(), r)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusBadRequest || errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v; want a 400 RefusedError, not ErrUnavailable", err)
	}
	// A wrong key is refused, not unavailable.
	bad := New(Config{SecretKey: "not_a_key", APIBase: testutil.StripeMock(t)})
	_, err = bad.ListRefunds(context.Background())
	if !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
		t.Fatalf("got %v; want a 401 RefusedError", err)
	}
}

// TestInstancesDoNotShareState checks that two providers keep their own
// base URL and key (stripe-go's package-level backends are never used).
func TestInstancesDoNotShareState(t *testing.T) {
	var hits [2]int
	var mu sync.Mutex
	mk := func(i int, key string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Authorization"); got != "Bearer "+key {
				t.Errorf("server %d: got Authorization %q; want its own key", i, got)
			}
			mu.Lock()
			hits[i]++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"cus_1","object":"customer","balance":0}`))
		}))
	}
	a, b := mk(0, "sk_test_a"), mk(1, "sk_test_b")
	defer a.Close()
	defer b.Close()
	pa := New(Config{SecretKey: "sk_test_a", APIBase: a.URL})
	pb := New(Config{SecretKey: "sk_test_b", APIBase: b.URL})
	for range 3 {
		if _, err := pa.CustomerBalance(context.Background(), "cus_1"); err != nil {
			t.Fatal(err)
		}
		if _, err := pb.CustomerBalance(context.Background(), "cus_1"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != [2]int{3, 3} {
		t.Fatalf("got %v calls; want 3 each", hits)
	}
}

// answering is a server that answers every request with status and body.
func answering(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(body, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSubscriptionOfCharge reads a charge's invoice's subscription: from
// stripe-mock itself (which validates the call; its invoices name no
// subscription, so none), and through a recorded answer of a charge whose
// expanded invoice names one, as Stripe answers for a subscription's
// charge.
func TestSubscriptionOfCharge(t *testing.T) {
	ctx := context.Background()
	mock := testutil.StripeMock(t)
	if sub, err := New(Config{SecretKey: "sk_test_phonefleet", APIBase: mock}).SubscriptionOfCharge(ctx, "ch_plain"); err != nil || sub != "" {
		t.Fatalf("stripe-mock's charge: %q, %v; want no subscription", sub, err)
	}
	base := testutil.StripeRecordedObjects(t, mock, map[string]string{
		"/v1/charges/ch_sub": `{"id":"ch_sub","object":"charge","amount":900,"currency":"eur",
			"invoice":{"id":"in_sub","object":"invoice","subscription":"sub_recorded"}}`,
	})
	p := New(Config{SecretKey: "sk_test_phonefleet", APIBase: base})
	if sub, err := p.SubscriptionOfCharge(ctx, "ch_sub"); err != nil || sub != "sub_recorded" {
		t.Fatalf("a subscription's charge: %q, %v; want sub_recorded", sub, err)
	}
	if _, err := p.SubscriptionOfCharge(ctx, ""); err == nil {
		t.Fatal("no charge id: want an error")
	}
}
