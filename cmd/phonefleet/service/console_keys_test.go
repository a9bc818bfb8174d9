package service

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/testutil"
)

// consoleKey is what the tests read of an API key from the API.
type consoleKey struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Scopes      []string  `json:"scopes"`
	DeviceIDs   []string  `json:"deviceIds"`
	State       string    `json:"state"`
	TokenPrefix string    `json:"tokenPrefix"`
	ExpiresAt   time.Time `json:"expiresAt"`
	RotatedAt   *string   `json:"rotatedAt"`
	NarrowedAt  *string   `json:"narrowedAt"`
	RenewedAt   *string   `json:"renewedAt"`
}

var tokenRE = regexp.MustCompile(`^pbk_[0-9a-f]{32}_[0-9a-z]{33}$`)

// TestConsoleKeysShowTheTokenOnce runs the service in local mode with two
// sim phones and drives the API keys page in a real headless Chromium:
// minting a key (a name, two scopes, one of the two phones) shows its
// token once, in a dialog with a copy button; the token is the key's (the
// API answers it as the key with what the form chose); once the dialog is
// closed the token's secret is nowhere in the page (markup, fields,
// storage), the list shows the key without it, and reloading the page does
// not show it again. Rotating shows a new token once in the same way (the
// old one keeps working through the grace window); narrowing drops a
// scope; renewing moves the expiry; revoking makes the API refuse the
// token. Screenshots: the token dialog, the narrow dialog, the list at
// 1280×800 and at a phone's width.
func TestConsoleKeysShowTheTokenOnce(t *testing.T) {
	dir := t.TempDir()
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "2",
	})
	api := newAdminAPI(t, a, base)
	// The form lists the devices as the page loads: wait for both.
	var devices []string
	for deadline := time.Now().Add(60 * time.Second); len(devices) < 2; time.Sleep(50 * time.Millisecond) {
		var page struct {
			Devices []struct{ DeviceID string } `json:"devices"`
		}
		api.json("GET", "/v1/devices?limit=200", "", "", http.StatusOK, &page)
		devices = devices[:0]
		for _, d := range page.Devices {
			devices = append(devices, d.DeviceID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API lists devices %v; want the two sim phones", devices)
		}
	}
	chosen := devices[1]

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	admDo(t, wait, "open the keys page",
		chromedp.Navigate(base+"/#/keys"),
		chromedp.WaitVisible(chromedp.CSS(`#key-mint input[value="`+chosen+`"]`)))
	admCheckA11y(t, wait, "keys page, no keys")

	// Mint: a name, devices:read (ticked already) and devices:act, only the
	// second phone.
	admDo(t, wait, "fill in the mint form",
		chromedp.SendKeys(chromedp.ID("key-name"), "ci runner"),
		chromedp.Click(chromedp.CSS(`#key-mint input[value="devices:act"]`)),
		chromedp.Click(chromedp.CSS(`#key-mint input[type=radio][value=some]`)),
		chromedp.Click(chromedp.CSS(`#key-mint input[value="`+chosen+`"]`)),
		chromedp.Click(chromedp.CSS(`#key-mint button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	token, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	if !tokenRE.MatchString(token) {
		t.Fatalf("the dialog shows %q; want a pbk_ token", token)
	}
	admCheckA11y(t, wait, "token dialog")
	if copyButton := admEval[string](t, wait, `document.activeElement.textContent`); copyButton != "Copy" {
		t.Errorf("the dialog's focus is on %q; want its Copy button", copyButton)
	}
	testutil.Screenshot(t, ctx, "keys-token-once")

	// The token is the key the form asked for.
	var current consoleKey
	api.json("GET", "/v1/api-keys/current", token, "", http.StatusOK, &current)
	if current.Name != "ci runner" || !slices.Equal(current.Scopes, []string{"devices:read", "devices:act"}) ||
		!slices.Equal(current.DeviceIDs, []string{chosen}) || !strings.HasPrefix(token, current.TokenPrefix) {
		t.Fatalf("the token is key %+v; want \"ci runner\" with devices:read and devices:act on %s", current, chosen)
	}
	secret := strings.TrimPrefix(token, current.TokenPrefix)
	row := `tr[data-key-id="` + current.ID + `"]`

	// Closed, the token is gone for good.
	admDo(t, wait, "close the token dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitVisible(chromedp.CSS(row)))
	if admPageHolds(t, wait, secret) {
		t.Fatal("after the dialog closed, the page still holds the token's secret")
	}
	if got := admEval[string](t, wait, `document.querySelector('`+row+`').textContent`); !strings.Contains(got, "ci runner") ||
		!strings.Contains(got, current.TokenPrefix) || !strings.Contains(got, "devices:act") || !strings.Contains(got, "sim-") {
		t.Errorf("the key's row says %q; want its name, token start, scopes and device", got)
	}
	admCheckA11y(t, wait, "keys page")
	testutil.Screenshot(t, ctx, "keys")
	admPhoneScreenshot(t, wait, "keys-phone")

	admDo(t, wait, "reload the page", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row)))
	if admPageHolds(t, wait, secret) || admEval[bool](t, wait, `!!document.querySelector('dialog')`) {
		t.Fatal("after a reload the page shows the token again")
	}

	// Rotate: a new token, once; the old one works through the grace window.
	admDo(t, wait, "rotate",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Rotate"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	rotated, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	if !tokenRE.MatchString(rotated) || rotated == token || !strings.HasPrefix(rotated, current.TokenPrefix) {
		t.Fatalf("rotating shows %q; want a new token of the same key", rotated)
	}
	var after consoleKey
	api.json("GET", "/v1/api-keys/current", rotated, "", http.StatusOK, &after)
	api.json("GET", "/v1/api-keys/current", token, "", http.StatusOK, &after)
	if after.ID != current.ID || after.RotatedAt == nil {
		t.Errorf("after rotating: got %+v; want the same key, rotated", after)
	}
	admDo(t, wait, "close the new token's dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitVisible(chromedp.CSS(row)))
	if admPageHolds(t, wait, strings.TrimPrefix(rotated, current.TokenPrefix)) {
		t.Fatal("after the dialog closed, the page still holds the rotated token's secret")
	}

	// Narrow: drop devices:act.
	admDo(t, wait, "open the narrow dialog",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Narrow"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.form-dialog input[value="devices:act"]`)),
		chromedp.Click(chromedp.CSS(`dialog.form-dialog input[value="devices:act"]`)))
	admCheckA11y(t, wait, "narrow dialog")
	testutil.Screenshot(t, ctx, "keys-narrow")
	admDo(t, wait, "narrow",
		chromedp.Click(chromedp.CSS(`dialog.form-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.form-dialog`)))
	admPoll[bool](t, wait, "the row without devices:act", `(() => { const r = document.querySelector('`+row+`');
		return !!r && !r.textContent.includes('devices:act'); })()`)
	var narrowed consoleKey
	api.json("GET", "/v1/api-keys/"+current.ID, "", "", http.StatusOK, &narrowed)
	if !slices.Equal(narrowed.Scopes, []string{"devices:read"}) || narrowed.NarrowedAt == nil || !slices.Equal(narrowed.DeviceIDs, []string{chosen}) {
		t.Errorf("after narrowing: got %+v; want devices:read only, still on %s", narrowed, chosen)
	}

	// Renew for 30 days.
	admDo(t, wait, "renew",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Renew"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.form-dialog input[type=number]`)),
		chromedp.SetValue(chromedp.CSS(`dialog.form-dialog input[type=number]`), "30"),
		chromedp.Click(chromedp.CSS(`dialog.form-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.form-dialog`)))
	var renewed consoleKey
	api.json("GET", "/v1/api-keys/"+current.ID, "", "", http.StatusOK, &renewed)
	if left := time.Until(renewed.ExpiresAt); renewed.RenewedAt == nil || left < 29*24*time.Hour || left > 30*24*time.Hour {
		t.Errorf("after renewing for 30 days: got %+v (expires in %v)", renewed, left)
	}

	// Revoke: the token is refused from then on.
	admDo(t, wait, "revoke",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Revoke"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-state=revoked]`)))
	api.call("GET", "/v1/api-keys/current", rotated, "", http.StatusUnauthorized)
	testutil.Screenshot(t, ctx, "keys-revoked")

	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}
