package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// reconcileRecords names one organisation's two paid orders, as the
// recorded provider answers (testdata/reconcile/*) name them: a monthly
// emulator paid with subscription Sub and a day pass paid with payment
// Payment, each with its phone provisioned.
type reconcileRecords struct {
	Org, Customer, OrderMonthly, OrderDay, Sub, Payment, FMonthly, FDay string
}

// recordReconcileWorld writes the records into the database at dbURL, as
// checkout, the provider's webhook and fulfilment record them. The
// fulfilments read model is not running: the command must bring it up to
// date itself.
func recordReconcileWorld(t *testing.T, dbURL string) reconcileRecords {
	t.Helper()
	ctx := testutil.Context(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	w := reconcileRecords{Org: domain.NewID(domain.PrefixOrganisation), Customer: "cus_" + domain.NewID("x")[2:],
		OrderMonthly: domain.NewID(domain.PrefixOrder), OrderDay: domain.NewID(domain.PrefixOrder),
		Sub: "sub_" + domain.NewID("x")[2:], Payment: "pi_" + domain.NewID("x")[2:],
		FMonthly: domain.NewID(domain.PrefixFulfilment), FDay: domain.NewID(domain.PrefixFulfilment)}
	at := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	appendTo := func(stream string, evs ...domain.Event) {
		t.Helper()
		nes, err := eventstore.Encode(domain.Events, w.Org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.AnyVersion, nes...); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []struct {
		order, fulfilment string
		choice            domain.PurchaseChoice
		amount            int64
		paid              domain.OrderPaid
	}{
		{w.OrderMonthly, w.FMonthly, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}, 2900,
			domain.OrderPaid{OrderID: w.OrderMonthly, ProviderEventID: "evt_monthly", CustomerID: w.Customer, SubscriptionID: w.Sub, PaidAt: at}},
		{w.OrderDay, w.FDay, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, 400,
			domain.OrderPaid{OrderID: w.OrderDay, ProviderEventID: "evt_day", CustomerID: w.Customer, PaymentIntentID: w.Payment, PaidAt: at}},
	} {
		appendTo(domain.AccountStream(w.Org),
			domain.CheckoutStarted{OrgID: w.Org, OrderID: o.order, FulfilmentIDs: []string{o.fulfilment}, Choice: o.choice, Currency: "usd",
				UnitAmount: o.amount, QuoteID: domain.QuoteID("usd", o.choice.Sku, o.choice.Billing, "", o.amount), RequestDigest: "digest",
				By: domain.Actor{Kind: "user", ID: "user_admin"}, At: at},
			domain.CheckoutOpened{OrderID: o.order, SessionID: "cs_" + o.order, CheckoutURL: "https://pay.test/" + o.order,
				ExpiresAt: at.Add(time.Hour), CustomerID: w.Customer, At: at},
			o.paid)
		appendTo(domain.FulfilmentStream(o.fulfilment),
			domain.FulfilmentCreated{FulfilmentID: o.fulfilment, OrgID: w.Org, OrderID: o.order, Choice: o.choice, Currency: "usd",
				UnitAmount: o.amount, SubscriptionID: o.paid.SubscriptionID, PaymentIntentID: o.paid.PaymentIntentID, At: at},
			domain.FulfilmentProvisioned{FulfilmentID: o.fulfilment, DeviceID: "dev_" + o.fulfilment, At: at})
	}
	return w
}

// TestFulfilmentsReconcile runs `phonefleet fulfilments reconcile` as
// finance would, against the real stripe-mock whose three list answers
// are recorded ones: a consistent set exits 0, a set with a planted
// difference exits 1 and names it (in text and with -json), and a
// reconciliation that cannot be made exits 2.
func TestFulfilmentsReconcile(t *testing.T) {
	dbURL := testutil.DatabaseURL(t)
	w := recordReconcileWorld(t, dbURL)
	stripeMock := testutil.StripeMock(t)
	env := func(base string) []string {
		return []string{"DATABASE_URL=" + dbURL, "SERVICE_DATA_DIR=" + t.TempDir(), "SERVICE_STRIPE_SECRET_KEY=sk_test_reconcile",
			"SERVICE_STRIPE_API_BASE=" + base}
	}

	consistent := testutil.StripeRecordedLists(t, stripeMock, "testdata/reconcile/consistent", w)
	out, err := runCmd(t, env(consistent), "fulfilments", "reconcile")
	if code := exitCodeOf(err); code != 0 || !strings.Contains(out, "OK: no differences") || strings.Contains(out, "DIFFERENCE") {
		t.Fatalf("consistent records: exit %d\n%s\nwant exit 0 and OK", code, out)
	}
	if !strings.Contains(out, "compared 1 billing accounts (2 orders) and 2 fulfilments with the provider's 1 subscriptions, 1 payments, 0 refunds and 0 disputes") {
		t.Errorf("consistent records: the summary does not show both orders and both fulfilments compared:\n%s", out)
	}

	// The provider ended the subscription and refunded the day pass, and
	// both phones are still live. Reconcile is read-only: the event log
	// and every projection checkpoint are as they were; -csv writes the
	// differences beside the text.
	before := databaseState(t, dbURL)
	planted := testutil.StripeRecordedLists(t, stripeMock, "testdata/reconcile/planted", w)
	csvFile := filepath.Join(t.TempDir(), "differences.csv")
	out, err = runCmd(t, env(planted), "fulfilments", "reconcile", "-csv", csvFile)
	if code := exitCodeOf(err); code != 1 {
		t.Fatalf("planted differences: exit %d\n%s\nwant exit 1", code, out)
	}
	if after := databaseState(t, dbURL); after != before {
		t.Errorf("reconcile changed the database:\nbefore\n%s\nafter\n%s", before, after)
	}
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatalf("-csv: not CSV: %v", err)
	}
	row := func(want ...string) bool {
		return slices.ContainsFunc(records[1:], func(r []string) bool { return len(r) == 6 && slices.Equal(r[:5], want) && r[5] != "" })
	}
	if len(records) != 4 || strings.Join(records[0], ",") != "kind,org_id,order_id,fulfilment_ids,provider_ids,detail" ||
		!row("refunded_but_live", w.Org, w.OrderDay, w.FDay, w.Payment+" re_day") ||
		!row("subscription_ended", w.Org, w.OrderMonthly, w.FMonthly, w.Sub) ||
		!row("refund_amount_mismatch", w.Org, w.OrderDay, "", "ch_day re_day") {
		t.Errorf("-csv: %q; want a header and the three differences with our ids and the provider's", records)
	}
	for _, want := range []string{
		"DIFFERENCE subscription_ended org=" + w.Org + " order=" + w.OrderMonthly + " fulfilments=" + w.FMonthly + " provider=" + w.Sub + ":",
		"DIFFERENCE refunded_but_live org=" + w.Org + " order=" + w.OrderDay + " fulfilments=" + w.FDay + " provider=" + w.Payment + ",re_day:",
		"DIFFERENCE refund_amount_mismatch org=" + w.Org + " order=" + w.OrderDay + " provider=ch_day,re_day:",
		"3 difference(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("planted differences: output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "DIFFERENCE "); n != 3 {
		t.Errorf("planted differences: got %d difference lines; want 3\n%s", n, out)
	}

	stdout, err := command(env(planted), "fulfilments", "reconcile", "-json").Output()
	if code := exitCodeOf(err); code != 1 {
		t.Fatalf("-json: exit %d\n%s\nwant exit 1", code, stdout)
	}
	var doc struct {
		Clean       bool `json:"clean"`
		Differences []struct {
			Kind          string   `json:"kind"`
			OrgID         string   `json:"orgId"`
			OrderID       string   `json:"orderId"`
			FulfilmentIDs []string `json:"fulfilmentIds"`
			ProviderIDs   []string `json:"providerIds"`
			Detail        string   `json:"detail"`
		} `json:"differences"`
		Checked map[string]int `json:"checked"`
	}
	if err := json.Unmarshal(stdout, &doc); err != nil {
		t.Fatalf("-json: not one JSON document: %v\n%s", err, stdout)
	}
	var kinds []string
	for _, d := range doc.Differences {
		kinds = append(kinds, d.Kind+" "+d.OrderID)
		if d.OrgID != w.Org || d.Detail == "" || len(d.FulfilmentIDs) != 1 && d.Kind != "refund_amount_mismatch" {
			t.Errorf("-json: difference %+v lacks its organisation, phone or detail", d)
		}
	}
	slices.Sort(kinds)
	want := []string{"refunded_but_live " + w.OrderDay, "subscription_ended " + w.OrderMonthly, "refund_amount_mismatch " + w.OrderDay}
	slices.Sort(want)
	if doc.Clean || !slices.Equal(kinds, want) || doc.Checked["orders"] != 2 || doc.Checked["fulfilments"] != 2 {
		t.Errorf("-json: got clean %v, differences %v, checked %v; want %v over 2 orders and 2 fulfilments", doc.Clean, kinds, doc.Checked, want)
	}

	// Nothing could be compared: no provider configured, or the provider
	// does not answer.
	noKey := []string{"DATABASE_URL=" + dbURL, "SERVICE_DATA_DIR=" + t.TempDir(), "SERVICE_STRIPE_SECRET_KEY="}
	out, err = runCmd(t, noKey, "fulfilments", "reconcile")
	if code := exitCodeOf(err); code != 2 || !strings.Contains(out, "SERVICE_STRIPE_SECRET_KEY") {
		t.Errorf("no provider: exit %d\n%s\nwant exit 2 naming SERVICE_STRIPE_SECRET_KEY", code, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	out, err = runCmd(t, env(down), "fulfilments", "reconcile")
	if code := exitCodeOf(err); code != 2 || !strings.Contains(out, "provider unavailable") {
		t.Errorf("provider down: exit %d\n%s\nwant exit 2 saying the provider is unavailable", code, out)
	}
}

// databaseState is what reconcile must leave as it was: the event log
// (count and head) and every projection checkpoint.
func databaseState(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := testutil.Context(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var s string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) || ' events, head ' || coalesce(max(position), 0) FROM events) || E'\n' ||
		coalesce((SELECT string_agg(c::text, E'\n' ORDER BY c::text) FROM projection_checkpoints c), '')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReconcileOutputNamesBothSidesForEveryKind: for a difference of
// every kind reconciliation reports, the text line and the CSV row carry
// our organisation, order and phones and the provider's object ids, in
// their own fields (text: org=, order=, fulfilments=, provider=; CSV:
// their columns), so a spreadsheet can look up either side.
func TestReconcileOutputNamesBothSidesForEveryKind(t *testing.T) {
	var rep provisioning.ReconcileReport
	for i, kind := range provisioning.ReconcileKinds {
		rep.Differences = append(rep.Differences, provisioning.ReconcileDifference{Kind: kind, OrgID: "org_" + kind,
			OrderID: "ord_" + kind, FulfilmentIDs: []string{"ful_" + kind, "ful_" + kind + "_2"},
			ProviderIDs: []string{"sub_" + kind, "re_" + kind}, Detail: fmt.Sprintf("what differs, %q, #%d", kind, i)})
	}
	var text strings.Builder
	if err := writeReconcileText(&text, rep); err != nil {
		t.Fatal(err)
	}
	csvFile := filepath.Join(t.TempDir(), "differences.csv")
	if err := writeReconcileCSVFile(csvFile, rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatalf("-csv: not CSV: %v", err)
	}
	if len(records) != len(provisioning.ReconcileKinds)+1 {
		t.Fatalf("-csv: %d rows; want a header and one row per kind (%d)", len(records), len(provisioning.ReconcileKinds))
	}
	for i, kind := range provisioning.ReconcileKinds {
		line := fmt.Sprintf("DIFFERENCE %s org=org_%s order=ord_%s fulfilments=ful_%s,ful_%s_2 provider=sub_%s,re_%s: ",
			kind, kind, kind, kind, kind, kind, kind)
		if !strings.Contains(text.String(), line) {
			t.Errorf("text: no line %q", line)
		}
		want := []string{kind, "org_" + kind, "ord_" + kind, "ful_" + kind + " ful_" + kind + "_2", "sub_" + kind + " re_" + kind,
			fmt.Sprintf("what differs, %q, #%d", kind, i)}
		if !slices.Equal(records[i+1], want) {
			t.Errorf("-csv row %d: %q; want %q", i+1, records[i+1], want)
		}
	}
}
