package service

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/http/apitest"
	"phonefleet/testutil"
)

// The helpers of the webhooks, API keys and operators page tests
// (console_webhooks_test.go, console_keys_test.go,
// console_operators_test.go).

// adminAPI calls the service the page runs against, as a client beside
// the browser, and checks each JSON answer against the OpenAPI document.
type adminAPI struct {
	t    *testing.T
	base string
	v    *apitest.Validator
}

func newAdminAPI(t *testing.T, a *App, base string) *adminAPI {
	return &adminAPI{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
}

// call sends method path with body (JSON when not empty) and token as the
// bearer (none when empty), requires status want, and returns the body.
func (c *adminAPI) call(method, path, token, body string, want int) []byte {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, raw, want)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		check := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			check.Header.Set("Authorization", "Bearer "+token)
		}
		c.v.Check(c.t, check, resp, raw)
	}
	return raw
}

// json calls and decodes the answer into out.
func (c *adminAPI) json(method, path, token, body string, want int, out any) {
	c.t.Helper()
	if err := json.Unmarshal(c.call(method, path, token, body, want), out); err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
}

// admDo runs browser steps, failing the test with what the page logged.
func admDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v\nthe page logged: %q", what, err, testutil.BrowserConsole(ctx))
	}
}

// admPoll waits until the page expression is truthy and returns its value.
func admPoll[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		t.Fatalf("%s: %v\nthe page logged: %q", what, err, testutil.BrowserConsole(ctx))
	}
	return v
}

// admEval evaluates a page expression.
func admEval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %.80q: %v", expr, err)
	}
	return v
}

// admJSString is s as a JavaScript string literal.
func admJSString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// admPageHolds reports whether s is anywhere the page keeps text: the
// document (markup, and the values of its fields) or the origin's storage.
func admPageHolds(t *testing.T, ctx context.Context, s string) bool {
	t.Helper()
	return admEval[bool](t, ctx, `((s) => document.documentElement.outerHTML.includes(s) ||
		[...document.querySelectorAll('input, textarea')].some((e) => e.value.includes(s)) ||
		JSON.stringify(Object.assign({}, sessionStorage)).includes(s) ||
		JSON.stringify(Object.assign({}, localStorage)).includes(s))(`+admJSString(s)+`)`)
}

// admA11yProblems lists what breaks the console's accessibility basics on the
// page as shown: a field without a label, a button or link without a
// name, a table header cell without a scope, a page without exactly one
// h1, a heading level skipped, a click handler's target that is not a
// control (the pages put handlers on buttons, links and forms only, so a
// <div> or <span> never claims to be clickable: none has role=button or
// tabindex).
func admA11yProblems(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return admEval[[]string](t, ctx, `(() => {
		const out = [];
		const root = document.querySelector('dialog[open]') || document.getElementById('main');
		for (const el of root.querySelectorAll('input, select, textarea')) {
			if (el.type === 'hidden') continue;
			if (!((el.labels && el.labels.length) || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby'))) out.push('unlabelled field ' + el.outerHTML.slice(0, 100));
		}
		for (const el of root.querySelectorAll('button, a[href], summary')) {
			if (!(el.textContent.trim() || el.getAttribute('aria-label'))) out.push('nameless control ' + el.outerHTML.slice(0, 100));
		}
		for (const th of root.querySelectorAll('th')) if (!th.getAttribute('scope')) out.push('th without scope: ' + th.textContent);
		for (const el of root.querySelectorAll('[role=button], div[tabindex], span[tabindex]')) out.push('pseudo-control ' + el.outerHTML.slice(0, 100));
		if (root.id === 'main') {
			const h1 = root.querySelectorAll('h1').length;
			if (h1 !== 1) out.push(h1 + ' h1 elements');
			let last = 1;
			for (const h of root.querySelectorAll('h1, h2, h3, h4')) {
				const level = +h.tagName[1];
				if (level > last + 1) out.push('heading ' + h.tagName + ' "' + h.textContent + '" skips a level');
				last = level;
			}
		}
		return out;
	})()`)
}

// admCheckA11y fails the test for each accessibility problem of the page.
func admCheckA11y(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	for _, p := range admA11yProblems(t, ctx) {
		t.Errorf("%s: %s", where, p)
	}
}

// admPhoneScreenshot takes a screenshot at a phone's width (390×844) after
// checking the page does not scroll sideways there, then goes back to
// the 1280×800 window.
func admPhoneScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	admDo(t, ctx, "phone-sized window", chromedp.EmulateViewport(390, 844))
	if w := admEval[int](t, ctx, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("%s: the page is %d pixels wide at a 390-pixel window; want no sideways scrolling", name, w)
	}
	testutil.Screenshot(t, ctx, name)
	admDo(t, ctx, "back to 1280×800", chromedp.EmulateViewport(testutil.BrowserWidth, testutil.BrowserHeight))
}
