package service

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/smtptest"
)

// startNotifyService runs the hosted service with SERVICE_SMTP_URL pointing
// at a real SMTP server the test starts.
func startNotifyService(t *testing.T, idp *identitytest.IdP, smtpURL string) (*App, string) {
	t.Helper()
	env := map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               "http://tenancy.test",
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
		"SERVICE_SMTP_URL":                 smtpURL,
	}
	return startApp(t, env)
}

// notificationsOf lists a person's notifications (checked against the
// contract) and returns them.
func notificationsOf(call func(token, method, path, body string, want int) map[string]any, token, query string) []map[string]any {
	page := call(token, "GET", "/v1/notifications"+query, "", http.StatusOK)
	var out []map[string]any
	for _, n := range page["notifications"].([]any) {
		out = append(out, n.(map[string]any))
	}
	return out
}

func ofKind(ns []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, n := range ns {
		if n["kind"] == kind {
			out = append(out, n)
		}
	}
	return out
}

// refusedFollowup records, through the application's command the payment
// follow-up reaction records with, the domain's decision on a refund the
// payment provider refused (what the reaction records when the provider
// answers 4xx).
func refusedFollowup(t *testing.T, a *App, org string) string {
	t.Helper()
	f := domain.PaymentFollowup{OrgID: org, FollowupID: "pfu_" + strings.TrimPrefix(domain.NewID("x"), "x_"),
		FulfilmentID: domain.NewID(domain.PrefixFulfilment), Action: domain.FollowupRefund, PaymentIntentID: "pi_123",
		Amount: 4900, Currency: "eur"}
	ev := domain.DecidePaymentFollowup(f, 1, time.Now(), domain.FollowupResult{Refused: true, Error: "charge already refunded"})
	if ev.Outcome != domain.FollowupRefused {
		t.Fatalf("decision %+v; want refused", ev)
	}
	if _, err := a.app.Provisioning.RecordPaymentFollowup.Handle(testutil.Context(t), provisioning.RecordPaymentFollowup{OrgID: org, Event: ev}); err != nil {
		t.Fatal(err)
	}
	return f.FulfilmentID
}

// TestNotificationsEndToEnd drives the whole service: a run a member
// started and parked for a person reaches that member's notifications
// (and nobody else's); reading marks it read; a refused payment follow-up
// reaches every admin once, in the console and by e-mail to a real SMTP
// server; preferences switch each channel off; an API key and an OAuth
// app are refused with the envelope; every answer is checked against the
// OpenAPI document.
func TestNotificationsEndToEnd(t *testing.T) {
	mail := smtptest.Start(t)
	idp := identitytest.New(t)
	a, base := startNotifyService(t, idp, mail.URL("phonefleet@notify.test"))
	call := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	aud := "http://tenancy.test/mcp"
	alice := idp.Console(t, aud, "user_alice", "org_a", "admin")
	carol := idp.Console(t, aud, "user_carol", "org_a", "admin")
	bob := idp.Console(t, aud, "user_bob", "org_a", "member")
	// Dave is an admin of another organisation with the same subject as
	// one of org_a's people: nothing of org_a may reach him.
	dave := idp.Console(t, aud, "user_alice", "org_b", "admin")
	ctx := testutil.Context(t)

	// Everyone opens the console once (the bell lists their notifications).
	for _, tok := range []string{alice, carol, bob, dave} {
		if ns := notificationsOf(call, tok, ""); len(ns) != 0 {
			t.Fatalf("a fresh person has notifications: %v", ns)
		}
	}
	prefs := call(alice, "PATCH", "/v1/me/notification-preferences", `{"email":"alice@example.com"}`, http.StatusOK)
	if prefs["email"] != "alice@example.com" || fmt.Sprint(prefs["channels"]) != "[console email]" {
		t.Fatalf("alice's preferences: %v", prefs)
	}
	call(carol, "PATCH", "/v1/me/notification-preferences", `{"email":"carol@example.com"}`, http.StatusOK)
	call(bob, "PATCH", "/v1/me/notification-preferences", `{"email":"bob@example.com"}`, http.StatusOK)
	call(dave, "PATCH", "/v1/me/notification-preferences", `{"email":"dave@example.com"}`, http.StatusOK)

	t.Run("a parked run's starter sees it, and reading marks it read", func(t *testing.T) {
		ids, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: "org_a", Backend: "sim", Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		started := call(bob, "POST", "/v1/runs", fmt.Sprintf(`{"deviceId":%q,"goal":"sign in","executor":"external"}`, ids[0]), http.StatusCreated)
		_, tok, _ := strings.Cut(started["vrxBaseUrl"].(string), "/vrx/")
		if _, err := a.app.Runs.RunNeedsUser.Handle(ctx, runs.RunNeedsUser{Access: runs.RunAccess{Token: tok}, Reason: "captcha"}); err != nil {
			t.Fatal(err)
		}
		parkedAt := time.Now()
		var parked []map[string]any
		waitUntil(t, 10*time.Second, "bob's run_needs_user notification", func() (bool, error) {
			parked = ofKind(notificationsOf(call, bob, ""), domain.NotifyRunNeedsUser)
			return len(parked) == 1, nil
		})
		t.Logf("the starter's list showed the parked run %v after it was parked (a figure, not a bound)", time.Since(parkedAt).Round(time.Millisecond))
		n := parked[0]
		subject := n["subject"].(map[string]any)
		if subject["runId"] != started["runId"] || subject["deviceId"] != ids[0] || n["read"] != false || n["readAt"] != nil ||
			!strings.Contains(n["body"].(string), "captcha") {
			t.Fatalf("the notification: %v", n)
		}
		for name, tok := range map[string]string{"alice": alice, "carol": carol, "dave": dave} {
			if ns := ofKind(notificationsOf(call, tok, ""), domain.NotifyRunNeedsUser); len(ns) != 0 {
				t.Fatalf("%s sees bob's parked run: %v", name, ns)
			}
		}
		if unread := notificationsOf(call, bob, "?unread=true"); len(unread) != 1 {
			t.Fatalf("bob's unread: %v", unread)
		}
		res := call(bob, "POST", "/v1/notifications/read", fmt.Sprintf(`{"ids":[%q]}`, n["notificationId"]), http.StatusOK)
		if res["unreadCount"] != float64(0) {
			t.Fatalf("after reading: %v", res)
		}
		after := ofKind(notificationsOf(call, bob, ""), domain.NotifyRunNeedsUser)
		if len(after) != 1 || after[0]["read"] != true || after[0]["readAt"] == nil {
			t.Fatalf("after reading, the notification: %v", after)
		}
		if unread := notificationsOf(call, bob, "?unread=true"); len(unread) != 0 {
			t.Fatalf("bob's unread after reading: %v", unread)
		}
		// Bob cancels his own run: he ended it, so no run_ended for him.
		call(bob, "POST", "/v1/runs/"+started["runId"].(string)+"/cancel", "", http.StatusOK)
	})

	t.Run("a refused payment follow-up reaches every admin once, by e-mail too", func(t *testing.T) {
		ful := refusedFollowup(t, a, "org_a")
		for _, who := range []struct{ name, token, addr string }{{"alice", alice, "alice@example.com"}, {"carol", carol, "carol@example.com"}} {
			waitUntil(t, 10*time.Second, who.name+"'s e-mail", func() (bool, error) { return len(mail.To(who.addr)) >= 1, nil })
			ns := ofKind(notificationsOf(call, who.token, ""), domain.NotifyPaymentFollowupFailed)
			if len(ns) != 1 || ns[0]["subject"].(map[string]any)["fulfilmentId"] != ful {
				t.Fatalf("%s's payment notifications: %v", who.name, ns)
			}
			m := mail.To(who.addr)[0]
			if m.Header.Get("Message-Id") != "<"+ns[0]["notificationId"].(string)+"@phonefleet>" ||
				m.Header.Get("X-Phonefleet-Idempotency-Key") != ns[0]["notificationId"].(string)+"@phonefleet" ||
				!strings.Contains(m.Header.Get("Subject"), "payment follow-up") || !strings.Contains(string(m.Body), ful) ||
				m.From != "phonefleet@notify.test" {
				t.Fatalf("%s's e-mail: %v\n%s", who.name, m.Header, m.Body)
			}
		}
		// Settle: the e-mail reaction has recorded every attempt; nothing
		// more arrives, and the member and the other organisation got nothing.
		waitUntil(t, 10*time.Second, "every e-mail recorded", func() (bool, error) {
			var pending int
			err := a.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE email_status = 'pending'`).Scan(&pending)
			return pending == 0, err
		})
		for _, addr := range []string{"alice@example.com", "carol@example.com"} {
			if n := len(mail.To(addr)); n != 1 {
				t.Fatalf("%s got %d e-mails; want exactly 1", addr, n)
			}
		}
		// Bob's one e-mail is his parked run (none for the run he ended
		// himself); Dave, of another organisation, got none.
		if bobs := mail.To("bob@example.com"); len(bobs) != 1 || !strings.Contains(bobs[0].Header.Get("Subject"), "A run needs you") {
			t.Fatalf("the member's e-mails: %d, want only his parked run's", len(bobs))
		}
		if n := len(mail.To("dave@example.com")); n != 0 {
			t.Fatalf("another organisation's admin got %d e-mails", n)
		}
		if ns := ofKind(notificationsOf(call, bob, ""), domain.NotifyPaymentFollowupFailed); len(ns) != 0 {
			t.Fatalf("a member sees a payment follow-up: %v", ns)
		}
		if ns := notificationsOf(call, dave, ""); len(ns) != 0 {
			t.Fatalf("another organisation's admin sees org_a's notifications: %v", ns)
		}
	})

	t.Run("preferences switch channels off", func(t *testing.T) {
		// Carol keeps the console and drops e-mail; Alice the reverse.
		p := call(carol, "PATCH", "/v1/me/notification-preferences", `{"kinds":{"payment_followup_failed":{"email":false}}}`, http.StatusOK)
		for _, k := range p["kinds"].([]any) {
			k := k.(map[string]any)
			if want := k["kind"] != domain.NotifyPaymentFollowupFailed; k["email"] != want || k["console"] != true {
				t.Fatalf("carol's preferences: %v", p)
			}
		}
		call(alice, "PATCH", "/v1/me/notification-preferences", `{"kinds":{"payment_followup_failed":{"console":false}}}`, http.StatusOK)
		got := call(alice, "GET", "/v1/me/notification-preferences", "", http.StatusOK)
		if fmt.Sprint(got["kinds"]) != fmt.Sprint(call(alice, "GET", "/v1/me/notification-preferences", "", http.StatusOK)["kinds"]) {
			t.Fatal("preferences are not stable")
		}
		ful := refusedFollowup(t, a, "org_a")
		waitUntil(t, 10*time.Second, "alice's second e-mail", func() (bool, error) { return len(mail.To("alice@example.com")) == 2, nil })
		waitUntil(t, 10*time.Second, "carol's second console notification", func() (bool, error) {
			return len(ofKind(notificationsOf(call, carol, ""), domain.NotifyPaymentFollowupFailed)) == 2, nil
		})
		waitUntil(t, 10*time.Second, "every e-mail recorded", func() (bool, error) {
			var pending int
			err := a.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE email_status = 'pending'`).Scan(&pending)
			return pending == 0, err
		})
		if n := len(mail.To("carol@example.com")); n != 1 {
			t.Fatalf("carol switched e-mail off but has %d e-mails; want the first only", n)
		}
		if !strings.Contains(string(mail.To("alice@example.com")[1].Body), ful) {
			t.Fatal("alice's second e-mail is not about the second follow-up")
		}
		if ns := ofKind(notificationsOf(call, alice, ""), domain.NotifyPaymentFollowupFailed); len(ns) != 1 {
			t.Fatalf("alice switched the console off but sees %d payment notifications; want the first only", len(ns))
		}
	})

	t.Run("read everything before a cursor", func(t *testing.T) {
		page := call(carol, "GET", "/v1/notifications?limit=1", "", http.StatusOK)
		if page["unreadCount"] != float64(2) || page["nextBefore"] == nil {
			t.Fatalf("carol's first page: %v", page)
		}
		newest := page["notifications"].([]any)[0].(map[string]any)
		res := call(carol, "POST", "/v1/notifications/read", fmt.Sprintf(`{"before":%q,"beforeId":%q}`, page["nextBefore"], page["nextBeforeId"]), http.StatusOK)
		if res["unreadCount"] != float64(1) {
			t.Fatalf("after reading before the cursor: %v", res)
		}
		unread := notificationsOf(call, carol, "?unread=true")
		if len(unread) != 1 || unread[0]["notificationId"] != newest["notificationId"] {
			t.Fatalf("carol's unread: %v; want only the newest", unread)
		}
		next := call(carol, "GET", fmt.Sprintf("/v1/notifications?limit=1&before=%s&beforeId=%s", page["nextBefore"], page["nextBeforeId"]), "", http.StatusOK)
		if ns := next["notifications"].([]any); len(ns) != 1 || ns[0].(map[string]any)["read"] != true {
			t.Fatalf("carol's second page: %v", next)
		}
		if res := call(carol, "POST", "/v1/notifications/read", "", http.StatusOK); res["unreadCount"] != float64(0) {
			t.Fatalf("after reading everything: %v", res)
		}
	})

	t.Run("refusals use the envelope", func(t *testing.T) {
		keyBody := call(alice, "POST", "/v1/api-keys", `{"name":"k","scopes":["devices:read"]}`, http.StatusCreated)
		key := keyBody["token"].(string)
		app := idp.App(t, aud, "user_alice", "org_a", "client_x")
		idp.SetRole("user_alice", "org_a", "admin")
		for _, r := range []struct{ method, path, body string }{{"GET", "/v1/notifications", ""}, {"POST", "/v1/notifications/read", ""},
			{"GET", "/v1/me/notification-preferences", ""}, {"PATCH", "/v1/me/notification-preferences", `{"email":""}`}} {
			e := call(key, r.method, r.path, r.body, http.StatusForbidden)["error"].(map[string]any)
			if e["code"] != string(domain.CodePermissionDenied) {
				t.Fatalf("%s %s with an API key: %v", r.method, r.path, e)
			}
			e = call(app, r.method, r.path, r.body, http.StatusForbidden)["error"].(map[string]any)
			if e["code"] != string(domain.CodePermissionDenied) || !strings.Contains(e["message"].(string), "the console") {
				t.Fatalf("%s %s with an OAuth app: %v", r.method, r.path, e)
			}
		}
		for _, bad := range []struct{ method, path, body, field string }{
			{"GET", "/v1/notifications?limit=0", "", "limit"},
			{"GET", "/v1/notifications?unread=yes", "", "unread"},
			{"GET", "/v1/notifications?before=yesterday", "", "before"},
			{"GET", "/v1/notifications?before=2026-01-01T00:00:00Z&beforeId=abc", "", "beforeId"},
			{"POST", "/v1/notifications/read", `{"ids":["nope"]}`, "ids"},
			{"POST", "/v1/notifications/read", `{"ids":[],"before":"2026-01-01T00:00:00Z"}`, "ids"},
			{"PATCH", "/v1/me/notification-preferences", `{"email":"not an address"}`, "email"},
			{"PATCH", "/v1/me/notification-preferences", `{"kinds":{"weather":{"email":false}}}`, "kinds.weather"},
			{"PATCH", "/v1/me/notification-preferences", `{"kinds":{"run_ended":{"pager":false}}}`, "kinds.run_ended.pager"},
		} {
			e := call(alice, bad.method, bad.path, bad.body, http.StatusBadRequest)["error"].(map[string]any)
			if e["code"] != string(domain.CodeInvalidArgument) || e["field"] != bad.field {
				t.Fatalf("%s %s %s: %v; want invalid_argument on %s", bad.method, bad.path, bad.body, e, bad.field)
			}
		}
	})

	t.Run("the read model rebuilds equal", func(t *testing.T) {
		before := notificationRows(t, a)
		if len(before) < 10 {
			t.Fatalf("only %d rows to compare", len(before))
		}
		if err := a.runner.Rebuild(ctx, projections.NotificationsName, nil); err != nil {
			t.Fatal(err)
		}
		if after := notificationRows(t, a); strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Fatalf("rebuild changed the read model:\nbefore %v\nafter  %v", before, after)
		}
		// Nothing was raised or sent again by the rebuild.
		if n := len(mail.Messages()); n != 4 {
			t.Fatalf("after the rebuild the SMTP server holds %d messages; want the 4 sent before", n)
		}
	})
}

// notificationRows dumps the notifications read model as text.
func notificationRows(t *testing.T, a *App) []string {
	t.Helper()
	var out []string
	for _, q := range []string{`SELECT t::text FROM notification_triggers t ORDER BY trigger_key`,
		`SELECT n::text FROM notifications n ORDER BY notification_id`,
		`SELECT p::text FROM notification_people p ORDER BY org_id, user_id`} {
		rows, err := a.db.Pool.Query(testutil.Context(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		rows.Close()
	}
	return out
}

// TestRefusedRefundReachesEveryAdminByEmail drives the whole chain with
// the real payment provider's API (stripe-mock) behind a proxy that
// refuses refunds as Stripe does (400, charge already refunded): an admin
// returns a paid day pass, the payment follow-up reaction asks for the
// refund and records it refused, and every admin of the organisation —
// and nobody else — is told once, in the console and by e-mail to a real
// SMTP server.
func TestRefusedRefundReachesEveryAdminByEmail(t *testing.T) {
	mock, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	var refunds atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(mock)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/refunds" {
			refunds.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}`))
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(provider.Close)
	catalogFile := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(catalogFile, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	mail := smtptest.Start(t)
	idp := identitytest.New(t)
	a, base := startApp(t, map[string]string{
		"SERVICE_MODE": "hosted", "SERVICE_ADDR": "127.0.0.1:0", "DATABASE_URL": testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR": t.TempDir(), "SERVICE_PUBLIC_URL": "http://tenancy.test", "SERVICE_OAUTH_ISSUER": idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL": idp.JWKSURL, "SERVICE_OAUTH_ROLE_URL": idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000", "SERVICE_RATE_LIMIT_ANONYMOUS": "100000", "SERVICE_SIM_DEVICES": "0",
		"SERVICE_STRIPE_SECRET_KEY": "sk_test_notify", "SERVICE_STRIPE_API_BASE": provider.URL,
		"SERVICE_STRIPE_WEBHOOK_SECRET": e2eStripeSecret, "SERVICE_CATALOG_FILE": catalogFile,
		"SERVICE_SMTP_URL": mail.URL("phonefleet@notify.test"),
	})
	call := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	aud := "http://tenancy.test/mcp"
	people := []struct{ token, addr string }{
		{idp.Console(t, aud, "user_alice", "org_n", "admin"), "alice@example.com"},
		{idp.Console(t, aud, "user_carol", "org_n", "admin"), "carol@example.com"},
		{idp.Console(t, aud, "user_bob", "org_n", "member"), "bob@example.com"},
		{idp.Console(t, aud, "user_dave", "org_m", "admin"), "dave@example.com"},
	}
	for _, p := range people {
		call(p.token, "PATCH", "/v1/me/notification-preferences", fmt.Sprintf(`{"email":%q}`, p.addr), http.StatusOK)
	}
	ctx := testutil.Context(t)
	order, ful := openTestOrder(t, a, "org_n", domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay})
	if r, err := a.app.Provisioning.ReceiveProviderEvent.Handle(ctx, signed(t, paidSessionEvent(t, "org_n", order), e2eStripeSecret)); err != nil ||
		r.Outcome != provisioning.ProviderEventApplied {
		t.Fatalf("payment: %+v, %v", r, err)
	}
	call(people[0].token, "POST", "/v1/fulfilments/"+ful+"/return", "", http.StatusOK)

	for _, p := range people[:2] {
		waitUntil(t, 30*time.Second, p.addr+"'s e-mail", func() (bool, error) { return len(mail.To(p.addr)) == 1, nil })
		ns := ofKind(notificationsOf(call, p.token, ""), domain.NotifyPaymentFollowupFailed)
		if len(ns) != 1 || ns[0]["subject"].(map[string]any)["fulfilmentId"] != ful || !strings.Contains(ns[0]["body"].(string), "refused") {
			t.Fatalf("%s's notifications: %v", p.addr, ns)
		}
	}
	waitUntil(t, 10*time.Second, "every e-mail recorded", func() (bool, error) {
		var pending int
		err := a.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE email_status = 'pending'`).Scan(&pending)
		return pending == 0, err
	})
	if n := refunds.Load(); n != 1 {
		t.Fatalf("the provider was asked for %d refunds; want 1 (a refusal is not retried)", n)
	}
	if n := len(mail.Messages()); n != 2 {
		t.Fatalf("the SMTP server holds %d messages; want one for each admin", n)
	}
	for _, p := range people[2:] {
		if ns := notificationsOf(call, p.token, ""); len(ns) != 0 {
			t.Fatalf("%s (a member, or another organisation's admin) got %v", p.addr, ns)
		}
	}
}
