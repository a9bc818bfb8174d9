package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/cmd/phonefleet/clisignin"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// cliLogin is a `phonefleet login` running in the background against a
// service, with what it printed and, once it ends, its outcome.
type cliLogin struct {
	out  *testutil.SyncBuffer
	done chan error
	path string
	// page and code are what it told the person.
	page, code string
}

var cliShown = regexp.MustCompile(`(?s)    (http://\S+/#/cli\?code=\S+)\n.*approve the code  ([A-Z]{4}-[A-Z]{4})`)

// startCLILogin starts a login against base storing under dir, and waits
// until it has printed the page and the code.
func startCLILogin(t *testing.T, ctx context.Context, base, dir string) *cliLogin {
	t.Helper()
	l := &cliLogin{out: &testutil.SyncBuffer{}, done: make(chan error, 1), path: filepath.Join(dir, "phonefleet", "credentials.json")}
	go func() {
		_, err := clisignin.Login(ctx, clisignin.Options{URL: base, ClientName: "phonefleet CLI console test", Host: "build-box",
			Path: l.path, Out: l.out, Interval: 50 * time.Millisecond})
		l.done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := cliShown.FindStringSubmatch(l.out.String()); m != nil {
			l.page, l.code = m[1], m[2]
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("login printed no page and code:\n%s", l.out)
		}
	}
}

// result waits for the login's outcome.
func (l *cliLogin) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("login did not finish within a minute:\n%s", l.out)
		return nil
	}
}

// TestConsoleCLIApprovalPage runs the service in local mode and drives the
// console's CLI sign-in page in a real headless Chromium, opened at the
// address `phonefleet login` printed: it shows the client, the computer,
// the code and the scopes asked for; unticking one and approving gives
// the CLI a key without it; a second login denied from the page ends with
// nothing stored; an unknown code shows the API's not_found and the code
// form, which leads to a real code's page. The page's own telemetry (its
// page views) reaches GET /v1/console/events. Screenshots: the approval
// page at 1280×800 and a phone's width, the approved and denied outcomes,
// the unknown code.
func TestConsoleCLIApprovalPage(t *testing.T) {
	dir := t.TempDir()
	// The service's warnings and errors (a 500's cause) are shown when the
	// test fails.
	logs := &testutil.SyncBuffer{}
	_, base := startAppLogging(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "0",
	}, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service logged:\n%s", logs)
		}
	})
	lctx, cancelLogins := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelLogins()

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()

	// Approve, without devices:lease.
	first := startCLILogin(t, lctx, base, filepath.Join(dir, "first"))
	if !strings.HasPrefix(first.page, base+"/#/cli?code=") {
		t.Fatalf("login sent the person to %s; want this service's console", first.page)
	}
	admDo(t, wait, "open the page login printed",
		chromedp.Navigate(first.page),
		chromedp.WaitVisible(chromedp.CSS(`.cli-decision button.primary`)))
	shown := admEval[string](t, wait, `document.getElementById('main').innerText`)
	for _, want := range []string{first.code, "phonefleet CLI console test", "build-box", "CLI on build-box", "waiting for your decision"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the page does not show %q:\n%s", want, shown)
		}
	}
	ticked := admEval[[]string](t, wait, `[...document.querySelectorAll('.cli-scopes input:checked')].map((i) => i.value)`)
	if !slices.Equal(ticked, []string{"devices:read", "devices:act", "devices:lease", "runs:start"}) {
		t.Errorf("ticked scopes: got %v; want the four asked for, which the local operator holds", ticked)
	}
	admCheckA11y(t, wait, "CLI approval page")
	testutil.Screenshot(t, wait, "cli-approve")
	admPhoneScreenshot(t, wait, "cli-approve-phone")
	admDo(t, wait, "untick devices:lease and approve",
		chromedp.Click(chromedp.CSS(`.cli-scopes input[value="devices:lease"]`)),
		chromedp.Click(chromedp.CSS(`.cli-decision button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`.cli-outcome[data-outcome="approve"]`)))
	if text := admEval[string](t, wait, `document.querySelector('.cli-outcome').textContent`); !strings.Contains(text, "Approved") {
		t.Errorf("outcome: got %q", text)
	}
	if text := admEval[string](t, wait, `document.getElementById('main').innerText`); strings.Contains(text, "null") || strings.Contains(text, "undefined") {
		t.Errorf("the approved outcome reads:\n%s", text)
	}
	admCheckA11y(t, wait, "CLI approval outcome")
	testutil.Screenshot(t, wait, "cli-approved")
	if err := first.result(t); err != nil {
		t.Fatalf("the approved login: %v\n%s", err, first.out)
	}
	creds, err := clisignin.Load(first.path)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", base+"/v1/api-keys/current", nil)
	req.Header.Set("Authorization", "Bearer "+creds.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		Scopes []string `json:"scopes"`
	}
	json.NewDecoder(resp.Body).Decode(&key)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !slices.Equal(key.Scopes, []string{"devices:read", "devices:act", "runs:start"}) {
		t.Fatalf("the key the page approved: got %d %v; want devices:read, devices:act, runs:start", resp.StatusCode, key.Scopes)
	}

	// Deny a second login from the page.
	second := startCLILogin(t, lctx, base, filepath.Join(dir, "second"))
	admDo(t, wait, "open the second login's page",
		chromedp.Navigate(second.page),
		chromedp.WaitVisible(chromedp.CSS(`.cli-decision button.danger`)),
		chromedp.Click(chromedp.CSS(`.cli-decision button.danger`)),
		chromedp.WaitVisible(chromedp.CSS(`.cli-outcome[data-outcome="deny"]`)))
	if text := admEval[string](t, wait, `document.getElementById('main').innerText`); !strings.Contains(text, "Denied.") ||
		strings.Contains(text, "null") || strings.Contains(text, "undefined") {
		t.Errorf("the denied outcome reads:\n%s", text)
	}
	admCheckA11y(t, wait, "CLI denial outcome")
	testutil.Screenshot(t, wait, "cli-denied")
	if err := second.result(t); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("the denied login: got %v; want it to say it was denied", err)
	}
	if _, err := clisignin.Load(second.path); err == nil {
		t.Fatal("the denied login stored credentials")
	}

	// An unknown code: the API's answer, and the form to type another.
	admDo(t, wait, "open an unknown code",
		chromedp.Navigate(base+"/#/cli?code=BBBB-BBBB"),
		chromedp.WaitVisible(chromedp.CSS(`#main .error`)),
		chromedp.WaitVisible(chromedp.CSS(`#cli-code`)))
	if text := admEval[string](t, wait, `document.querySelector('#main .error').textContent`); !strings.Contains(text, "not_found") {
		t.Errorf("unknown code: got %q; want the API's not_found", text)
	}
	admCheckA11y(t, wait, "CLI page, unknown code")
	testutil.Screenshot(t, wait, "cli-unknown-code")
	third := startCLILogin(t, lctx, base, filepath.Join(dir, "third"))
	admDo(t, wait, "type the third login's code in lower case",
		chromedp.SetValue(chromedp.CSS(`#cli-code`), strings.ToLower(third.code)),
		chromedp.Click(chromedp.CSS(`form.cli-code button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.cli-decision`)))
	if got := admEval[string](t, wait, `document.querySelector('.cli-code-value').textContent`); got != third.code {
		t.Errorf("after typing the code: the page shows %q; want %q", got, third.code)
	}
	cancelLogins()
	third.result(t)

	// The page's telemetry: its page views are readable by operators (the
	// local operator is one); the console sends them in batches.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/v1/console/events?type=page_view&limit=200")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var page struct {
			Events []struct {
				Page  string `json:"page"`
				Actor struct {
					UserID string `json:"userId"`
				} `json:"actor"`
			} `json:"events"`
		}
		json.Unmarshal(raw, &page)
		views := 0
		for _, e := range page.Events {
			if e.Page == "/cli" && e.Actor.UserID == domain.LocalOperator("").UserID {
				views++
			}
		}
		if views >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console's page views of /cli never reached GET /v1/console/events: %d %s", resp.StatusCode, raw)
		}
	}
}
