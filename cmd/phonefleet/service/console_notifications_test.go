package service

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
	"phonefleet/testutil/smtptest"
)

// TestConsoleNotifications drives the console in headless Chromium, in
// local mode (the local operator is the signed-in person) with a real SMTP
// server: the bell's unread count moves on its own when a run the person
// started is parked; the notifications page lists it; marking it read
// clears the bell; the preferences switch a channel off and save the
// e-mail address, as the API then answers.
func TestConsoleNotifications(t *testing.T) {
	mail := smtptest.Start(t)
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's log:\n%s", logs.String())
		}
	})
	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_SMTP_URL"] = mail.URL("phonefleet@notify.test")
	a, base := startAppLogging(t, env, slog.New(slog.NewTextHandler(logs, nil)))
	checked := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		return checked("console-test", method, path, body, want)
	}
	ctx := testutil.Context(t)

	p := newBrowserPage(t, base)
	p.open("#/fleet")
	p.until("the bell with no unread notification", `document.getElementById('bell') && document.getElementById('bell').dataset.unread === '0'`)

	// The person starts a run; its worker parks it for a person.
	var started runs.StartedRun
	waitUntil(t, 60*time.Second, "a free device", func() (bool, error) {
		var err error
		started, err = a.app.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: domain.LocalOperator(a.orgID), Goal: "sign in to the bank",
			Executor: domain.ExecutorExternal})
		if e := domain.AsError(err); err != nil && e.Code == domain.CodeDeviceUnavailable && e.Retryable != nil && *e.Retryable {
			return false, nil
		}
		return err == nil, err
	})
	_, tok, _ := strings.Cut(started.VrxBaseURL, "/vrx/")
	if _, err := a.app.Runs.RunNeedsUser.Handle(ctx, runs.RunNeedsUser{Access: runs.RunAccess{Token: tok}, Reason: "a captcha"}); err != nil {
		t.Fatal(err)
	}
	// No reload: the bell finds it by itself.
	p.until("the bell counting one unread notification", `document.getElementById('bell').dataset.unread === '1'`)
	var label string
	p.eval(`document.getElementById('bell').getAttribute('aria-label')`, &label)
	if label != "Notifications, 1 unread" {
		t.Fatalf("the bell's label: %q", label)
	}
	p.shot("notifications-bell-unread")

	p.do("open the notifications", chromedp.Click(chromedp.CSS(`#bell`)))
	p.until("the parked run's notification", `!!document.querySelector('li.notification.unread[data-kind="run_needs_user"]')`)
	if txt := p.mainText(); !strings.Contains(txt, "A run needs you") || !strings.Contains(txt, "a captcha") || !strings.Contains(txt, "1 unread") {
		t.Fatalf("the notifications page: %s", txt)
	}
	admCheckA11y(t, p.ctx, "the notifications page")
	p.shot("notifications-page")

	p.do("mark it read", chromedp.Click(chromedp.CSS(`li.notification.unread button`)))
	p.until("the notification read and the bell cleared",
		`!!document.querySelector('li.notification.read[data-kind="run_needs_user"]') && document.getElementById('bell').dataset.unread === '0'`)
	page := call("GET", "/v1/notifications?unread=true", "", http.StatusOK)
	if page["unreadCount"] != float64(0) {
		t.Fatalf("after marking read in the console, the API says %v unread", page["unreadCount"])
	}

	// Preferences: an address, and run_ended off on both channels.
	p.do("fill in the preferences",
		chromedp.SetValue(chromedp.CSS(`#notify-email`), "operator@example.com"),
		chromedp.Click(chromedp.CSS(`input[name="run_ended.console"]`)),
		chromedp.Click(chromedp.CSS(`input[name="run_ended.email"]`)),
		chromedp.Click(chromedp.CSS(`form.notification-preferences button[type="submit"]`)))
	p.until("the preferences saved", `document.querySelector('form.notification-preferences [role="status"]').textContent === 'Saved.'`)
	p.shot("notifications-preferences-saved")
	prefs := call("GET", "/v1/me/notification-preferences", "", http.StatusOK)
	if prefs["email"] != "operator@example.com" {
		t.Fatalf("preferences after saving: %v", prefs)
	}
	for _, k := range prefs["kinds"].([]any) {
		k := k.(map[string]any)
		on := k["kind"] != domain.NotifyRunEnded
		if k["console"] != on || k["email"] != on {
			t.Fatalf("preferences after saving: %v", prefs)
		}
	}

	p.noErrors()
}
