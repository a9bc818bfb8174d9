package service

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
)

// TestNotificationsTenancy: a person's notifications are theirs alone. The
// same subject in another organisation is another person; another person
// of the same organisation is too. Naming someone else's notification ids
// answers exactly as ids that name nothing and marks nothing; reading
// everything reads only one's own; preferences are per person and
// organisation.
func TestNotificationsTenancy(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startNotifyService(t, idp, "")
	call := checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)
	aud := "http://tenancy.test/mcp"
	alice := idp.Console(t, aud, "user_alice", "org_a", "admin")
	eve := idp.Console(t, aud, "user_eve", "org_a", "member")
	mallory := idp.Console(t, aud, "user_alice", "org_b", "admin")
	for _, tok := range []string{alice, eve, mallory} {
		notificationsOf(call, tok, "")
	}
	refusedFollowup(t, a, "org_a")
	var mine []map[string]any
	waitUntil(t, 10*time.Second, "alice's notification", func() (bool, error) {
		mine = notificationsOf(call, alice, "")
		return len(mine) == 1, nil
	})
	id := mine[0]["notificationId"].(string)

	for name, tok := range map[string]string{"another organisation's person with the same subject": mallory, "another person of the organisation": eve} {
		if ns := notificationsOf(call, tok, ""); len(ns) != 0 {
			t.Fatalf("%s lists %v", name, ns)
		}
		c := &tenancyClient{t: t, base: base, token: tok}
		st1, h1, b1 := c.do("POST", "/v1/notifications/read", fmt.Sprintf(`{"ids":[%q]}`, id))
		never := domain.NewID(domain.PrefixNotification)
		st2, h2, b2 := c.do("POST", "/v1/notifications/read", fmt.Sprintf(`{"ids":[%q]}`, never))
		if got, want := comparable(st1, h1, b1, []string{id, never}), comparable(st2, h2, b2, []string{id, never}); got != want || st1 != http.StatusOK {
			t.Fatalf("%s naming alice's id answers\n%s\nbut a never-existing id answers\n%s", name, got, want)
		}
		call(tok, "POST", "/v1/notifications/read", "", http.StatusOK)
		call(tok, "PATCH", "/v1/me/notification-preferences", `{"kinds":{"payment_followup_failed":{"console":false}}}`, http.StatusOK)
	}
	if unread := notificationsOf(call, alice, "?unread=true"); len(unread) != 1 || unread[0]["notificationId"] != id {
		t.Fatalf("alice's unread after the others read: %v", unread)
	}
	// Mallory's and Eve's preferences are not Alice's: her next one arrives.
	refusedFollowup(t, a, "org_a")
	waitUntil(t, 10*time.Second, "alice's second notification", func() (bool, error) {
		return len(notificationsOf(call, alice, "")) == 2, nil
	})
	prefs := call(alice, "GET", "/v1/me/notification-preferences", "", http.StatusOK)
	if prefs["email"] != nil || fmt.Sprint(prefs["channels"]) != "[console]" {
		t.Fatalf("alice's preferences on a deployment without SMTP: %v", prefs)
	}
	for _, k := range prefs["kinds"].([]any) {
		if k := k.(map[string]any); k["console"] != true || k["email"] != false {
			t.Fatalf("alice's preferences: %v", prefs)
		}
	}
	// Without SMTP, e-mail is not offered.
	e := call(alice, "PATCH", "/v1/me/notification-preferences", `{"email":"alice@example.com"}`, http.StatusBadRequest)["error"].(map[string]any)
	if e["code"] != string(domain.CodeInvalidArgument) || e["field"] != "email" {
		t.Fatalf("an address without SMTP: %v", e)
	}
	e = call(alice, "PATCH", "/v1/me/notification-preferences", `{"kinds":{"run_ended":{"email":true}}}`, http.StatusBadRequest)["error"].(map[string]any)
	if e["field"] != "kinds.run_ended.email" {
		t.Fatalf("e-mail on without SMTP: %v", e)
	}
}
