package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/testutil"
)

// TestConsoleAppsInstallsOnChosenPhones runs the service with two sim
// phones and a catalog holding Calculator and an app that needs a newer
// Android than the phones run, and drives the Apps page in a real headless
// Chromium: before the phones were read the catalog says so; "Refresh
// inventory" reads both (their system apps appear); the catalog then says
// why neither phone can install the newer app; installing Calculator on
// both phones shows each phone's progress until both are installed, and
// the inventory shows Calculator managed on each. Choosing the newer app
// fails on the phone with os_too_old, shown in the progress. Screenshots:
// the page before any read, after the install, the refusal, and the
// inventory at a phone's width.
func TestConsoleAppsInstallsOnChosenPhones(t *testing.T) {
	env := localEnv(t, testutil.DatabaseURL(t), 2)
	env["SERVICE_APP_CATALOG_FILE"] = appsCatalogFile(t)
	a, base := startApp(t, env)
	api := newAdminAPI(t, a, base)
	waitUntil(t, time.Minute, "two sim phones", func() (bool, error) {
		var list struct {
			Devices []any `json:"devices"`
		}
		api.json("GET", "/v1/app-library/inventory", "", "", 200, &list)
		return len(list.Devices) == 2, nil
	})

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	admDo(t, wait, "open the apps page",
		chromedp.Navigate(base+"/#/apps"),
		chromedp.WaitVisible(chromedp.CSS(`#app-install`)))
	admCheckA11y(t, wait, "apps page, nothing read")
	if n := admEval[int](t, wait, `document.querySelectorAll('table.app-catalog li[data-installable="false"]').length`); n != 6 {
		t.Errorf("before any read: %d (phone, version) pairs marked not installable; want all 6", n)
	}
	if txt := admEval[string](t, wait, `document.querySelector('table.app-catalog li').textContent`); !strings.Contains(txt, "refresh the inventory") {
		t.Errorf("before any read the catalog says %q; want it to ask for a refresh", txt)
	}
	testutil.Screenshot(t, ctx, "apps-not-read")

	admDo(t, wait, "refresh the inventory", chromedp.Click(chromedp.ID("app-refresh")))
	admPoll[bool](t, wait, "both phones read", `document.querySelectorAll('.app-inventory table').length === 2 &&
		document.querySelectorAll('.app-inventory tr[data-package="com.android.settings"]').length === 2`)
	admPoll[bool](t, wait, "the newer app refused on both phones, with why",
		`[...document.querySelectorAll('tr[data-package="com.example.future"] li[data-installable="false"]')].filter((li) => li.textContent.includes('Android too old')).length === 2`)

	// Calculator on both phones, progress shown live.
	admDo(t, wait, "install Calculator on both phones",
		chromedp.SetValue(chromedp.ID("app-version"), "com.example.calculator@8.4"),
		chromedp.Evaluate[chromedp.Void](`(() => { document.getElementById('app-version').dispatchEvent(new Event('change')); [...document.querySelectorAll('#app-install .app-devices input')].forEach((b) => { b.checked = true; }); })()`),
		chromedp.Click(chromedp.CSS(`#app-install button[type=submit]`)))
	admPoll[bool](t, wait, "progress shown", `document.querySelectorAll('.app-install-progress tr[data-device-id]').length === 2`)
	admPoll[bool](t, wait, "both phones installed", `document.querySelectorAll('.app-install-progress tr[data-state="installed"]').length === 2`)
	admPoll[bool](t, wait, "the page's catalog and inventory follow the install",
		`document.querySelectorAll('.app-inventory tr[data-package="com.example.calculator"][data-managed="true"]').length === 2 &&
		[...document.querySelectorAll('tr[data-package="com.example.calculator"] li')].filter((li) => li.textContent.includes('installed 8.4')).length === 2`)
	admCheckA11y(t, wait, "apps page, installed")
	testutil.Screenshot(t, ctx, "apps-installed")

	// The newer app: the phone says why it cannot.
	admDo(t, wait, "install the newer app on the first phone",
		chromedp.SetValue(chromedp.ID("app-version"), "com.example.future@1.0"),
		chromedp.Evaluate[chromedp.Void](`(() => { document.getElementById('app-version').dispatchEvent(new Event('change')); document.querySelector('#app-install .app-devices input').checked = true; })()`),
		chromedp.Click(chromedp.CSS(`#app-install button[type=submit]`)))
	why := admPoll[string](t, wait, "the refusal in the progress",
		`(() => { const r = document.querySelector('.app-install-progress tr[data-state="failed"]'); return r ? r.textContent : ''; })()`)
	if !strings.Contains(why, "os_too_old") || !strings.Contains(why, "API level 99") {
		t.Errorf("the failed phone says %q; want os_too_old naming API level 99", why)
	}
	testutil.Screenshot(t, ctx, "apps-cannot-install")

	// The inventory after a fresh look: Calculator managed on each phone.
	admDo(t, wait, "reopen the apps page",
		chromedp.Navigate(base+"/#/fleet"), chromedp.Navigate(base+"/#/apps"),
		chromedp.WaitVisible(chromedp.CSS(`#app-install`)))
	admPoll[bool](t, wait, "Calculator managed on both phones",
		`document.querySelectorAll('.app-inventory tr[data-package="com.example.calculator"][data-managed="true"]').length === 2`)
	admPhoneScreenshot(t, wait, "apps-inventory-phone")
	var page struct {
		Installations []any `json:"installations"`
	}
	api.json("GET", "/v1/app-store/installations", "", "", 200, &page)
	if len(page.Installations) != 2 {
		t.Errorf("GET /v1/app-store/installations: %d installations; want the 2 the page made", len(page.Installations))
	}
	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}
