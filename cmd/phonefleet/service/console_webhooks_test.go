package service

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/testutil"
	"phonefleet/webhooksig"
)

// TestConsoleWebhookTestDeliveryShowsUpInDeliveries runs the service in
// local mode trusting a real HTTPS receiver on loopback
// (SERVICE_WEBHOOK_CA_FILE) and drives the webhooks page in a real
// headless Chromium: subscribing the receiver shows the signing secret
// once; "Send test" queues a delivery that shows up in the webhook's
// deliveries as delivered, with the receiver's 200, and the receiver got
// it signed with the secret the dialog showed. Rotating shows a new
// secret once, and the next test delivery is signed with it. The
// deliveries page in pages: with 21 deliveries it shows 20 and the older
// one after "Older deliveries". Disabling switches it off (no test
// then), an id that names nothing shows not_found, and deleting it
// empties the list. Screenshots: the list, the secret dialog, the
// deliveries (with a payload open), each at 1280×800 and the lists at a
// phone's width.
func TestConsoleWebhookTestDeliveryShowsUpInDeliveries(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": rcv.CAFile, "SERVICE_SIM_DEVICES": "0",
	})
	api := newAdminAPI(t, a, base)

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	admDo(t, wait, "open the webhooks page",
		chromedp.Navigate(base+"/#/webhooks"),
		chromedp.WaitVisible(chromedp.CSS(`#webhook-create`)))
	admCheckA11y(t, wait, "webhooks page, none yet")

	// An address the service refuses is explained in the form.
	admDo(t, wait, "subscribe a plain-http address",
		chromedp.SendKeys(chromedp.ID("webhook-url"), "http://example.com/in"),
		chromedp.Click(chromedp.CSS(`#webhook-create button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#webhook-create .error`)))
	if msg := admEval[string](t, wait, `document.querySelector('#webhook-create .error').textContent`); !strings.Contains(msg, "invalid_argument") ||
		!strings.Contains(msg, "scheme_not_https") {
		t.Errorf("the form says %q; want invalid_argument naming scheme_not_https", msg)
	}

	// Subscribe the receiver to run.ended and schedule.triggered.
	url := rcv.URL + "/in"
	admDo(t, wait, "subscribe the receiver",
		chromedp.SetValue(chromedp.ID("webhook-url"), url),
		chromedp.Click(chromedp.CSS(`#webhook-create input[value="schedule.triggered"]`)),
		chromedp.Click(chromedp.CSS(`#webhook-create button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	secret, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("the dialog shows %q; want a whsec_ signing secret", secret)
	}
	testutil.Screenshot(t, ctx, "webhooks-secret-once")
	admDo(t, wait, "close the secret dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitVisible(chromedp.CSS(`table.webhook-list tr[data-webhook-id]`)))
	if admPageHolds(t, wait, secret) {
		t.Fatal("after the dialog closed, the page still holds the signing secret")
	}
	id := admEval[string](t, wait, `document.querySelector('table.webhook-list tr[data-webhook-id]').dataset.webhookId`)
	var hook struct {
		URL        string   `json:"url"`
		Events     []string `json:"events"`
		Enabled    bool     `json:"enabled"`
		SecretHint string   `json:"secretHint"`
	}
	api.json("GET", "/v1/webhooks/"+id, "", "", http.StatusOK, &hook)
	if hook.URL != url || strings.Join(hook.Events, ",") != "run.ended,schedule.triggered" || !hook.Enabled || !strings.HasSuffix(secret, hook.SecretHint) {
		t.Fatalf("the API has %+v; want the receiver on run.ended and schedule.triggered, enabled, with the secret shown", hook)
	}
	row := `tr[data-webhook-id="` + id + `"]`
	if got := admEval[string](t, wait, `document.querySelector('`+row+`').textContent`); !strings.Contains(got, url) ||
		!strings.Contains(got, "schedule.triggered") || !strings.Contains(got, "enabled") || !strings.Contains(got, "…"+hook.SecretHint) {
		t.Errorf("the row says %q; want the url, events, state and secret hint", got)
	}
	admCheckA11y(t, wait, "webhooks page")
	testutil.Screenshot(t, ctx, "webhooks")
	admPhoneScreenshot(t, wait, "webhooks-phone")

	// Send test: the page moves to the webhook's deliveries, where the
	// delivery shows up delivered.
	admDo(t, wait, "send a test",
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Send a test"]`)),
		chromedp.WaitVisible(chromedp.CSS(`table.deliveries`)))
	first := delivered(t, wait, rcv, secret, 1)
	admDo(t, wait, "open the payload",
		chromedp.Click(chromedp.CSS(`tr[data-delivery-id="`+first+`"] details summary`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-delivery-id="`+first+`"] pre.payload`)))
	if payload := admEval[string](t, wait, `document.querySelector('tr[data-delivery-id="`+first+`"] pre.payload').textContent`); !strings.Contains(payload, `"test": true`) ||
		!strings.Contains(payload, first) {
		t.Errorf("the payload shown is %q; want the test delivery's body", payload)
	}
	admCheckA11y(t, wait, "deliveries page")
	testutil.Screenshot(t, ctx, "webhook-deliveries")
	admPhoneScreenshot(t, wait, "webhook-deliveries-phone")

	// Rotate: a new secret once, which signs the next delivery.
	admDo(t, wait, "rotate",
		chromedp.Click(chromedp.CSS(`button[aria-label^="Rotate the signing secret"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	rotated, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Fatalf("rotating shows %q; want a new whsec_ secret", rotated)
	}
	admDo(t, wait, "close the new secret's dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitVisible(chromedp.CSS(`table.deliveries tr[data-delivery-id]`)))
	if admPageHolds(t, wait, rotated) {
		t.Fatal("after the dialog closed, the page still holds the new secret")
	}
	admDo(t, wait, "send a test after rotating",
		chromedp.Click(chromedp.CSS(`button[aria-label^="Send a test"]`)))
	delivered(t, wait, rcv, rotated, 2)

	// Paging: 19 more (21 in all); the page shows 20, then the oldest.
	for range 19 {
		api.call("POST", "/v1/webhooks/"+id+"/test", "", "", http.StatusAccepted)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, _ := rcv.received(); len(got) >= 21 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 21 test deliveries never all arrived")
		}
	}
	admDo(t, wait, "refresh the deliveries",
		chromedp.Click(chromedp.CSS(`.section-head button`)))
	admPoll[bool](t, wait, "20 delivered rows and an older page", `document.querySelectorAll('table.deliveries tbody tr[data-status=delivered]').length === 20 &&
		!!document.querySelector('.more button')`)
	admDo(t, wait, "older deliveries", chromedp.Click(chromedp.CSS(`.more button`)))
	admPoll[bool](t, wait, "21 rows, the first one last", `(() => { const rows = document.querySelectorAll('table.deliveries tbody tr');
		return rows.length === 21 && rows[20].dataset.deliveryId === `+admJSString(first)+` && !document.querySelector('.more button'); })()`)

	// Disable: switched off, no test.
	admDo(t, wait, "disable",
		chromedp.Click(chromedp.CSS(`button[aria-label^="Disable"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label^="Enable"]`)))
	if admEval[bool](t, wait, `!document.querySelector('button[aria-label^="Send a test"]').disabled`) {
		t.Error("a disabled webhook's Send test button is enabled")
	}
	api.json("GET", "/v1/webhooks/"+id, "", "", http.StatusOK, &hook)
	if hook.Enabled {
		t.Error("the API still has the webhook enabled")
	}

	// An id that names nothing answers as the API does.
	admDo(t, wait, "open an unknown webhook",
		chromedp.Navigate(base+"/#/webhooks/whk_00000000000000000000000000000000"),
		chromedp.WaitVisible(chromedp.CSS(`#main .error`)))
	if msg := admEval[string](t, wait, `document.querySelector('#main .error').textContent`); !strings.HasPrefix(msg, "not_found") {
		t.Errorf("an unknown webhook shows %q; want not_found", msg)
	}

	// Delete from the list.
	admDo(t, wait, "delete",
		chromedp.Navigate(base+"/#/webhooks"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row+` button[aria-label^="Delete"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)))
	api.call("GET", "/v1/webhooks/"+id, "", "", http.StatusNotFound)

	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}

// delivered waits until the deliveries table shows n deliveries, the
// newest delivered with the receiver's 200 (on its first attempt, or on
// a retry when a loaded machine made the first one time out), and checks that the receiver
// got that delivery (Service-Delivery) signed with secret. It returns the
// newest delivery's id.
func delivered(t *testing.T, ctx context.Context, rcv *receiver, secret string, n int) string {
	t.Helper()
	id := admPoll[string](t, ctx, fmt.Sprintf("delivery %d delivered in the table", n), `(() => {
		const rows = document.querySelectorAll('table.deliveries tbody tr');
		if (rows.length !== `+fmt.Sprint(n)+` || rows[0].dataset.status !== 'delivered') return false;
		const cells = [...rows[0].children].map((c) => c.textContent);
		return +cells[2] >= 1 && cells[3] === '200' ? rows[0].dataset.deliveryId : false;
	})()`)
	reqs, bodies := rcv.received()
	for i, r := range reqs {
		if r.Header.Get(webhooksig.DeliveryHeader) != id {
			continue
		}
		if err := webhooksig.Verify(bodies[i], r.Header.Get(webhooksig.SignatureHeader), secret, time.Now(), 0); err != nil {
			t.Errorf("delivery %s: signature: %v; want it signed with the secret the page showed", id, err)
		}
		return id
	}
	t.Fatalf("the page shows delivery %s delivered; the receiver never got it", id)
	return ""
}
