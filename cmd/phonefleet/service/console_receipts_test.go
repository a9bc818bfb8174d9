package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"phonefleet/http/apitest"
	"phonefleet/testutil"
)

// browserPage drives one console page in a test's browser: every wait is
// bounded by the test's context, and a failure says what was awaited and
// what the page logged.
type browserPage struct {
	t    *testing.T
	ctx  context.Context // the browser tab (testutil.Browser)
	wait context.Context // ctx bounded for the whole test
	base string
}

func newBrowserPage(t *testing.T, base string) *browserPage {
	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return &browserPage{t: t, ctx: ctx, wait: wait, base: base}
}

// open loads the console at hash (e.g. "#/receipts") as a new page load,
// as following a link from elsewhere does.
func (p *browserPage) open(hash string) {
	p.t.Helper()
	if err := chromedp.Do(p.wait, chromedp.Navigate("about:blank"), chromedp.Navigate(p.base+"/"+hash)); err != nil {
		p.t.Fatalf("open %s: %v", hash, err)
	}
}

// until waits until the JavaScript expression js is truthy.
func (p *browserPage) until(what, js string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.wait, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		p.t.Fatalf("the page never showed %s: %v\nthe page's main: %s\nbrowser console: %q", what, err, p.mainText(), testutil.BrowserConsole(p.ctx))
	}
}

// eval evaluates js (awaiting a promise it returns) into out.
func (p *browserPage) eval(js string, out any) {
	p.t.Helper()
	raw, err := chromedp.Run(p.wait, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		p.t.Fatalf("evaluate %s: %v (%s)", js, err, raw)
	}
}

// do runs chromedp actions (clicks, typing).
func (p *browserPage) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.wait, actions...); err != nil {
		p.t.Fatalf("%s: %v\nthe page's main: %s", what, err, p.mainText())
	}
}

// mainText is the text of the page's main element (for failure messages).
func (p *browserPage) mainText() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('main').innerText`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// shot saves a screenshot of the page as an artefact.
func (p *browserPage) shot(name string) { testutil.Screenshot(p.t, p.ctx, name) }

// noErrors fails the test if the page threw.
func (p *browserPage) noErrors() {
	p.t.Helper()
	if errs := testutil.BrowserErrors(p.ctx); len(errs) > 0 {
		p.t.Errorf("the page threw: %q", errs)
	}
}

// jsLit quotes s as a JavaScript string literal.
func jsLit(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// localConsoleApp starts the service in local mode with sims sim phones
// and returns it, its base URL, a caller that checks every JSON answer
// against the contract, and the phones once the API lists them online.
func localConsoleApp(t *testing.T, sims int) (*App, string, func(method, path, body string, want int) map[string]any, []string) {
	t.Helper()
	// The service's log is shown when the test fails.
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's log:\n%s", logs.String())
		}
	})
	a, base := startAppLogging(t, localEnv(t, testutil.DatabaseURL(t), sims), slog.New(slog.NewTextHandler(logs, nil)))
	checked := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		return checked("console-test", method, path, body, want)
	}
	var ids []string
	waitUntil(t, 60*time.Second, "the sim phones online", func() (bool, error) {
		ids = ids[:0]
		devices, _ := call("GET", "/v1/devices?limit=200", "", http.StatusOK)["devices"].([]any)
		for _, d := range devices {
			if m := d.(map[string]any); m["status"] == "online" {
				ids = append(ids, m["deviceId"].(string))
			}
		}
		return len(ids) == sims, nil
	})
	slices.Sort(ids)
	return a, base, call, ids
}

// receiptKeys returns the idempotency keys of a receipt page, in order.
func receiptKeys(page map[string]any) []string {
	var keys []string
	rs, _ := page["receipts"].([]any)
	for _, r := range rs {
		keys = append(keys, r.(map[string]any)["idempotencyKey"].(string))
	}
	return keys
}

// rowKeys is the JavaScript for the keys of the receipts table's rows.
const rowKeys = `[...document.querySelectorAll('table.receipts tbody tr:not(.frames-row)')].map((r) => r.dataset.key)`

// TestConsoleReceipts drives the receipts page (#/receipts) in a real
// headless Chromium against the service in local mode. Receipts made
// through the REST API (three committed actions and three failed ones on a
// sim phone) are listed newest first as the API lists them; the status
// filter from the form is reflected in the address and shows only failed
// receipts, two a page; "Next page" passes the API's cursor back exactly
// as it came and reaches the last one; marking it reviewed with a note is
// recorded (the API's receipt shows the local operator's review); a
// filtered address opened directly is applied (and shows in the form); a
// committed receipt's frames before and after load; both actor filters at
// once show the API's 400 invalid_argument; the export downloads the same
// NDJSON chain the API serves; and a phone-sized window does not scroll
// sideways. Each state is saved as a screenshot.
func TestConsoleReceipts(t *testing.T) {
	_, base, call, devices := localConsoleApp(t, 1)
	dev := devices[0]
	lease := call("POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, http.StatusCreated)["leaseId"].(string)
	act := func(key, action, args string, want int) {
		t.Helper()
		call("POST", "/v1/devices/"+dev+"/actions", `{"action":"`+action+`","arguments":`+args+`,"idempotencyKey":"`+key+`","leaseId":"`+lease+`"}`, want)
	}
	// Oldest first: ok-1, bad-1, ok-2, bad-2, ok-3, bad-3.
	for i, ok := range []struct{ action, args string }{
		{"open_app", `{"package":"com.example.notes"}`}, {"key", `{"key":"HOME"}`}, {"open_app", `{"package":"com.android.settings"}`},
	} {
		n := string(rune('1' + i))
		act("ok-"+n, ok.action, ok.args, http.StatusOK)
		act("bad-"+n, "open_app", `{"package":"com.example.not.installed"}`, http.StatusBadRequest)
	}
	call("DELETE", "/v1/devices/"+dev+"/lease?leaseId="+lease, "", http.StatusNoContent)
	all := []string{"bad-3", "ok-3", "bad-2", "ok-2", "bad-1", "ok-1"}
	if got := receiptKeys(call("GET", "/v1/receipts", "", http.StatusOK)); !slices.Equal(got, all) {
		t.Fatalf("the API lists receipts %v; want %v", got, all)
	}

	p := newBrowserPage(t, base)

	// Every receipt, newest first, as the API lists them.
	p.open("#/receipts")
	p.until("the six receipts, newest first", `JSON.stringify(`+rowKeys+`) === `+jsLit(mustJSON(t, all)))
	var states []string
	p.eval(`[...document.querySelectorAll('table.receipts tbody tr')].map((r) => r.querySelector('.state').textContent)`, &states)
	if want := []string{"failed", "committed", "failed", "committed", "failed", "committed"}; !slices.Equal(states, want) {
		t.Errorf("the rows' states are %v; want %v", states, want)
	}
	var action string
	p.eval(`document.querySelector('tr[data-key="ok-3"] .action').textContent`, &action)
	if action != "open_app com.android.settings" {
		t.Errorf("ok-3's action reads %q; want open_app com.android.settings", action)
	}
	p.shot("receipts")

	// Filter by status from the form, two a page: the address carries the
	// filters, and the rows are the API's first page.
	p.do("filter failed, two a page",
		chromedp.SetValue(chromedp.CSS("#rf-status"), "failed"),
		chromedp.SetValue(chromedp.CSS("#rf-limit"), "2"),
		chromedp.Click(chromedp.CSS("form.filters button[type=submit]")))
	first := call("GET", "/v1/receipts?status=failed&limit=2", "", http.StatusOK)
	p.until("the first page of failed receipts", `location.hash === '#/receipts?status=failed&limit=2' && JSON.stringify(`+rowKeys+`) === `+
		jsLit(mustJSON(t, receiptKeys(first))))
	if got := receiptKeys(first); !slices.Equal(got, []string{"bad-3", "bad-2"}) {
		t.Fatalf("the API's first page of failed receipts is %v; want [bad-3 bad-2]", got)
	}
	// The next-page link carries the API's cursor exactly as it came.
	var cursor struct{ Before, BeforeKey string }
	p.eval(`(() => { const q = new URLSearchParams(document.querySelector('a.next-page').getAttribute('href').split('?')[1]);
		return { before: q.get('before'), beforeKey: q.get('beforeKey') }; })()`, &cursor)
	if cursor.Before != first["nextBefore"] || cursor.BeforeKey != first["nextBeforeKey"] {
		t.Fatalf("the next page link carries before=%q beforeKey=%q; want the API's nextBefore %q and nextBeforeKey %q",
			cursor.Before, cursor.BeforeKey, first["nextBefore"], first["nextBeforeKey"])
	}
	p.shot("receipts-failed")

	p.do("next page", chromedp.Click(chromedp.CSS("a.next-page")))
	p.until("the last page of failed receipts", `location.hash.includes('before=') && JSON.stringify(`+rowKeys+`) === '["bad-1"]' &&
		document.querySelector('nav.pager').textContent.includes('last page')`)
	q := "status=failed&limit=2&before=" + url.QueryEscape(cursor.Before) + "&beforeKey=" + url.QueryEscape(cursor.BeforeKey)
	if got := receiptKeys(call("GET", "/v1/receipts?"+q, "", http.StatusOK)); !slices.Equal(got, []string{"bad-1"}) {
		t.Fatalf("the API's second page is %v; want [bad-1]", got)
	}

	// Mark it reviewed, with a note.
	const note = "checked by the console test"
	p.do("mark bad-1 reviewed",
		chromedp.Click(chromedp.CSS(`tr[data-key="bad-1"] button.review-open`)),
		chromedp.SendKeys(chromedp.CSS(`tr[data-key="bad-1"] input[name=note]`), note),
		chromedp.Click(chromedp.CSS(`tr[data-key="bad-1"] .review-form button[type=submit]`)))
	p.until("bad-1 reviewed", `(() => { const s = document.querySelector('tr[data-key="bad-1"] .review-state');
		return s && s.textContent.includes('reviewed by local-operator') && s.textContent.includes(`+jsLit(note)+`); })()`)
	rc := call("GET", "/v1/receipts/bad-1", "", http.StatusOK)
	if rv, _ := rc["reviewed"].(map[string]any); rv == nil || rv["note"] != note || rv["by"].(map[string]any)["userId"] != "local-operator" {
		t.Fatalf("the API's bad-1 is reviewed %v; want by local-operator with the note", rc["reviewed"])
	}
	p.shot("receipts-reviewed")

	// A filtered address opened directly: only committed receipts, and
	// the form shows the filter; a receipt's frames before and after load.
	p.open("#/receipts?status=committed")
	p.until("the committed receipts", `JSON.stringify(`+rowKeys+`) === '["ok-3","ok-2","ok-1"]' && document.querySelector('#rf-status').value === 'committed'`)
	ok3 := call("GET", "/v1/receipts/ok-3", "", http.StatusOK)
	frames := ok3["frames"].(map[string]any)
	p.do("open ok-3's frames", chromedp.Click(chromedp.CSS(`tr[data-key="ok-3"] button.frames-toggle`)))
	p.until("ok-3's frames before and after", `(() => { const imgs = [...document.querySelectorAll('tr.frames-row[data-key="ok-3"] img.frame')];
		return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0) &&
			imgs[0].dataset.frameId === `+jsLit(frames["before"].(string))+` && imgs[1].dataset.frameId === `+jsLit(frames["after"].(string))+`; })()`)
	p.shot("receipts-committed-frames")

	// Both actor filters at once: the API refuses them, the page says so.
	p.do("filter by a person and a key",
		chromedp.SetValue(chromedp.CSS("#rf-status"), ""),
		chromedp.SetValue(chromedp.CSS("#rf-actorUserId"), "local-operator"),
		chromedp.SetValue(chromedp.CSS("#rf-actorApiKeyId"), "key_nobody"),
		chromedp.Click(chromedp.CSS("form.filters button[type=submit]")))
	refused := call("GET", "/v1/receipts?actorUserId=local-operator&actorApiKeyId=key_nobody", "", http.StatusBadRequest)["error"].(map[string]any)
	p.until("the API's refusal of both actor filters", `(() => { const e = document.querySelector('#main [role=alert]');
		return e && e.textContent === `+jsLit(refused["code"].(string)+": "+refused["message"].(string))+` && location.hash.includes('actorApiKeyId=key_nobody'); })()`)
	p.shot("receipts-both-actors")

	// The export: the download is the chain the API serves.
	dl := t.TempDir()
	p.do("let downloads land in a temporary directory", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, browser.SetDownloadBehavior,
			browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl})
		return err
	}))
	p.open("#/receipts")
	p.until("the receipts", rowKeys+`.length === 6`)
	p.do("export", chromedp.Click(chromedp.CSS(".export button")))
	p.until("the export's link", `!!document.querySelector('a.export-link')`)
	var name string
	p.eval(`document.querySelector('a.export-link').getAttribute('download')`, &name)
	resp, err := http.Get(base + "/v1/receipts/export")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The page's CSP keeps it from reading its own blob back (connect-src
	// 'self'), so the download is read where the browser saved it.
	var saved []byte
	waitUntil(t, 30*time.Second, "the downloaded export "+name, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(dl, name))
		saved = b
		return err == nil && len(b) >= len(served), nil
	})
	if string(saved) != string(served) {
		t.Fatalf("the page exported %d bytes; the API serves %d:\n%s\n---\n%s", len(saved), len(served), saved, served)
	}
	// Six requests, six outcomes, one review, and the end line; a signed
	// checkpoint line may follow an entry and is no entry.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(saved)), "\n") {
		if !strings.HasPrefix(l, `{"checkpoint":`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 14 || !strings.HasPrefix(lines[13], `{"end":`) {
		t.Fatalf("the export has %d lines other than checkpoints, ending %q; want 13 entries and the end line", len(lines), lines[len(lines)-1])
	}
	p.until("the export's summary", `document.querySelector('.export-result').textContent.includes('13 entries')`)
	p.shot("receipts-export")

	// A phone-sized window: no sideways scrolling, every row still there.
	p.do("a phone's window", chromedp.EmulateViewport(390, 844))
	p.until("the receipts at a phone's width", rowKeys+`.length === 6 && document.documentElement.scrollWidth <= 390 &&
		document.querySelector('.table-wrap').scrollWidth <= document.querySelector('.table-wrap').clientWidth`)
	p.shot("receipts-phone")
	p.noErrors()
}

// mustJSON encodes v.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConsoleReviewsAReceiptWhoseKeyHoldsReservedCharacters: a receipt
// whose idempotency key holds a slash, a question mark, a hash sign, a
// percent sign and a space (the run executor's keys hold slashes) is
// listed and marked reviewed from the receipts page like any other, and
// the API reads the review back by that key.
func TestConsoleReviewsAReceiptWhoseKeyHoldsReservedCharacters(t *testing.T) {
	_, base, call, devices := localConsoleApp(t, 1)
	dev := devices[0]
	lease := call("POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, http.StatusCreated)["leaseId"].(string)
	key := "run_x/step-1/0?#50% done"
	call("POST", "/v1/devices/"+dev+"/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":`+jsLit(key)+`,"leaseId":"`+lease+`"}`, http.StatusOK)
	row := `tr[data-key=` + jsLit(key) + `]`
	p := newBrowserPage(t, base)
	p.open("#/receipts")
	p.until("the receipt's row", `!!document.querySelector(`+jsLit(row)+`)`)
	p.do("mark it reviewed",
		chromedp.Click(chromedp.CSS(row+` button.review-open`)),
		chromedp.SendKeys(chromedp.CSS(row+` input[name=note]`), "slashes and all"),
		chromedp.Click(chromedp.CSS(row+` .review-form button[type=submit]`)))
	p.until("the row reviewed", `(() => { const s = document.querySelector(`+jsLit(row+` .review-state`)+`);
		return s && s.textContent.includes('reviewed by local-operator'); })()`)
	rc := call("GET", "/v1/receipts/"+url.PathEscape(key), "", http.StatusOK)
	if rv, _ := rc["reviewed"].(map[string]any); rv == nil || rv["note"] != "slashes and all" || rc["idempotencyKey"] != key {
		t.Fatalf("the API's receipt of %q: %v; want it reviewed with the note", key, rc)
	}
}
