package service

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/copilot"
	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/chat"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// recordFulfilment records a live (provisioned) fulfilment of orgID billed
// as billing, as the payment provider's webhook would once paid, and
// returns its id.
func recordFulfilment(t *testing.T, a *App, orgID, billing string, at time.Time) string {
	t.Helper()
	id := domain.NewID(domain.PrefixFulfilment)
	news, err := eventstore.Encode[domain.Event](domain.Events, orgID,
		domain.FulfilmentCreated{FulfilmentID: id, OrgID: orgID, OrderID: domain.NewID(domain.PrefixOrder),
			Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: billing, Quantity: 1}, Currency: "usd", UnitAmount: 2900, At: at},
		domain.FulfilmentProvisioned{FulfilmentID: id, DeviceID: domain.NewID(domain.PrefixDevice), At: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.Append(testutil.Context(t), domain.FulfilmentStream(id), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
	return id
}

// runCopilot runs a copilot of s's service on its scripted model, with
// cfg's settings beside them (metering, clock), until the test ends, and
// answers it and its entry points, acting through the service's fleet.
func runCopilot(t *testing.T, s *copilotService, cfg copilot.Config) (*copilot.Copilot, copilot.Handlers) {
	t.Helper()
	model, err := chat.New(chat.Config{BaseURL: s.model.URL(), APIKey: "sk-copilot-e2e", Model: "scripted-1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.ReadModels, cfg.Queries = s.a.store, s.a.runner, projections.CopilotQueries{DB: s.a.db.Pool}
	cfg.Model, cfg.ModelName = model, "scripted-1"
	cp := copilot.New(cfg)
	ctx, stop := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { cp.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	f := s.a.app.Fleet
	return cp, cp.Handlers(cqrs.Decorator{}, copilot.Devices{GetDevice: f.GetDevice, ListLeases: f.ListLeases, AcquireLease: f.AcquireLease,
		ReleaseLease: f.ReleaseLease, Observe: f.ObserveDevice, Act: f.PerformAction})
}

// TestCopilotAllowance: the allowance on an injected clock. One live
// subscription at 1000 tokens a device includes 1000 (a day pass and
// another organisation's subscription count nothing); an answer of 850
// tokens is past four fifths (nearLimit); 150 more exhaust it; the next
// message is answered in command mode without asking the model, while
// direct commands keep working; the first of the next month starts a new
// period; a turn whose first answer spends the rest asks the model no
// more; with the subscription cancelled nothing is included and the
// tokens already spent make it exhausted. Another organisation's tokens
// and subscriptions are not counted.
func TestCopilotAllowance(t *testing.T) {
	s := startCopilotServiceWith(t, nil)
	ctx := testutil.Context(t)
	clock := testutil.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	sub := recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, clock.Now())
	recordFulfilment(t, s.a, "org_a", domain.BillingDay, clock.Now())
	recordFulfilment(t, s.a, "org_b", domain.BillingSubscription, clock.Now())
	recordFulfilment(t, s.a, "org_b", domain.BillingSubscription, clock.Now())

	perDevice := int64(1000)
	cp, h := runCopilot(t, s, copilot.Config{Metered: true, TokensPerDevice: &perDevice, Now: clock.Now})
	authA := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleMember, Scopes: domain.AllScopes}
	authB := domain.Auth{OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "user_b", Role: domain.RoleAdmin, Scopes: domain.AllScopes}

	allowance := func(a domain.Auth) domain.CopilotAllowance {
		t.Helper()
		al, err := h.GetAllowance.Handle(ctx, copilot.GetAllowance{Auth: a})
		if err != nil {
			t.Fatal(err)
		}
		return al
	}
	var threadID string
	post := func(text string) map[string]any {
		t.Helper()
		p, err := h.PostMessage.Handle(ctx, copilot.PostMessage{Auth: authA, ThreadID: threadID, DeviceID: map[bool]string{true: s.device}[threadID == ""], Message: text})
		if err != nil {
			t.Fatal(err)
		}
		threadID = p.ThreadID
		for deadline := time.Now().Add(60 * time.Second); cp.Running(threadID); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the turn never ended")
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			th := s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)
			if th["thread"].(map[string]any)["state"] == "idle" {
				return th
			}
			if time.Now().After(deadline) {
				t.Fatal("the thread never showed its turn's end")
			}
		}
	}
	answer := func(in, out int) {
		s.model.play(func(req modelRequest, w *modelStream) {
			w.text("Done.")
			w.done(in, out)
		})
	}
	check := func(what string, al domain.CopilotAllowance, included, used int64, period string, fraction float64, near, exhausted bool) {
		t.Helper()
		if al.Included != included || al.Used != used || al.Period.Name() != period || al.UsedFraction != fraction ||
			al.NearLimit != near || al.Exhausted != exhausted || !al.Metered {
			t.Errorf("%s: %+v; want included %d, used %d, period %s, fraction %v, nearLimit %v, exhausted %v, metered", what, al,
				included, used, period, fraction, near, exhausted)
		}
	}

	check("fresh", allowance(authA), 1000, 0, "2026-03-01", 0, false, false)
	check("another organisation", allowance(authB), 2000, 0, "2026-03-01", 0, false, false)

	answer(700, 150)
	post("say hi")
	check("850 of 1000", allowance(authA), 1000, 850, "2026-03-01", 0.85, true, false)
	answer(100, 50)
	post("again")
	check("1000 of 1000", allowance(authA), 1000, 1000, "2026-03-01", 1, false, true)
	check("another organisation after A's use", allowance(authB), 2000, 0, "2026-03-01", 0, false, false)

	// Exhausted: the message is answered without the model.
	asked := len(s.model.asked())
	th := post("open Notes please")
	if n := len(s.model.asked()); n != asked {
		t.Errorf("the model was asked %d more times after the allowance was spent; want none", n-asked)
	}
	ends := items(th, "turn_ended")
	msgs := items(th, "message")
	last := msgs[len(msgs)-1]
	if len(ends) == 0 || ends[len(ends)-1]["reason"] != "allowance_exhausted" || last["role"] != "assistant" ||
		!strings.Contains(last["text"].(string), "allowance") || !strings.Contains(last["text"].(string), `tap "Save"`) {
		t.Errorf("answer when spent: %v, end %v; want the copilot saying the allowance is spent and how to use commands", last, ends)
	}
	check("no tokens for the refused message", allowance(authA), 1000, 1000, "2026-03-01", 1, false, true)

	// Command mode still works.
	res, err := h.RunCommand.Handle(ctx, copilot.RunCommand{Auth: authA, DeviceID: s.device, Command: "home"})
	if err != nil || len(res.Receipts) != 1 || res.Receipts[0].State != domain.ReceiptCommitted {
		t.Fatalf("a direct command after exhaustion: %+v, %v; want one committed receipt", res, err)
	}

	// The next billing month starts afresh, and the model answers again.
	clock.Advance(18*24*time.Hour - 9*time.Hour) // 2026-04-01 00:00
	check("new month", allowance(authA), 1000, 0, "2026-04-01", 0, false, false)
	answer(10, 10)
	post("hello again")
	if n := len(s.model.asked()); n != 1 {
		t.Errorf("the model was asked %d times in the new month; want once", n)
	}
	check("new month, 20 used", allowance(authA), 1000, 20, "2026-04-01", 0.02, false, false)

	// A turn that spends the rest on its first answer asks the model no
	// more: its tool call is carried out, then the turn ends in command mode.
	s.model.play(func(req modelRequest, w *modelStream) {
		w.text("Looking.")
		w.call("observe", `{}`)
		w.done(900, 90)
	})
	th = post("look at the screen")
	if n := len(s.model.asked()); n != 1 {
		t.Errorf("the model was asked %d times in a turn that spent the allowance on its first answer; want once", n)
	}
	ends = items(th, "turn_ended")
	msgs = items(th, "message")
	if last := msgs[len(msgs)-1]; ends[len(ends)-1]["reason"] != "allowance_exhausted" || !strings.Contains(last["text"].(string), "allowance") {
		t.Errorf("the turn's end %v, last message %v; want allowance_exhausted, said", ends[len(ends)-1], last)
	}
	if calls := items(th, "tool_call"); len(calls) == 0 || calls[len(calls)-1]["state"] != "succeeded" {
		t.Errorf("tool calls %v; want the observation carried out", calls)
	}
	check("spent within a turn", allowance(authA), 1000, 1010, "2026-04-01", 1, false, true)

	// The subscription ends: nothing is included, and the tokens already
	// spent this period make the allowance exhausted.
	news, err := eventstore.Encode[domain.Event](domain.Events, "org_a",
		domain.FulfilmentCancelled{FulfilmentID: sub, Reason: "subscription_ended", At: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.a.store.Append(ctx, domain.FulfilmentStream(sub), 2, news...); err != nil {
		t.Fatal(err)
	}
	check("nothing included, 1010 used", allowance(authA), 0, 1010, "2026-04-01", 0, false, true)

	// A person of another organisation (org_b, no tokens, two
	// subscriptions) with nothing used yet: a member reads it too.
	authB.Role = domain.RoleMember
	check("member of B", allowance(authB), 2000, 0, "2026-04-01", 0, false, false)

	// Unmetered (local mode): metered false, nothing counted, nothing
	// refused.
	_, local := runCopilot(t, s, copilot.Config{Now: clock.Now})
	if al, err := local.GetAllowance.Handle(ctx, copilot.GetAllowance{Auth: authA}); err != nil || al.Metered || al.Used != 0 || al.Exhausted ||
		al.Period.Name() != "2026-04-01" {
		t.Errorf("unmetered: %+v, %v; want metered false, used 0, not exhausted", al, err)
	}
}

// TestCopilotAllowanceRoute: GET /v1/copilot/allowance on a hosted
// deployment answers the organisation's allowance for the period the usage
// read reports, to a person only; a hosted deployment whose price list
// has no allowance answers 503 checkout_unavailable; a local deployment
// does not serve the route (404).
func TestCopilotAllowanceRoute(t *testing.T) {
	s := startCopilotServiceWith(t, nil)
	recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, time.Now())
	recordFulfilment(t, s.a, "org_a", domain.BillingPayg, time.Now())
	al := s.call(s.person, "GET", "/v1/copilot/allowance", "", http.StatusOK)
	usage := s.call(s.person, "GET", "/v1/usage", "", http.StatusOK)
	perDevice := *domain.DefaultCatalog().CopilotTokensPerDevice
	if al["included"] != float64(perDevice) || al["used"] != float64(0) || al["metered"] != true || al["exhausted"] != false ||
		al["nearLimit"] != false || al["usedFraction"] != float64(0) || al["period"] != usage["period"] {
		t.Errorf("allowance %v; want %d included (one subscription; pay-as-you-go includes none), nothing used, period %v", al, perDevice, usage["period"])
	}
	member := s.idp.Console(t, s.aud, "user_m", "org_a", "member")
	if m := s.call(member, "GET", "/v1/copilot/allowance", "", http.StatusOK); m["included"] != al["included"] {
		t.Errorf("a member reads %v; want the organisation's %v", m, al)
	}
	other := s.idp.Console(t, s.aud, "user_b", "org_b", "admin")
	if o := s.call(other, "GET", "/v1/copilot/allowance", "", http.StatusOK); o["included"] != float64(0) || o["exhausted"] != false {
		t.Errorf("another organisation reads %v; want its own (nothing included, nothing used)", o)
	}
	key := s.call(s.person, "POST", "/v1/api-keys", `{"name":"allowance","scopes":["devices:read"]}`, http.StatusCreated)["token"].(string)
	s.idp.SetRole("user_a", "org_a", "admin")
	app := s.idp.App(t, s.aud, "user_a", "org_a", "third-party")
	for _, tok := range []string{key, app} {
		if e := s.call(tok, "GET", "/v1/copilot/allowance", "", http.StatusForbidden)["error"].(map[string]any); e["code"] != "permission_denied" {
			t.Errorf("allowance read by a key or an app: %v; want permission_denied", e)
		}
	}

	// A hosted price list without an allowance.
	cat, err := os.ReadFile("../../../domain/catalogdata/default.json")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(file, []byte(strings.Replace(string(cat), `"copilotTokensPerDevice": 2000000,`, "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	none := startCopilotServiceWith(t, map[string]string{"SERVICE_CATALOG_FILE": file})
	e := none.call(none.person, "GET", "/v1/copilot/allowance", "", http.StatusServiceUnavailable)["error"].(map[string]any)
	if e["code"] != "checkout_unavailable" || !strings.Contains(e["message"].(string), "allowance") {
		t.Errorf("no allowance configured: %v; want 503 checkout_unavailable", e)
	}
	// Chat is still served there (the allowance cannot be computed, so it
	// does not refuse).
	none.model.play(func(req modelRequest, w *modelStream) { w.text("Hi."); w.done(1, 1) })
	th := none.call(none.person, "POST", "/v1/copilot", `{"deviceId":"`+none.device+`","message":"hi"}`, http.StatusAccepted)["threadId"].(string)
	none.settled(th)
	if len(none.model.asked()) != 1 {
		t.Errorf("the model was asked %d times; want once", len(none.model.asked()))
	}

	// Local mode: not served.
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": t.TempDir(), "SERVICE_SIM_DEVICES": "0",
	})
	_ = a
	resp, err := http.Get(base + "/v1/copilot/allowance")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("local mode: %d; want 404", resp.StatusCode)
	}
}
