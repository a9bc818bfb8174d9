package service

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/copilot"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestNotificationsCopilotAllowance: a hosted service whose price list
// includes 1000 copilot tokens per subscribed device, one subscription,
// the copilot on an injected clock answering through a scripted model.
// 800 tokens tell nobody; 850 (past four fifths) tell each admin and the
// member whose turn it was once, copilot_near_limit; 1000 tell them once,
// copilot_exhausted; with a second subscription the allowance is under the
// thresholds again, and crossing them again that month tells nobody more;
// the next month the first crossing is told again. Another member and
// another organisation's admin are told nothing. The read model rebuilds
// equal.
func TestNotificationsCopilotAllowance(t *testing.T) {
	// The price list: the embedded default with 1000 tokens a device.
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "domain", "catalogdata", "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	var catalog map[string]any
	if err := json.Unmarshal(raw, &catalog); err != nil {
		t.Fatal(err)
	}
	catalog["copilotTokensPerDevice"] = 1000
	raw, _ = json.Marshal(catalog)
	catalogFile := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(catalogFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startCopilotServiceWith(t, map[string]string{"SERVICE_CATALOG_FILE": catalogFile})
	ctx := testutil.Context(t)
	// In the past of the wall clock: a trigger is due at its event's time.
	clock := testutil.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, clock.Now())
	recordFulfilment(t, s.a, "org_b", domain.BillingSubscription, clock.Now())

	perDevice := int64(1000)
	cp, h := runCopilot(t, s, copilot.Config{Metered: true, TokensPerDevice: &perDevice, Now: clock.Now})
	authM := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_m", Role: domain.RoleMember, Scopes: domain.AllScopes}

	// The people, known to notifications from a first visit: admins
	// user_a and user_c, members user_m (whose turns spend tokens) and
	// user_x, and org_b's admin.
	people := map[string]string{
		"user_a": s.person,
		"user_c": s.idp.Console(t, s.aud, "user_c", "org_a", "admin"),
		"user_m": s.idp.Console(t, s.aud, "user_m", "org_a", "member"),
		"user_x": s.idp.Console(t, s.aud, "user_x", "org_a", "member"),
		"org_b":  s.idp.Console(t, s.aud, "user_a", "org_b", "admin"),
	}
	for _, tok := range people {
		notificationsOf(s.call, tok, "")
	}
	// The preferences know the two kinds (the answer is checked against the contract).
	for _, kind := range []string{domain.NotifyCopilotNearLimit, domain.NotifyCopilotExhausted} {
		p := s.call(people["user_c"], "PATCH", "/v1/me/notification-preferences", `{"kinds":{"`+kind+`":{"console":true}}}`, http.StatusOK)
		if b, _ := json.Marshal(p); !strings.Contains(string(b), kind) {
			t.Fatalf("preferences after naming %s: %s", kind, b)
		}
	}

	var threadID string
	spent := 0 // answers so far
	spend := func(in, out int) {
		t.Helper()
		s.model.play(func(req modelRequest, w *modelStream) {
			w.text("Done.")
			w.done(in, out)
		})
		p, err := h.PostMessage.Handle(ctx, copilot.PostMessage{Auth: authM, ThreadID: threadID,
			DeviceID: map[bool]string{true: s.device}[threadID == ""], Message: "go on"})
		if err != nil {
			t.Fatal(err)
		}
		threadID = p.ThreadID
		spent++
		for deadline := time.Now().Add(60 * time.Second); cp.Running(threadID); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the turn never ended")
			}
		}
		// The fan-out has decided every answer so far (each recorded one).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var answers, decided int
			if err := s.a.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM copilot_tokens),
				(SELECT count(*) FROM notification_triggers WHERE kind = $1 AND status = 'done')`,
				domain.CopilotTokensTrigger).Scan(&answers, &decided); err != nil {
				t.Fatal(err)
			}
			if answers == spent && decided == spent {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the fan-out decided %d of %d answers: %v", decided, answers, notificationRows(t, s.a))
			}
		}
	}
	// told checks how many copilot notices of each kind each person has.
	told := func(what string, near, exhausted int) {
		t.Helper()
		for who, tok := range people {
			ns := notificationsOf(s.call, tok, "")
			wantNear, wantExhausted := near, exhausted
			if who == "user_x" || who == "org_b" {
				wantNear, wantExhausted = 0, 0
			}
			n, e := ofKind(ns, domain.NotifyCopilotNearLimit), ofKind(ns, domain.NotifyCopilotExhausted)
			if len(n) != wantNear || len(e) != wantExhausted {
				t.Errorf("%s: %s has %d near-limit and %d exhausted notices; want %d and %d", what, who, len(n), len(e), wantNear, wantExhausted)
			}
			for _, x := range append(n, e...) {
				sub := x["subject"].(map[string]any)
				if sub["threadId"] != threadID || !strings.HasPrefix(x["title"].(string), "The copilot allowance") {
					t.Errorf("%s: %s's notice %v; want its title and the thread in its subject", what, who, x)
				}
			}
		}
	}

	spend(700, 100)
	told("800 of 1000", 0, 0)
	spend(30, 20)
	told("850 of 1000", 1, 0)
	if n := ofKind(notificationsOf(s.call, people["user_m"], ""), domain.NotifyCopilotNearLimit); len(n) == 1 &&
		n[0]["subject"].(map[string]any)["period"] != "2026-03-01" {
		t.Errorf("near-limit notice %v; want the period 2026-03-01 in its subject", n[0])
	}
	spend(100, 50)
	told("1000 of 1000", 1, 1)

	// A second subscription: 1000 of 2000. Past four fifths and spent
	// again this month: nobody is told again.
	recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, clock.Now())
	if al, err := h.GetAllowance.Handle(ctx, copilot.GetAllowance{Auth: authM}); err != nil || al.Included != 2000 || al.NearLimit || al.Exhausted {
		t.Fatalf("after a second subscription: %+v, %v; want 1000 of 2000", al, err)
	}
	spend(500, 200)
	told("1700 of 2000", 1, 1)
	spend(200, 100)
	told("2000 of 2000", 1, 1)

	// The next month: told again.
	clock.Advance(18*24*time.Hour - 9*time.Hour) // 2026-04-01 00:00
	spend(1000, 700)
	told("next month, 1700 of 2000", 2, 1)
	spend(200, 100)
	told("next month, 2000 of 2000", 2, 2)

	before := notificationRows(t, s.a)
	if err := s.a.runner.Rebuild(ctx, projections.NotificationsName, nil); err != nil {
		t.Fatal(err)
	}
	if after := notificationRows(t, s.a); strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("rebuild changed the read model:\nbefore %v\nafter  %v", before, after)
	}
}

// TestNotificationsCopilotAllowanceUnmetered: on a local deployment
// (nothing meters the copilot) answers past the price list's allowance
// for its one subscription tell nobody,
// though every answer is decided by the fan-out.
func TestNotificationsCopilotAllowanceUnmetered(t *testing.T) {
	s := startCopilotServiceWith(t, map[string]string{"SERVICE_MODE": "local"})
	ctx := testutil.Context(t)
	clock := testutil.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, clock.Now())
	notificationsOf(s.call, s.person, "") // user_a, an admin, is known
	cp, h := runCopilot(t, s, copilot.Config{Now: clock.Now})
	auth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	var threadID string
	for _, n := range []int{1_000_000, 700_000, 500_000} { // past the default price list's 2,000,000 a device
		s.model.play(func(req modelRequest, w *modelStream) {
			w.text("Done.")
			w.done(n, 0)
		})
		p, err := h.PostMessage.Handle(ctx, copilot.PostMessage{Auth: auth, ThreadID: threadID,
			DeviceID: map[bool]string{true: s.device}[threadID == ""], Message: "go on"})
		if err != nil {
			t.Fatal(err)
		}
		threadID = p.ThreadID
		for deadline := time.Now().Add(60 * time.Second); cp.Running(threadID); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the turn never ended")
			}
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var decided int
		if err := s.a.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notification_triggers WHERE kind = $1 AND status = 'done'`,
			domain.CopilotTokensTrigger).Scan(&decided); err != nil {
			t.Fatal(err)
		}
		if decided == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fan-out decided %d of 3 answers", decided)
		}
	}
	ns := notificationsOf(s.call, s.person, "")
	if n, e := ofKind(ns, domain.NotifyCopilotNearLimit), ofKind(ns, domain.NotifyCopilotExhausted); len(n)+len(e) != 0 {
		t.Fatalf("unmetered: %v %v; want no copilot notice", n, e)
	}
}
