package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// TestConsoleStepUpPurchase buys from the hosted console of a deployment
// requiring reverification (SERVICE_REQUIRE_REVERIFICATION=true, spec
// 4.1, 2.3), with stripe-mock as the payment provider:
//
//   - the admin signed in with an identity check 30 minutes old (the
//     provider's session, backdated); Buy sends that token as
//     x-service-step-up and the API answers 403 reverification_required
//     (retryable, maxAgeMinutes 10, "older than 10 minutes": the header
//     was sent and read); the form says so and offers "Confirm it's you
//     (sign in again)";
//   - the button goes to the provider with max_age=0 and prompt=login,
//     whose page asks to confirm; continuing brings the browser back to
//     #/billing?buy=cloud_phone:subscription&model=…&quantity=2 with the
//     row's choice restored, its Buy focused, and
//     a new token whose auth_time is fresh;
//   - Buy again: the checkout is accepted and the browser goes to exactly
//     the checkoutUrl the service answered.
//
// Each state is saved as a screenshot.
func TestConsoleStepUpPurchase(t *testing.T) {
	idp := identitytest.New(t)
	_, front, answers := startBillingConsole(t, idp, map[string]string{"SERVICE_REQUIRE_REVERIFICATION": "true"})
	idp.RegisterClient(consoleClientID, front+"/")
	idp.SignInAs("user_a", "org_a", domain.RoleAdmin)
	stale := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	idp.SetAuthTime(stale)

	b := testutil.Browser(t)
	wait, cancel := context.WithTimeout(b, 3*time.Minute)
	defer cancel()
	fail := func(step string, err error) {
		t.Helper()
		testutil.Screenshot(t, b, "stepup-failed")
		t.Fatalf("%s: %v\nconsole: %q", step, err, testutil.BrowserConsole(b))
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			fail("read "+sel, err)
		}
		return s
	}
	// Navigations are observed, and every https address (the payment
	// page) blocked, as in TestConsoleBillingHostedPurchase.
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
	navigated := func(prefix string) []string {
		navMu.Lock()
		defer navMu.Unlock()
		var out []string
		for _, u := range navigations {
			if strings.HasPrefix(u, prefix) {
				out = append(out, u)
			}
		}
		return out
	}

	// 1. Signed in on the backdated session; the price list.
	buy := `form.buy-form[data-sku="cloud_phone"][data-billing="subscription"]`
	if err := chromedp.Do(wait,
		chromedp.Navigate(front+"/#/billing"),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)),
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(buy)),
	); err != nil {
		fail("sign in", err)
	}
	// Two phones: the choice the page restores after the identity check.
	if _, err := chromedp.Run(wait, chromedp.SetValue(chromedp.CSS(buy+` input[name=quantity]`), "2")); err != nil {
		fail("choose two phones", err)
	}
	if got := authTimes(t, idp); len(got) != 1 || !got[0].Equal(stale) {
		t.Fatalf("the sign-in's token has auth_time %v; want the backdated %v", got, stale)
	}
	testutil.Screenshot(t, b, "stepup-1-prices")

	// 2. Buy: refused with reverification_required; the form offers the
	// fresh identity check.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(buy+` button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(buy+` button.reverify`)),
	); err != nil {
		fail("buy on a stale identity check", err)
	}
	got := answers()
	if len(got) != 1 || got[0]["status"] != http.StatusForbidden {
		t.Fatalf("the page's checkout requests were answered %v; want one 403", got)
	}
	e, _ := got[0]["error"].(map[string]any)
	if e["code"] != "reverification_required" || e["retryable"] != true || e["maxAgeMinutes"] != float64(10) ||
		!strings.Contains(fmt.Sprint(e["message"]), "older than 10 minutes") {
		t.Errorf("the refusal is %v; want reverification_required, retryable, maxAgeMinutes 10, for a step-up token too old", e)
	}
	say := text(buy + ` .buy-status`)
	for _, want := range []string{"Confirm it's you to buy", "identity check within the last 10 minutes", "reverification_required", "Nothing was charged", "Confirm it's you (sign in again)"} {
		if !strings.Contains(say, want) {
			t.Errorf("the form says %q; want it to contain %q", say, want)
		}
	}
	if n := len(navigated("https://")); n != 0 {
		t.Errorf("the refused purchase navigated to %d https addresses; want none", n)
	}
	testutil.Screenshot(t, b, "stepup-2-reverification-required")
	if err := chromedp.Do(wait,
		chromedp.EmulateViewport(390, 844),
		chromedp.ScrollIntoView(chromedp.CSS(buy+` button.reverify`)),
	); err != nil {
		t.Fatal(err)
	}
	testutil.Screenshot(t, b, "stepup-2-reverification-required-phone")
	if err := chromedp.Do(wait, chromedp.EmulateViewport(testutil.BrowserWidth, testutil.BrowserHeight)); err != nil {
		t.Fatal(err)
	}

	// 3. Confirm it's you: the provider is asked for a fresh check.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(buy+` button.reverify`)),
		chromedp.WaitVisible(chromedp.ID(`reauthenticate`)),
	); err != nil {
		fail("go to the identity provider", err)
	}
	loc, err := chromedp.Run(wait, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(loc, idp.AuthorizationEndpoint()+"?") || !strings.Contains(loc, "max_age=0") || !strings.Contains(loc, "prompt=login") {
		t.Errorf("the confirmation went to %s; want the authorization endpoint with max_age=0 and prompt=login", loc)
	}
	testutil.Screenshot(t, b, "stepup-3-identity-provider")

	// 4. Back at the billing page with the row ready to buy.
	ready := buy + `[data-resumed] .reverified`
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(ready)),
	); err != nil {
		fail("come back from the identity check", err)
	}
	if loc, err := chromedp.Run(wait, chromedp.Location()); err != nil || loc != front+"/#/billing?buy=cloud_phone%3Asubscription&model=pixel-8&region=US&quantity=2" {
		t.Errorf("back from the identity check the address is %q (%v); want the billing page naming the row", loc, err)
	}
	times := authTimes(t, idp)
	if len(times) != 2 || time.Since(times[1]) > time.Minute || !times[1].After(stale) {
		t.Fatalf("the tokens' auth_times are %v; want a second, fresh one", times)
	}
	if say := text(ready); !strings.Contains(say, "press Buy") {
		t.Errorf("the resumed form says %q; want to press Buy", say)
	}
	if q, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(buy+` input[name=quantity]`))); err != nil || q != "2" {
		t.Errorf("the resumed form's quantity is %q (%v); want the 2 chosen before", q, err)
	}
	if focused, err := chromedp.Run(wait, chromedp.Poll[bool](`document.activeElement === document.querySelector(`+jsString(buy+` button[type=submit]`)+`)`)); err != nil || !focused {
		t.Errorf("the resumed row's Buy button is not focused (%v)", err)
	}
	testutil.Screenshot(t, b, "stepup-4-ready")

	// 5. Buy again: accepted, and the browser goes to the payment page.
	if err := chromedp.Do(wait, chromedp.Click(chromedp.CSS(buy+` button[type=submit]`))); err != nil {
		fail("buy after the identity check", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(navigated("https://")) == 0 {
		select {
		case <-wait.Done():
			fail("leave for the payment page", wait.Err())
		case <-tick.C:
		}
	}
	target := navigated("https://")[0]
	got = answers()
	if len(got) != 2 || got[1]["status"] != http.StatusOK {
		t.Fatalf("the page's checkout requests were answered %v; want a 403 then a 200", got)
	}
	checkoutURL, _ := got[1]["checkoutUrl"].(string)
	if k0, k1 := got[0]["idempotencyKey"], got[1]["idempotencyKey"]; k0 == "" || k1 == "" {
		t.Errorf("the checkout requests carried Idempotency-Keys %q, %q; want both", k0, k1)
	}
	if checkoutURL == "" || target != checkoutURL {
		t.Fatalf("the browser was sent to %q; want the answered checkoutUrl %q", target, checkoutURL)
	}
	// No screenshot of the payment page: it is blocked (Chromium's error
	// page has no layout to capture).
	if errs := testutil.BrowserErrors(b); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}

// authTimes returns the auth_time of every token the provider issued,
// oldest first.
func authTimes(t *testing.T, idp *identitytest.IdP) []time.Time {
	t.Helper()
	var out []time.Time
	for _, tok := range idp.Issued() {
		var c struct {
			jwt.RegisteredClaims
			AuthTime *jwt.NumericDate `json:"auth_time"`
		}
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err != nil || c.AuthTime == nil {
			t.Fatalf("an issued token has no auth_time (%v)", err)
		}
		out = append(out, c.AuthTime.UTC())
	}
	return out
}
