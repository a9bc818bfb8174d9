package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// TestPaymentsFollowups runs the operator's payment follow-up tools as an
// operator would: the follow-ups refused or given up are listed (text and
// -json), one is retried and one settled (each an event with the operator
// as actor), after which neither is listed; a second retry is refused
// wrong_state, a settle without -reason invalid_argument, and the family
// without a subcommand prints its usage.
func TestPaymentsFollowups(t *testing.T) {
	dbURL := testutil.DatabaseURL(t)
	env := []string{"DATABASE_URL=" + dbURL, "SERVICE_DATA_DIR=" + t.TempDir()}
	ctx := testutil.Context(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	org := domain.NewID(domain.PrefixOrganisation)
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	// Two subscription phones cancelled by their customer, and the
	// attempts of their follow-ups as the worker records them: one refused,
	// one given up.
	stuck := map[string]string{}
	for _, outcome := range []string{domain.FollowupRefused, domain.FollowupGaveUp} {
		ful := domain.NewID(domain.PrefixFulfilment)
		news, err := eventstore.Encode[domain.Event](domain.Events, org,
			domain.FulfilmentCreated{FulfilmentID: ful, OrgID: org, OrderID: domain.NewID(domain.PrefixOrder),
				Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}, Currency: "usd",
				UnitAmount: 2900, SubscriptionID: "sub_" + ful, At: at},
			domain.FulfilmentProvisioned{FulfilmentID: ful, DeviceID: "dev_" + ful, At: at},
			domain.FulfilmentCancelled{FulfilmentID: ful, Reason: domain.EndCustomerCancel, Notify: true, At: at})
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Append(ctx, domain.FulfilmentStream(ful), eventstore.NoStream, news...)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := store.Load(ctx, domain.FulfilmentStream(ful), app.Version)
		if err != nil {
			t.Fatal(err)
		}
		id := domain.PaymentFollowupID(evs[0].ID)
		f := domain.PaymentFollowup{FollowupID: id, FulfilmentID: ful, Action: domain.FollowupCancelSubscription, SubscriptionID: "sub_" + ful}
		attempts := 1
		if outcome == domain.FollowupGaveUp {
			attempts = domain.FollowupMaxAttempts
		}
		for n := 1; n <= attempts; n++ {
			res := domain.FollowupResult{Unavailable: true, Error: "payments: provider unavailable"}
			if outcome == domain.FollowupRefused {
				res = domain.FollowupResult{Refused: true, Error: "payments: provider refused the request (404 invalid_request_error)"}
			}
			news, err := eventstore.Encode[domain.Event](domain.Events, org, domain.DecidePaymentFollowup(f, n, at.Add(time.Duration(n)*time.Hour), res))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Append(ctx, domain.PaymentFollowupStream(id), int64(n-1), news...); err != nil {
				t.Fatal(err)
			}
		}
		stuck[outcome] = id
	}

	// The service warns in /healthz while they wait (its read model
	// catches up on its own: poll until it has).
	p := start(t, env...)
	defer p.stop(t)
	if w := healthWarning(t, p, func(w string) bool { return w != "" }); w != "payment_followups_stuck: 2 payment follow-up(s) refused or given up wait for the operator: phonefleet payments followups" {
		t.Errorf("healthz warning %q; want the two follow-ups counted", w)
	}

	out, err := runCmd(t, env, "payments", "followups")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, out)
	}
	for _, want := range []string{stuck[domain.FollowupRefused] + "  refused", stuck[domain.FollowupGaveUp] + "  failed",
		"404 invalid_request_error", "2 follow-up(s) wait for the operator"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	stdout, err := command(env, "payments", "followups", "-json").Output()
	if err != nil {
		t.Fatalf("-json: %v\n%s", err, stdout)
	}
	var doc struct {
		Followups []struct {
			FollowupID, Status, Outcome, OrgID, SubscriptionID string
			Attempts                                           int
		}
	}
	if err := json.Unmarshal(stdout, &doc); err != nil {
		t.Fatalf("-json: %v\n%s", err, stdout)
	}
	if len(doc.Followups) != 2 || doc.Followups[0].FollowupID != stuck[domain.FollowupRefused] || doc.Followups[0].Outcome != domain.FollowupRefused ||
		doc.Followups[1].Attempts != domain.FollowupMaxAttempts || doc.Followups[1].OrgID != org || doc.Followups[1].SubscriptionID == "" {
		t.Errorf("-json: %+v; want the refused one, then the one given up after %d attempts", doc.Followups, domain.FollowupMaxAttempts)
	}

	if out, err := runCmd(t, env, "payments", "followups", "settle", stuck[domain.FollowupRefused]); exitCodeOf(err) != 1 || !strings.Contains(out, "invalid_argument") {
		t.Errorf("settle without -reason: exit %d\n%s", exitCodeOf(err), out)
	}
	if out, err := runCmd(t, env, "payments", "followups", "retry", stuck[domain.FollowupGaveUp]); err != nil || !strings.Contains(out, "is due again (attempt 10") {
		t.Errorf("retry: %v\n%s", err, out)
	}
	if out, err := runCmd(t, env, "payments", "followups", "retry", stuck[domain.FollowupGaveUp]); exitCodeOf(err) != 1 || !strings.Contains(out, "wrong_state") {
		t.Errorf("a second retry: exit %d\n%s", exitCodeOf(err), out)
	}
	if out, err := runCmd(t, env, "payments", "followups", "settle", stuck[domain.FollowupRefused], "-reason", "cancelled in the dashboard"); err != nil ||
		!strings.Contains(out, "settled by hand: cancelled in the dashboard") {
		t.Errorf("settle: %v\n%s", err, out)
	}
	for outcome, typ := range map[string]string{domain.FollowupGaveUp: "payment.followup_retried", domain.FollowupRefused: "payment.followup_settled"} {
		evs, err := store.Load(ctx, domain.PaymentFollowupOperatorStream(stuck[outcome]), 1)
		if err != nil || len(evs) != 1 || evs[0].Type != typ {
			t.Fatalf("operator stream of the %s follow-up: %+v, %v; want one %s", outcome, evs, err, typ)
		}
		if m, _ := evs[0].DecodeMetadata(); m.ActorKind != "operator" {
			t.Errorf("%s recorded by %+v; want the operator", typ, m)
		}
	}
	if out, err := runCmd(t, env, "payments", "followups"); err != nil || !strings.Contains(out, "no payment follow-up waits for the operator") {
		t.Errorf("list after retry and settle: %v\n%s", err, out)
	}
	if w := healthWarning(t, p, func(w string) bool { return w == "" }); w != "" {
		t.Errorf("healthz warning %q after retry and settle; want none", w)
	}
	if out, err := runCmd(t, env, "payments"); exitCodeOf(err) != 2 || !strings.Contains(out, "phonefleet payments followups settle ID -reason TEXT") {
		t.Errorf("no subcommand: exit %d\n%s", exitCodeOf(err), out)
	}
}

// healthWarning polls /healthz (status 200 ok) until done accepts its
// warnings ("code: message", one a line; "" for none) or a minute passes,
// and returns the last seen.
func healthWarning(t *testing.T, p *program, done func(string) bool) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		status, body := p.get(t, "/healthz")
		var h struct {
			Status   string
			Warnings []struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &h); err != nil || status != 200 || h.Status != "ok" {
			t.Fatalf("healthz: %d %s; want 200 ok (a warning does not degrade the service)", status, body)
		}
		var ws []string
		for _, w := range h.Warnings {
			ws = append(ws, w.Code+": "+w.Message)
		}
		if last = strings.Join(ws, "\n"); done(last) {
			return last
		}
	}
	return last
}
