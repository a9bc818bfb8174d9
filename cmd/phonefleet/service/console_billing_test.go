package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// billingWebhookSecret signs the provider events the hosted billing page
// test delivers.
const billingWebhookSecret = "whsec_console_billing"

// TestConsoleBillingLocal opens #/billing on a local deployment: the page
// shows the organisation's status, the price list (without buy forms) and
// the month's usage, says purchases are served by hosted deployments
// only, shows no invoice or portal (hosted only), and throws nothing.
func TestConsoleBillingLocal(t *testing.T) {
	dir := t.TempDir()
	_, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1",
	})
	b := testutil.Browser(t)
	wait, cancel := context.WithTimeout(b, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(wait,
		chromedp.Navigate(base+"/#/billing"),
		chromedp.WaitVisible(chromedp.CSS(`table.price-list tbody tr`)),
		chromedp.WaitVisible(chromedp.CSS(`.usage-report .usage-total`)),
	); err != nil {
		testutil.Screenshot(t, b, "billing-local-failed")
		t.Fatalf("open #/billing: %v\nconsole: %q", err, testutil.BrowserConsole(b))
	}
	text, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(`#main`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Billing", "Price list", "Emulator", "hosted deployments only", "Usage", "of device time", "No phone bought yet."} {
		if !strings.Contains(text, want) {
			t.Errorf("the local billing page does not say %q:\n%s", want, text)
		}
	}
	facts, err := chromedp.Run(wait, chromedp.Evaluate[map[string]int](`({
		forms: document.querySelectorAll('form.buy-form').length,
		invoice: document.querySelectorAll('#billing-invoice, button.portal').length,
		rows: document.querySelectorAll('table.price-list tbody tr').length,
		rowHeads: document.querySelectorAll('table.price-list tbody th[scope=row]').length,
		colHeads: document.querySelectorAll('table.price-list thead th[scope=col]').length,
		current: document.querySelectorAll('nav a[href="#/billing"][aria-current=page]').length,
		periods: document.querySelectorAll('#usage-period option').length,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if facts["forms"] != 0 || facts["invoice"] != 0 {
		t.Errorf("the local page shows %d buy forms and %d invoice/portal elements; want none (hosted only)", facts["forms"], facts["invoice"])
	}
	if facts["rows"] == 0 || facts["rowHeads"] != facts["rows"] || facts["colHeads"] != 4 || facts["current"] != 1 || facts["periods"] != 6 {
		t.Errorf("the page's structure is %v; want price rows each with a row header, 4 column headers, the nav link current, 6 periods", facts)
	}
	// Another period is read on demand.
	if err := chromedp.Do(wait,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('usage-period');
			document.querySelector('.usage-report').replaceChildren(); s.selectedIndex = 1; s.dispatchEvent(new Event('change')); })()`),
		chromedp.WaitVisible(chromedp.CSS(`.usage-report .usage-total`)),
	); err != nil {
		t.Fatalf("pick last month's usage: %v", err)
	}
	testutil.Screenshot(t, b, "billing-local")
	if err := chromedp.Do(wait, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	testutil.Screenshot(t, b, "billing-local-phone")
	if errs := testutil.BrowserErrors(b); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}

// startBillingConsole runs the hosted service with stripe-mock as its
// payment provider behind a front server whose address is the public URL
// (as startHostedConsole does), with the e2e catalog (an emulator with one
// unit). The front server records the answers of POST
// /v1/checkout-sessions, so the test knows what the service told the page.
// extraEnv adds to (or overrides) the service's environment.
func startBillingConsole(t *testing.T, idp *identitytest.IdP, extraEnv ...map[string]string) (*App, string, func() []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var answers []map[string]any
	var target atomic.Pointer[httputil.ReverseProxy]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := target.Load()
		if p == nil {
			http.Error(w, "the service is starting", http.StatusServiceUnavailable)
			return
		}
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	catalogFile := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(catalogFile, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's warnings and errors:\n%s", logs.String())
		}
	})
	env := map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               front.URL,
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_CONSOLE_CLIENT_ID":        consoleClientID,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
		"SERVICE_STRIPE_SECRET_KEY":        "sk_test_consolebilling",
		"SERVICE_STRIPE_API_BASE":          testutil.StripeMock(t),
		"SERVICE_STRIPE_WEBHOOK_SECRET":    billingWebhookSecret,
		"SERVICE_CATALOG_FILE":             catalogFile,
	}
	for _, extra := range extraEnv {
		maps.Copy(env, extra)
	}
	a, base := startAppLogging(t, env, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || resp.Request.URL.Path != "/v1/checkout-sessions" {
			return nil
		}
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		body["status"] = resp.StatusCode
		body["idempotencyKey"] = resp.Request.Header.Get("Idempotency-Key")
		mu.Lock()
		answers = append(answers, body)
		mu.Unlock()
		return nil
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil {
			t.Logf("front server: %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	target.Store(proxy)
	return a, front.URL, func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), answers...)
	}
}

// TestConsoleBillingHostedPurchase buys an emulator subscription from the
// hosted console, signed in as an admin, with stripe-mock as the payment
// provider:
//
//   - the price list's emulator row has a buy form; submitting it POSTs
//     /v1/checkout-sessions with an Idempotency-Key and sends the browser
//     to exactly the checkoutUrl the service answered (the browser's
//     navigation is observed and blocked, so nothing leaves the machine);
//   - the provider's signed checkout.session.completed for that order is
//     delivered to POST /webhooks/stripe;
//   - the address the payment page returns to,
//     {base_url}/#/billing?checkout=complete&orderId=…, loaded afresh
//     (the token was in memory), asks to sign in and comes back to it; the
//     page says the payment was received and lists the order's phone
//     provisioned with a link to its device;
//   - Cancel, confirmed in the dialog, cancels it (the page and the API
//     agree), and the upcoming invoice section is shown (hosted).
//
// Each state is saved as a screenshot.
func TestConsoleBillingHostedPurchase(t *testing.T) {
	idp := identitytest.New(t)
	a, front, answers := startBillingConsole(t, idp)
	idp.RegisterClient(consoleClientID, front+"/")
	idp.SignInAs("user_a", "org_a", domain.RoleAdmin)

	b := testutil.Browser(t)
	wait, cancel := context.WithTimeout(b, 3*time.Minute)
	defer cancel()
	fail := func(step string, err error) {
		t.Helper()
		testutil.Screenshot(t, b, "billing-hosted-failed")
		t.Fatalf("%s: %v\nconsole: %q", step, err, testutil.BrowserConsole(b))
	}
	// Where the page sends the browser: observed, and every https address
	// blocked (the service and the identity provider are plain http on
	// loopback; the payment page is the provider's https one).
	var navMu sync.Mutex
	var navigations []string
	if err := chromedp.Listen(b, func(ev any) {
		if e, ok := ev.(*page.EventFrameRequestedNavigation); ok {
			navMu.Lock()
			navigations = append(navigations, e.URL)
			navMu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(wait, network.SetBlockedURLs, network.SetBlockedURLsParams{
		URLPatterns: []*network.BlockPattern{{URLPattern: "https://*/*", Block: true}}}); err != nil {
		t.Fatal(err)
	}
	signIn := func(thenVisible string) {
		t.Helper()
		if err := chromedp.Do(wait,
			chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
			chromedp.Click(chromedp.CSS(`#main .signin button`)),
			chromedp.WaitVisible(chromedp.ID(`allow`)),
			chromedp.Click(chromedp.ID(`allow`)),
			chromedp.WaitVisible(chromedp.CSS(thenVisible)),
		); err != nil {
			fail("sign in", err)
		}
	}

	// 1. The price list with buy forms; the upcoming invoice (nothing yet).
	buy := `form.buy-form[data-sku="emulator"][data-billing="subscription"]`
	if err := chromedp.Do(wait, chromedp.Navigate(front+"/#/billing")); err != nil {
		fail("open the console", err)
	}
	signIn(buy)
	if err := chromedp.Do(wait, chromedp.WaitVisible(chromedp.CSS(`#billing-invoice`))); err != nil {
		fail("the upcoming invoice section", err)
	}
	text, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(`#main`)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "hosted deployments only") || !strings.Contains(text, "Open billing portal") || !strings.Contains(text, "Nothing is upcoming.") {
		t.Errorf("the hosted billing page says:\n%s\nwant purchases offered, the portal button and an empty upcoming invoice", text)
	}
	testutil.Screenshot(t, b, "billing-hosted-1-prices")

	// 2. Buy: the browser goes to the checkoutUrl the service answered.
	if err := chromedp.Do(wait, chromedp.Click(chromedp.CSS(buy+` button[type=submit]`))); err != nil {
		fail("buy", err)
	}
	sent := func() string {
		navMu.Lock()
		defer navMu.Unlock()
		for _, u := range navigations {
			if strings.HasPrefix(u, "https://") {
				return u
			}
		}
		return ""
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for sent() == "" {
		select {
		case <-wait.Done():
			fail("leave for the payment page", wait.Err())
		case <-tick.C:
		}
	}
	target := sent()
	// The blocked page replaces the console: wait until it is shown.
	for {
		loc, err := chromedp.Run(wait, chromedp.Location())
		if err == nil && !strings.HasPrefix(loc, front) {
			break
		}
		select {
		case <-wait.Done():
			fail("show the blocked payment page", wait.Err())
		case <-tick.C:
		}
	}
	got := answers()
	if len(got) != 1 || got[0]["status"] != http.StatusOK {
		t.Fatalf("the page's checkout requests were answered %v; want one 200", got)
	}
	order, _ := got[0]["orderId"].(string)
	checkoutURL, _ := got[0]["checkoutUrl"].(string)
	if order == "" || checkoutURL == "" || target != checkoutURL {
		t.Fatalf("the browser was sent to %q; want the answered checkoutUrl %q (order %q)", target, checkoutURL, order)
	}
	if k, _ := got[0]["idempotencyKey"].(string); len(k) != 36 {
		t.Errorf("the checkout request carried Idempotency-Key %q; want a UUID", k)
	}
	// No screenshot here: the blocked payment page is Chromium's error
	// page, which a full-page screenshot cannot take (it has no layout).

	// 3. The provider confirms the payment.
	session, err := json.Marshal(map[string]any{"id": "cs_" + order, "object": "checkout.session", "mode": "subscription",
		"status": "complete", "payment_status": "paid", "subscription": "sub_" + order, "client_reference_id": order,
		"metadata": map[string]any{payments.MetaOrgID: "org_a", payments.MetaOrderID: order}})
	if err != nil {
		t.Fatal(err)
	}
	ev := signed(t, payments.Event{ID: "evt_paid_" + order, Type: payments.EventCheckoutCompleted, Created: time.Now(), Object: session},
		billingWebhookSecret)
	req, err := http.NewRequest(http.MethodPost, front+"/webhooks/stripe", bytes.NewReader(ev.Payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", ev.Signature)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /webhooks/stripe: %d %s", resp.StatusCode, raw)
	}

	// 4. Back from the payment page: a fresh load of the return address,
	// signed in again, on that address; the phone is provisioned.
	back := front + "/#/billing?checkout=complete&orderId=" + url.QueryEscape(order)
	row := fmt.Sprintf(`tr[data-order-id=%q]`, order)
	if err := chromedp.Do(wait, chromedp.Navigate(back)); err != nil {
		fail("come back from the payment page", err)
	}
	signIn(row + `[data-state="provisioned"] a.device-link`)
	if loc, err := chromedp.Run(wait, chromedp.Location()); err != nil || loc != back {
		t.Errorf("after signing in the address is %q (%v); want the return address %q", loc, err, back)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`!!document.querySelector('.checkout-return .banner-progress a')`)); err != nil {
		fail("the banner names the provisioned device", err)
	}
	banner, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(`.checkout-return`)))
	if err != nil {
		t.Fatal(err)
	}
	device, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(row+` a.device-link`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(banner, "Payment received") || !strings.Contains(banner, order) || !strings.Contains(banner, "Provisioned: "+device) {
		t.Errorf("the banner says %q; want the payment received for %s and the device %s", banner, order, device)
	}
	ctx := testutil.Context(t)
	admin := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Instance: idp.Issuer}
	listed, err := a.Application().Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: admin})
	if err != nil || len(listed.Fulfilments) != 1 || listed.Fulfilments[0].DeviceID != device || listed.Fulfilments[0].State != "provisioned" {
		t.Fatalf("the API lists %+v (%v); want the one phone provisioned on %s as the page shows", listed.Fulfilments, err, device)
	}
	href, err := chromedp.Run(wait, chromedp.Evaluate[string](`document.querySelector(`+jsString(row+` a.device-link`)+`).getAttribute('href')`))
	if err != nil || href != "#/devices/"+device {
		t.Errorf("the device link is %q (%v); want #/devices/%s", href, err, device)
	}
	testutil.Screenshot(t, b, "billing-hosted-3-provisioned")

	// 5. Cancel it from the page, confirmed in the dialog.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(row+` button[data-action="cancel"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog button[value="confirm"]`)),
	); err != nil {
		fail("ask to cancel", err)
	}
	testutil.Screenshot(t, b, "billing-hosted-4-confirm-cancel")
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value="confirm"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-state="cancelled"]`)),
	); err != nil {
		fail("cancel", err)
	}
	listed, err = a.Application().Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: admin})
	if err != nil || len(listed.Fulfilments) != 1 || listed.Fulfilments[0].State != "cancelled" ||
		listed.Fulfilments[0].CancelledReason != domain.EndCustomerCancel {
		t.Errorf("after Cancel the API lists %+v (%v); want the phone cancelled by the customer", listed.Fulfilments, err)
	}
	if n, err := chromedp.Run(wait, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(row+` button[data-action]`)+`).length`)); err != nil || n != 0 {
		t.Errorf("the cancelled phone still offers %d actions (%v); want none", n, err)
	}
	testutil.Screenshot(t, b, "billing-hosted-5-cancelled")
	if err := chromedp.Do(wait, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	testutil.Screenshot(t, b, "billing-hosted-5-cancelled-phone")
	if errs := testutil.BrowserErrors(b); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}
