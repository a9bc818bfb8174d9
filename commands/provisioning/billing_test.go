package provisioning_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// closedURL is the address of a port nothing listens on: a payment
// provider that does not answer.
func billingClosedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// billingRequests passes every request on to the real stripe-mock and
// keeps the form bodies it sent, so a test can see what was asked of the
// provider.
type billingRequests struct {
	mu    sync.Mutex
	forms map[string][]url.Values // by path
}

func (p *billingRequests) sent(path string) []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forms[path]
}

func billingWatchStripeMock(t *testing.T) (string, *billingRequests) {
	t.Helper()
	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := &billingRequests{forms: map[string][]url.Values{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		form, _ := url.ParseQuery(string(body))
		seen.mu.Lock()
		seen.forms[r.URL.Path] = append(seen.forms[r.URL.Path], form)
		seen.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, seen
}

// billingEnv is the provisioning capability over the package's database,
// with organisation withCustomer's billing account holding a customer at
// the provider and organisation noCustomer having none.
type billingEnv struct {
	store                    *eventstore.Store
	withCustomer, noCustomer string
}

func newBillingEnv(t *testing.T) billingEnv {
	t.Helper()
	store := eventstore.New(testutil.Pool(t), eventstore.WithUpcaster(domain.Events))
	e := billingEnv{store: store, withCustomer: domain.NewID(domain.PrefixOrganisation), noCustomer: domain.NewID(domain.PrefixOrganisation)}
	nes, err := eventstore.Encode(domain.Events, e.withCustomer,
		domain.Event(domain.BillingCustomerRecorded{OrgID: e.withCustomer, CustomerID: "cus_billing_test"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(testutil.Context(t), domain.AccountStream(e.withCustomer), eventstore.NoStream, nes...); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e billingEnv) provisioning(provider payments.Provider) *provisioning.Provisioning {
	return provisioning.New(provisioning.Config{Store: e.store, Payments: provider,
		PublicURL: "https://fleet.example/"})
}

func billingAdmin(org string) domain.Auth {
	return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_admin", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
}

func billingMember(org string) domain.Auth {
	return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "user_member", Role: domain.RoleMember,
		Scopes: []domain.Scope{domain.ScopeDevicesRead}}
}

// wantCode fails unless err is a *domain.Error of code (and, when
// retryable is not nil, that retryability).
func billingWantCode(t *testing.T, err error, code domain.Code, retryable *bool) *domain.Error {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != code {
		t.Fatalf("got %v; want %s", err, code)
	}
	if retryable != nil && (de.Retryable == nil || *de.Retryable != *retryable) {
		t.Fatalf("got retryable %v; want %v (%v)", de.Retryable, *retryable, err)
	}
	return de
}

var billingYes, billingNo = new(bool), new(bool)

func init() { *billingYes = true }

func TestBillingAgainstStripeMock(t *testing.T) {
	e := newBillingEnv(t)
	base, seen := billingWatchStripeMock(t)
	p := e.provisioning(payments.New(payments.Config{SecretKey: "sk_test_billing", APIBase: base, MaxNetworkRetries: -1}))
	ctx := testutil.Context(t)

	// Either role reads the next invoice: stripe-mock's preview (1000 usd,
	// one line).
	for _, who := range []domain.Auth{billingAdmin(e.withCustomer), billingMember(e.withCustomer)} {
		inv, err := (provisioning.GetUpcomingInvoiceHandler{Provisioning: p}).Handle(ctx, provisioning.GetUpcomingInvoice{Auth: who})
		if err != nil {
			t.Fatalf("%s: %v", who.Role, err)
		}
		if inv.AmountDue != 1000 || inv.Currency != "usd" || len(inv.Lines) != 1 || inv.NextInvoiceAt == nil || inv.Lines[0].Amount != 1000 {
			t.Errorf("%s: got %+v; want stripe-mock's preview: 1000 usd due, one line, a date", who.Role, inv)
		}
	}
	// The preview was asked for the organisation's own customer.
	if len(seen.sent("/v1/invoices/upcoming")) != 2 {
		t.Errorf("got %d upcoming-invoice requests; want 2", len(seen.sent("/v1/invoices/upcoming")))
	}

	// The admin opens the portal for the customer, coming back to
	// the console's billing page, {base_url}/#/billing.
	ps, err := (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: billingAdmin(e.withCustomer)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ps.URL, "https://") {
		t.Errorf("got portal url %q; want the provider's https address", ps.URL)
	}
	forms := seen.sent("/v1/billing_portal/sessions")
	if len(forms) != 1 || forms[0].Get("customer") != "cus_billing_test" || forms[0].Get("return_url") != "https://fleet.example/#/billing" {
		t.Errorf("got portal requests %v; want one for cus_billing_test returning to https://fleet.example/#/billing", forms)
	}

	// A member may not open it.
	_, err = (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: billingMember(e.withCustomer)})
	billingWantCode(t, err, domain.CodePermissionDenied, nil)

	// An organisation with no customer: an empty invoice, and no portal.
	inv, err := (provisioning.GetUpcomingInvoiceHandler{Provisioning: p}).Handle(ctx, provisioning.GetUpcomingInvoice{Auth: billingMember(e.noCustomer)})
	if err != nil {
		t.Fatal(err)
	}
	if inv.AmountDue != 0 || inv.NextInvoiceAt != nil || inv.Lines == nil || len(inv.Lines) != 0 || inv.Currency != "usd" {
		t.Errorf("got %+v; want the empty answer in the price list's currency", inv)
	}
	_, err = (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: billingAdmin(e.noCustomer)})
	de := billingWantCode(t, err, domain.CodeWrongState, billingNo)
	if de.Extra["state"] != provisioning.NoBillingAccountState {
		t.Errorf("got state %v; want %s", de.Extra["state"], provisioning.NoBillingAccountState)
	}
	if n := len(seen.sent("/v1/billing_portal/sessions")); n != 1 {
		t.Errorf("got %d portal requests; want none beyond the admin's first", n-1)
	}
}

func TestBillingRefusesKeysAndApps(t *testing.T) {
	e := newBillingEnv(t)
	p := e.provisioning(payments.New(payments.Config{SecretKey: "sk_test_billing", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1}))
	ctx := testutil.Context(t)
	key := domain.Auth{OrgID: e.withCustomer, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	app := domain.Auth{OrgID: e.withCustomer, Kind: domain.PrincipalApp, UserID: "user_admin", ClientID: "client_1", Role: domain.RoleAdmin,
		Scopes: domain.AllScopes}
	for _, who := range []domain.Auth{key, app} {
		_, err := (provisioning.GetUpcomingInvoiceHandler{Provisioning: p}).Handle(ctx, provisioning.GetUpcomingInvoice{Auth: who})
		billingWantCode(t, err, domain.CodePermissionDenied, nil)
		_, err = (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: who})
		de := billingWantCode(t, err, domain.CodePermissionDenied, nil)
		if who.IsApp() && de.Extra["where"] != "the console's billing page" {
			t.Errorf("app refusal names where %v; want the console's billing page", de.Extra["where"])
		}
	}
}

func TestBillingProviderMissingDownOrRefusing(t *testing.T) {
	e := newBillingEnv(t)
	ctx := testutil.Context(t)
	for _, tc := range []struct {
		name      string
		provider  payments.Provider
		retryable *bool
	}{
		{"no provider configured", nil, billingNo},
		{"provider does not answer", payments.New(payments.Config{SecretKey: "sk_test_down", APIBase: billingClosedURL(t), MaxNetworkRetries: -1}), billingYes},
		// stripe-mock refuses (401) a key that is not a test key, as the
		// provider refuses what it is not set up for.
		{"provider refuses", payments.New(payments.Config{SecretKey: "sk_live_refused", APIBase: testutil.StripeMock(t), MaxNetworkRetries: -1}), billingNo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.provisioning(tc.provider)
			_, err := (provisioning.GetUpcomingInvoiceHandler{Provisioning: p}).Handle(ctx, provisioning.GetUpcomingInvoice{Auth: billingAdmin(e.withCustomer)})
			billingWantCode(t, err, domain.CodeCheckoutUnavailable, tc.retryable)
			_, err = (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: billingAdmin(e.withCustomer)})
			billingWantCode(t, err, domain.CodeCheckoutUnavailable, tc.retryable)
		})
	}
}

// TestBillingStoreUnreadable: when the organisation's billing account
// cannot be read, both billing routes answer 503 admission_unavailable
// (spec 7.2: the provisioning store cannot be read; retryable), not an
// internal error.
func TestBillingStoreUnreadable(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	p := provisioning.New(provisioning.Config{Store: store,
		Payments: payments.New(payments.Config{SecretKey: "sk_test_billing", APIBase: billingClosedURL(t), MaxNetworkRetries: -1})})
	pool.Close() // every read fails
	admin := domain.Auth{OrgID: domain.NewID(domain.PrefixOrganisation), Kind: domain.PrincipalConsole, UserID: "user_admin",
		Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	ctx := testutil.Context(t)
	_, upcoming := (provisioning.GetUpcomingInvoiceHandler{Provisioning: p}).Handle(ctx, provisioning.GetUpcomingInvoice{Auth: admin})
	_, portal := (provisioning.OpenBillingPortalHandler{Provisioning: p}).Handle(ctx, provisioning.OpenBillingPortal{Auth: admin})
	for name, err := range map[string]error{"upcoming": upcoming, "portal": portal} {
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != domain.CodeAdmissionUnavailable || de.Retryable == nil || !*de.Retryable {
			t.Errorf("%s: got %v; want admission_unavailable, retryable", name, err)
		}
	}
}
