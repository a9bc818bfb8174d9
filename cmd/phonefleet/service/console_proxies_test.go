package service

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/commands/proxies"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// TestConsoleProxiesBuyAssignRotate drives the Proxies page in a real
// headless Chromium against a local service with stripe-mock and one sim
// phone: buying a product asks for a quote and confirms its price, then
// lists the order awaiting payment with the provider's page; once the
// provider's signed event is applied the proxy shows, its credentials
// once (in a dialog, gone after it closes; the button then goes away);
// assigning it to the phone runs an operation that the page follows to
// succeeded, the phone listed behind the proxy; rotating shows the new
// credentials once, and the forward proxy refuses the old ones; the
// order is cancelled at its period's end and renewed again. The page
// passes the accessibility basics; screenshots of the page (wide and at a
// phone's width) and of the credentials dialog.
func TestConsoleProxiesBuyAssignRotate(t *testing.T) {
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_STRIPE_SECRET_KEY"], env["SERVICE_STRIPE_API_BASE"] = "sk_test_consoleproxies", testutil.StripeMock(t)
	env["SERVICE_STRIPE_WEBHOOK_SECRET"] = proxyStripeSecret
	a, base := startApp(t, env)
	c := auditClient{t: t, base: base}
	var device string
	waitUntil(t, 20*time.Second, "the sim phone", func() (bool, error) {
		list, _ := c.must("GET", "/v1/devices", nil, 200, nil).body["devices"].([]any)
		if len(list) == 1 {
			device = list[0].(map[string]any)["deviceId"].(string)
		}
		return device != "", nil
	})

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	admDo(t, wait, "open the proxies page",
		chromedp.Navigate(base+"/#/proxies"),
		chromedp.WaitVisible(chromedp.CSS(`table.proxy-products tr[data-product-id="us-fixed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#no-proxies`)))
	admCheckA11y(t, wait, "proxies page, none yet")

	admDo(t, wait, "buy the US fixed proxy",
		chromedp.Click(chromedp.CSS(`button[aria-label="Buy United States, fixed IP"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)))
	if msg := admEval[string](t, wait, `document.querySelector('dialog.confirm-dialog').textContent`); !strings.Contains(msg, "15.00 USD a month") {
		t.Errorf("the confirmation says %q; want the quoted price", msg)
	}
	admDo(t, wait, "confirm the price", chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)))
	if got := admPoll[string](t, wait, "the order or a refusal", `(document.querySelector('table.proxy-orders tr[data-state="awaiting_payment"] a[href^="https://"]') && 'ok') ||
		[...document.querySelectorAll('#toasts .toast.error')].map((e) => e.textContent).join(' ')`); got != "ok" {
		t.Fatalf("buying: the page says %q", got)
	}
	order := admEval[string](t, wait, `document.querySelector('table.proxy-orders tr[data-order-id]').dataset.orderId`)
	var proxyID string
	for _, o := range c.must("GET", "/v1/proxy-orders", nil, 200, nil).body["orders"].([]any) {
		if m := o.(map[string]any); m["orderId"] == order {
			proxyID = m["proxyId"].(string)
		}
	}
	if proxyID == "" {
		t.Fatalf("order %s is not in the API's list", order)
	}

	// The provider confirms the payment; the page shows the proxy.
	if r, err := a.app.Proxies.ReceiveProviderEvent.Handle(testutil.Context(t), paidProxyEvent(t, a.orgID, order, proxyID, "evt_console_"+order)); err != nil || r.Outcome != "applied" {
		t.Fatalf("payment: %+v, %v", r, err)
	}
	row := `table.proxy-list tr[data-proxy-id="` + proxyID + `"]`
	admDo(t, wait, "see the proxy",
		chromedp.Navigate(base+"/#/fleet"), chromedp.Navigate(base+"/#/proxies"),
		chromedp.WaitVisible(chromedp.CSS(row)))
	admDo(t, wait, "show the credentials",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Show the credentials"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	creds, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	user, pass, ok := strings.Cut(strings.TrimPrefix(creds, "username: "), "\npassword: ")
	if !ok || user == "" || pass == "" {
		t.Fatalf("the dialog shows %q; want a username and a password", creds)
	}
	testutil.Screenshot(t, ctx, "proxies-credentials-once")
	admDo(t, wait, "close the dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitNotPresent(chromedp.CSS(row+` button[aria-label^="Show the credentials"]`)))
	if admPageHolds(t, wait, pass) {
		t.Fatal("after the dialog closed, the page still holds the password")
	}
	endpoint := a.forwardProxy.Addr()
	if got := proxyStatus(t, endpoint, user, pass, base+"/healthz"); got != 200 {
		t.Fatalf("the credentials shown: got %d through the proxy; want 200", got)
	}

	// Assign to the phone; the page follows the operation to its end.
	admDo(t, wait, "assign",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Assign"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.form-dialog select#proxy-assign-device`)),
		chromedp.Click(chromedp.CSS(`dialog.form-dialog button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`table.proxy-operations tr[data-state="succeeded"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` .proxy-devices [data-device-id="`+device+`"]`)))
	admCheckA11y(t, wait, "proxies page")
	testutil.Screenshot(t, ctx, "proxies")
	admPhoneScreenshot(t, wait, "proxies-phone")

	// Rotate: new credentials once; the old ones refused once it is done.
	admDo(t, wait, "rotate",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Rotate"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	rotated, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	newUser, newPass, _ := strings.Cut(strings.TrimPrefix(rotated, "username: "), "\npassword: ")
	admDo(t, wait, "close the dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)))
	admPoll[bool](t, wait, "the rotation shown succeeded, beside the assignment",
		`document.querySelectorAll('table.proxy-operations tr[data-state="succeeded"]').length === 2`)
	if got := proxyStatus(t, endpoint, user, pass, base+"/healthz"); got != 407 {
		t.Fatalf("old credentials after rotation: %d; want 407", got)
	}
	if got := proxyStatus(t, endpoint, newUser, newPass, base+"/healthz"); got != 200 {
		t.Fatalf("new credentials from the dialog: %d; want 200", got)
	}

	// Cancel at the period's end, then renew.
	orderRow := `table.proxy-orders tr[data-order-id="` + order + `"]`
	admDo(t, wait, "cancel the order",
		chromedp.Click(chromedp.CSS(orderRow+` button[aria-label^="Cancel the order"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(orderRow+` button[aria-label^="Renew the order"]`)))
	admDo(t, wait, "renew the order",
		chromedp.Click(chromedp.CSS(orderRow+` button[aria-label^="Renew the order"]`)))
	admPoll[bool](t, wait, "the order renewing again", `!!document.querySelector('`+orderRow+` button[aria-label^="Cancel the order"]')`)
	if o := c.must("GET", "/v1/proxy-orders/"+order, nil, 200, nil).body; o["cancelAtPeriodEnd"] != false {
		t.Fatalf("order after renewing %v", o)
	}

	// A partial refund of its payment shows on the order, which stands.
	obj, _ := json.Marshal(map[string]any{"id": "ch_console", "object": "charge", "amount": 1500, "amount_refunded": 500, "currency": "usd",
		"refunded": false, "metadata": map[string]any{payments.MetaOrgID: a.orgID, payments.MetaOrderID: order, proxies.MetaKind: proxies.MetaKindProxy}})
	ref := signed(t, payments.Event{ID: "evt_console_refund_" + order, Type: payments.EventChargeRefunded, Created: time.Now(), Object: obj}, proxyStripeSecret)
	if r, err := a.app.Proxies.ReceiveProviderEvent.Handle(testutil.Context(t), proxies.ReceiveProviderEvent{Payload: ref.Payload, Signature: ref.Signature}); err != nil || r.Outcome != "applied" {
		t.Fatalf("partial refund: %+v, %v", r, err)
	}
	admDo(t, wait, "open the page again", chromedp.Navigate(base+"/#/fleet"), chromedp.Navigate(base+"/#/proxies"))
	admPoll[bool](t, wait, "the partial refund on the order",
		`(document.querySelector('`+orderRow+`[data-state="paid"] .proxy-order-payment') || {}).textContent === 'partly refunded: 5.00 USD of 15.00 USD'`)
}
