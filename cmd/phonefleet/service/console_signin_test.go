package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// consoleClientID is the console's public OAuth client id in the hosted
// sign-in test.
const consoleClientID = "phonefleet-console"

// startHostedConsole runs the service in hosted mode behind a front server
// whose address is the service's public URL: the browser's origin has to
// be SERVICE_PUBLIC_URL (the page's own origin, http/cors.go ownOrigin;
// the token's audience), and the service's own port is only known once it
// listens. The front server forwards everything, streams unbuffered, and
// shows each request to observe (when not nil) first. It returns the
// service and the front URL.
func startHostedConsole(t *testing.T, idp *identitytest.IdP, observe func(*http.Request)) (*App, string) {
	t.Helper()
	var target atomic.Pointer[httputil.ReverseProxy]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if observe != nil {
			observe(r)
		}
		p := target.Load()
		if p == nil {
			http.Error(w, "the service is starting", http.StatusServiceUnavailable)
			return
		}
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close) // after the browser and the service stop (cleanups run last-in first-out)
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's warnings and errors:\n%s", logs.String())
		}
	})
	a, base := startAppLogging(t, map[string]string{
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
	}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // live screens are a stream
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil { // not the browser going away
			t.Logf("front server: %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	target.Store(proxy)
	return a, front.URL
}

// TestConsoleHostedSignIn signs a person in to the hosted console in a
// real headless Chromium with the authorization code flow and PKCE
// against the fake identity provider (a different origin), then checks:
//
//   - before signing in the page shows only "Sign in";
//   - the button goes to the provider's authorization endpoint (its
//     one-click page), which sends the browser back with a code the page
//     exchanges at the token endpoint (CORS, the page's CSP connect-src);
//     the address no longer carries the code;
//   - the fleet page then shows organisation A's phones, with live
//     screens, and none of organisation B's; a POST from the page (taking
//     a lease) is accepted as the page's own origin and made as the person;
//   - the token is in no storage the browser keeps (localStorage,
//     sessionStorage, cookies, IndexedDB, Cache Storage), and the PKCE
//     verifier is gone from sessionStorage;
//   - organisation A's person opening #/devices/<B's device> sees exactly
//     what an unknown device id shows (ids masked);
//   - reloading the page asks to sign in again (the token was in memory
//     only) and no token is issued without the person; signing in again
//     from a device's address comes back to that device;
//   - Cancel at the provider brings the person back, told why, and asked
//     to sign in again.
//
// Each step is saved as a screenshot.
func TestConsoleHostedSignIn(t *testing.T) {
	idp := identitytest.New(t)
	var mu sync.Mutex
	var leaseOrigins []string // the Origin of each lease request the page sends
	a, front := startHostedConsole(t, idp, func(r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/lease") {
			mu.Lock()
			leaseOrigins = append(leaseOrigins, r.Header.Get("Origin"))
			mu.Unlock()
		}
	})
	idp.RegisterClient(consoleClientID, front+"/")
	idp.SignInAs("user_a", "org_a", domain.RoleAdmin)

	ctx := testutil.Context(t)
	orgA, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: "org_a", Backend: "sim", Count: 2, NamePrefix: "alpha"})
	if err != nil || len(orgA) != 2 {
		t.Fatalf("register organisation A's phones: %v (%v)", err, orgA)
	}
	orgB, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: "org_b", Backend: "sim", Count: 1, NamePrefix: "bravo"})
	if err != nil || len(orgB) != 1 {
		t.Fatalf("register organisation B's phone: %v (%v)", err, orgB)
	}
	slices.Sort(orgA)

	b := testutil.Browser(t)
	wait, cancel := context.WithTimeout(b, 3*time.Minute)
	defer cancel()
	fail := func(step string, err error) {
		t.Helper()
		t.Errorf("%s: %v\nconsole: %q", step, err, testutil.BrowserConsole(b))
		testutil.Screenshot(t, b, "signin-failed")
		t.FailNow()
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(wait, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			fail("read "+sel, err)
		}
		return s
	}
	location := func() string {
		t.Helper()
		s, err := chromedp.Run(wait, chromedp.Location())
		if err != nil {
			fail("read the location", err)
		}
		return s
	}

	// 1. Not signed in: the page asks to sign in and shows nothing else.
	if err := chromedp.Do(wait,
		chromedp.Navigate(front+"/#/fleet"),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
	); err != nil {
		fail("open the hosted console", err)
	}
	if got := text(`#main`); !strings.Contains(got, "Sign in") || strings.Contains(got, "alpha") {
		t.Errorf("before signing in the page says %q; want only the sign-in", got)
	}
	testutil.Screenshot(t, b, "signin-1-signed-out")
	if err := chromedp.Do(wait, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	testutil.Screenshot(t, b, "signin-1-signed-out-phone")
	if err := chromedp.Do(wait, chromedp.EmulateViewport(testutil.BrowserWidth, testutil.BrowserHeight)); err != nil {
		t.Fatal(err)
	}

	// Cancel at the provider: back at the console, told why, asked again,
	// with nothing of the attempt left in the address or in storage.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`deny`)),
		chromedp.Click(chromedp.ID(`deny`)),
		chromedp.WaitVisible(chromedp.CSS(`#toasts .toast.error`)),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
	); err != nil {
		fail("cancel at the identity provider", err)
	}
	if got := text(`#toasts .toast.error`); !strings.Contains(got, "did not sign you in") || !strings.Contains(got, "declined") {
		t.Errorf("after Cancel the page says %q; want that the provider did not sign the person in", got)
	}
	if got := location(); got != front+"/#/fleet" {
		t.Errorf("after Cancel the address is %s; want %s", got, front+"/#/fleet")
	}
	if n, err := chromedp.Run(wait, chromedp.Evaluate[int](`sessionStorage.length`)); err != nil || n != 0 {
		t.Errorf("after Cancel sessionStorage holds %d items (%v); want none", n, err)
	}
	testutil.Screenshot(t, b, "signin-1-cancelled")

	// An answer naming another issuer (RFC 9207 mix-up): refused before its
	// code goes anywhere; no token is asked for or issued.
	attacker := "https://attacker.example"
	idp.ImpersonatedIssuer.Store(&attacker)
	tokenHits := idp.TokenHits.Load()
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)),
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(`#toasts .toast.error`)),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
	); err != nil {
		fail("an answer naming another issuer", err)
	}
	if got := text(`#toasts .toast.error`); !strings.Contains(got, "does not come from "+idp.Issuer) {
		t.Errorf("after a mix-up the page says %q; want that the answer does not come from %s", got, idp.Issuer)
	}
	if got := idp.TokenHits.Load(); got != tokenHits || len(idp.Issued()) != 0 {
		t.Errorf("after a mix-up the token endpoint was called %d times and %d tokens issued; want none", got-tokenHits, len(idp.Issued()))
	}
	testutil.Screenshot(t, b, "signin-1-mix-up-refused")
	idp.ImpersonatedIssuer.Store(nil)

	// 2. The button goes to the identity provider's one-click page.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)),
	); err != nil {
		fail("go to the identity provider", err)
	}
	authz, err := url.Parse(location())
	if err != nil {
		t.Fatal(err)
	}
	q := authz.Query()
	if got := authz.Scheme + "://" + authz.Host + authz.Path; got != idp.AuthorizationEndpoint() {
		t.Errorf("the button went to %s; want the provider's authorization endpoint %s", got, idp.AuthorizationEndpoint())
	}
	for k, want := range map[string]string{"response_type": "code", "client_id": consoleClientID, "redirect_uri": front + "/",
		"code_challenge_method": "S256", "resource": front + "/mcp"} {
		if q.Get(k) != want {
			t.Errorf("authorization request %s = %q; want %q", k, q.Get(k), want)
		}
	}
	if q.Get("state") == "" || len(q.Get("code_challenge")) != 43 {
		t.Errorf("authorization request state %q, code_challenge %q; want both", q.Get("state"), q.Get("code_challenge"))
	}
	testutil.Screenshot(t, b, "signin-2-identity-provider")

	// 3. Continue: back at the console, signed in, on the page the person
	// asked for, organisation A's fleet with live screens.
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(`ul.fleet`)),
	); err != nil {
		fail("come back signed in", err)
	}
	if got := location(); got != front+"/#/fleet" {
		t.Errorf("after signing in the address is %s; want %s (the code and state removed)", got, front+"/#/fleet")
	}
	shown, err := chromedp.Run(wait, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('ul.fleet li.device-card')].map((li) => li.dataset.deviceId).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shown, orgA) {
		t.Errorf("the fleet page shows %v; want organisation A's %v (and never B's %v)", shown, orgA, orgB)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`(() => {
		const imgs = [...document.querySelectorAll('ul.fleet img.screen')];
		return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0);
	})()`, chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		fail("live screens with the person's token", err)
	}
	issued := idp.Issued()
	if len(issued) != 1 {
		t.Fatalf("the provider issued %d tokens; want 1", len(issued))
	}
	token := issued[0]
	testutil.Screenshot(t, b, "signin-3-fleet")

	// A POST from the page is the page's own origin (hosted: the public
	// URL) and is made as the person: lease A's first phone through the
	// page's own API client and see the card say who holds it.
	leased, err := chromedp.Run(wait, chromedp.Evaluate[map[string]any](fmt.Sprintf(`import('/console/app.js').then((m) =>
		m.api.post('/v1/devices/%s/lease', {}).then((r) => ({ ok: true, leaseId: r.leaseId }),
			(e) => ({ ok: false, status: e.status, code: e.code, message: e.message })))`, orgA[0]), chromedp.EvalAwaitPromise))
	if err != nil {
		fail("lease from the page", err)
	}
	if leased["ok"] != true {
		t.Fatalf("the page's POST was refused: %v", leased)
	}
	mu.Lock()
	if !slices.Equal(leaseOrigins, []string{front}) {
		t.Errorf("the page's lease request carried Origin %q; want [%s] (so the service checked it as its own)", leaseOrigins, front)
	}
	mu.Unlock()
	holderSel := fmt.Sprintf(`li.device-card[data-device-id=%q] .holder`, orgA[0])
	if _, err := chromedp.Run(wait, chromedp.Evaluate[chromedp.Void](`import('/console/app.js').then((m) => m.reload())`, chromedp.EvalAwaitPromise)); err != nil {
		fail("re-render the fleet", err)
	}
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`(document.querySelector(`+jsString(holderSel)+`) || {}).textContent === 'leased by user_a'`)); err != nil {
		t.Errorf("the leased card says %q; want %q", text(holderSel), "leased by user_a")
	}

	// 4. The token is in memory only.
	kept, err := chromedp.Run(wait, chromedp.Evaluate[browserStorage](`(async () => {
		const dump = (s) => Object.fromEntries(Array.from({ length: s.length }, (_, i) => [s.key(i), s.getItem(s.key(i))]));
		return {
			local: dump(localStorage), session: dump(sessionStorage), cookie: document.cookie,
			indexedDB: (await indexedDB.databases()).map((d) => d.name),
			caches: await caches.keys(),
		};
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	cookies, err := chromedp.Call(wait, network.GetCookies, network.GetCookiesParams{URLs: []string{front + "/", idp.Issuer + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	signature := token[strings.LastIndex(token, ".")+1:]
	stored := fmt.Sprintf("localStorage %v sessionStorage %v document.cookie %q IndexedDB %v caches %v cookies",
		kept.Local, kept.Session, kept.Cookie, kept.IndexedDB, kept.Caches)
	for _, c := range cookies.Cookies {
		stored += " " + c.Name + "=" + c.Value
	}
	if strings.Contains(stored, token) || strings.Contains(stored, signature) {
		t.Errorf("the token is kept by the browser: %s", stored)
	}
	if len(kept.Local)+len(kept.Session)+len(kept.IndexedDB)+len(kept.Caches)+len(cookies.Cookies) != 0 || kept.Cookie != "" {
		t.Errorf("after signing in the browser keeps %s; want nothing (the PKCE verifier removed, the token in memory)", stored)
	}

	// 5. Tenancy: B's device id answers as an unknown one. The main
	// element is emptied first, so the wait is for the new route's page.
	render := func(hash string) string {
		t.Helper()
		if err := chromedp.Do(wait,
			chromedp.Evaluate[chromedp.Void](`document.getElementById('main').replaceChildren(); location.hash = `+jsString(hash)),
			chromedp.Poll[chromedp.Void](`(() => { const m = document.getElementById('main');
				return m.childElementCount > 0 && !m.querySelector('.loading'); })()`),
		); err != nil {
			fail("open "+hash, err)
		}
		return text(`#main`)
	}
	own := render("#/devices/" + orgA[1])
	if strings.Contains(own, "Nothing in the console is at") {
		t.Fatalf("the console has no device page (#/devices/{id}) yet: %q", own)
	}
	testutil.Screenshot(t, b, "signin-4-own-device")
	unknown := neverExisting(orgB[0])
	other := render("#/devices/" + orgB[0])
	testutil.Screenshot(t, b, "signin-5-other-orgs-device")
	missing := render("#/devices/" + unknown)
	testutil.Screenshot(t, b, "signin-6-unknown-device")
	mask := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, orgB[0], "<id>"), unknown, "<id>")
	}
	if mask(other) != mask(missing) {
		t.Errorf("organisation B's device renders\n%q\nan unknown id renders\n%q\nwant the same (ids masked)", mask(other), mask(missing))
	}
	if mask(own) == mask(other) {
		t.Errorf("organisation A's own device renders like B's: %q", own)
	}
	if strings.Contains(other, "bravo") {
		t.Errorf("organisation B's device page names it: %q", other)
	}
	if !strings.Contains(strings.ToLower(other), "not found") && !strings.Contains(other, "not_found") && !strings.Contains(other, "device_unavailable") {
		t.Errorf("organisation B's device renders %q; want a not-found answer", other)
	}

	// 6. A reload forgets the token: sign in again.
	if err := chromedp.Do(wait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
	); err != nil {
		fail("reload", err)
	}
	if got := text(`#main`); strings.Contains(got, "alpha") || strings.Contains(got, "Fleet") {
		t.Errorf("after a reload the page shows %q; want only the sign-in", got)
	}
	if n := len(idp.Issued()); n != 1 {
		t.Errorf("the provider issued %d tokens; want still 1 (the reload asks, it does not sign in by itself)", n)
	}
	testutil.Screenshot(t, b, "signin-7-after-reload")

	// 7. Signing in again from a device's address comes back to it.
	if err := chromedp.Do(wait,
		chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString("#/devices/"+orgA[1])),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)),
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(`#main .device-layout`)),
	); err != nil {
		fail("sign in again from a device's address", err)
	}
	if got := text(`#main h1`); got != "alpha-2" {
		t.Errorf("after signing in again the page shows %q; want the device alpha-2", got)
	}
	if got := location(); got != front+"/#/devices/"+orgA[1] {
		t.Errorf("after signing in again the address is %s; want the device's %s", got, front+"/#/devices/"+orgA[1])
	}
	if n := len(idp.Issued()); n != 2 {
		t.Errorf("the provider issued %d tokens; want 2 (one per sign-in)", n)
	}
	testutil.Screenshot(t, b, "signin-8-again-at-device")

	if errs := testutil.BrowserErrors(b); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}

// browserStorage is what a browser keeps for the page's origin.
type browserStorage struct {
	Local     map[string]string `json:"local"`
	Session   map[string]string `json:"session"`
	Cookie    string            `json:"cookie"`
	IndexedDB []string          `json:"indexedDB"`
	Caches    []string          `json:"caches"`
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
