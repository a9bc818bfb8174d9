package projections_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// fulfilmentsRunner runs the fulfilments projection alone over s until
// the test ends.
func fulfilmentsRunner(t *testing.T, s *eventstore.Store) *projections.Runner {
	t.Helper()
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Fulfilments{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// fulfilmentRowsText dumps both tables of the read model, row by row.
func fulfilmentRowsText(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{`SELECT f::text FROM fulfilments f ORDER BY fulfilment_id`,
		`SELECT e::text FROM fulfilment_estimates e ORDER BY fulfilment_id, position`} {
		rows, err := pool.Query(testutil.Context(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestFulfilmentsReadModel: every fulfilment event lands in the read
// model (a day pass ends 24 hours after its first provisioning, whenever
// the row is written), the reads answer from it, and a rebuild from
// position 0 produces the same rows.
func TestFulfilmentsReadModel(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r := fulfilmentsRunner(t, store)
	ctx := testutil.Context(t)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var last eventstore.Appended
	add := func(org, id string, evs ...domain.Event) {
		t.Helper()
		news, err := eventstore.Encode(domain.Events, org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = store.Append(ctx, domain.FulfilmentStream(id), eventstore.AnyVersion, news...); err != nil {
			t.Fatal(err)
		}
	}
	created := func(org, id, order string, c domain.PurchaseChoice, at time.Time) domain.FulfilmentCreated {
		return domain.FulfilmentCreated{FulfilmentID: id, OrgID: org, OrderID: order, Choice: c, Currency: "usd", UnitAmount: 400,
			PaymentIntentID: "pi_" + order, At: at}
	}
	day := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}
	pixel := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US",
		Quantity: 1, AddOns: domain.AddOns{USFixedIP: true}}

	// org_a: a day pass provisioned at once; a Pixel awaiting, re-estimated,
	// then provisioned, its renewal cancelled; one cancelled undelivered.
	add("org_a", "ful_day", created("org_a", "ful_day", "ord_1", day, t0),
		domain.FulfilmentProvisioned{FulfilmentID: "ful_day", DeviceID: "dev_1", At: t0})
	add("org_a", "ful_px", created("org_a", "ful_px", "ord_2", pixel, t0.Add(time.Minute)),
		domain.FulfilmentAwaitingProvisioning{FulfilmentID: "ful_px", EstimatedBy: t0.Add(24 * time.Hour), At: t0.Add(time.Minute)})
	add("org_a", "ful_px", domain.FulfilmentEstimateChanged{FulfilmentID: "ful_px", EstimatedBy: t0.Add(48 * time.Hour),
		Reason: domain.EstimateMissed, At: t0.Add(25 * time.Hour)})
	add("org_a", "ful_lost", created("org_a", "ful_lost", "ord_3", pixel, t0.Add(2*time.Minute)),
		domain.FulfilmentAwaitingProvisioning{FulfilmentID: "ful_lost", EstimatedBy: t0.Add(24 * time.Hour), At: t0.Add(2 * time.Minute)})
	// Checked while both are awaiting: the queue of their slot.
	if err := r.WaitFor(ctx, projections.FulfilmentsName, last); err != nil {
		t.Fatal(err)
	}
	if n, err := projections.AwaitingAhead(ctx, pool, "cloud_phone/pixel-8/US", t0.Add(2*time.Minute), "ful_lost"); err != nil || n != 1 {
		t.Errorf("awaiting ahead of ful_lost: %d, %v; want 1", n, err)
	}
	add("org_a", "ful_px", domain.FulfilmentProvisioned{FulfilmentID: "ful_px", DeviceID: "dev_2", At: t0.Add(30 * time.Hour)})
	add("org_a", "ful_px", domain.FulfilmentRenewalCancelled{FulfilmentID: "ful_px", EndsAt: t0.AddDate(0, 1, 0),
		By: domain.Actor{Kind: domain.ActorUser, ID: "u"}, At: t0.Add(31 * time.Hour)})
	add("org_a", "ful_lost", domain.FulfilmentCancelled{FulfilmentID: "ful_lost", Reason: domain.EndUndelivered,
		At: t0.Add(8 * 24 * time.Hour)})
	// org_b: one Pixel provisioned.
	add("org_b", "ful_b", created("org_b", "ful_b", "ord_4", pixel, t0.Add(3*time.Minute)),
		domain.FulfilmentProvisioned{FulfilmentID: "ful_b", DeviceID: "dev_3", At: t0.Add(3 * time.Minute)})
	if err := r.WaitFor(ctx, projections.FulfilmentsName, last); err != nil {
		t.Fatal(err)
	}

	v, ok, err := projections.GetFulfilment(ctx, pool, "org_a", "ful_day")
	if err != nil || !ok || v.EndsAt == nil || !v.EndsAt.Equal(t0.Add(domain.DayPassLength)) || v.DeviceID != "dev_1" {
		t.Errorf("day pass %+v, %v, %v; want ends 24 h after provisioning", v, ok, err)
	}
	v, _, _ = projections.GetFulfilment(ctx, pool, "org_a", "ful_px")
	if v.State != domain.FulfilmentProvisionedState || v.EstimatedBy != nil || !v.RenewalCancelled || v.EndsAt == nil ||
		!v.EndsAt.Equal(t0.AddDate(0, 1, 0)) || !v.AddOns.USFixedIP || v.Slot() != "cloud_phone/pixel-8/US" {
		t.Errorf("pixel %+v", v)
	}
	if _, ok, _ := projections.GetFulfilment(ctx, pool, "org_b", "ful_px"); ok {
		t.Error("another organisation reads org_a's fulfilment")
	}
	est, err := projections.FulfilmentEstimates(ctx, pool, "org_a", "ful_px")
	if err != nil || len(est) != 2 || est[0].Reason != projections.EstimateFirst || est[1].Reason != domain.EstimateMissed {
		t.Errorf("estimates %+v, %v", est, err)
	}
	use, err := projections.UnitsInUse(ctx, pool)
	if want := map[string]int{"emulator": 1, "cloud_phone/pixel-8/US": 2}; err != nil || !maps.Equal(use, want) {
		t.Errorf("units in use %v, %v; want %v", use, err, want)
	}
	if n, err := projections.LiveFulfilments(ctx, pool, "org_a", domain.BillingSubscription); err != nil || n != 1 {
		t.Errorf("org_a's live subscriptions: %d, %v; want 1", n, err)
	}
	if org, order, ok, err := projections.OrderOfPayment(ctx, pool, "pi_ord_1"); err != nil || !ok || org != "org_a" || order != "ord_1" {
		t.Errorf("order of pi_ord_1: %s %s %v %v", org, order, ok, err)
	}
	due, err := projections.EndingFulfilments(ctx, pool, t0.Add(domain.DayPassLength), 10)
	if err != nil || len(due) != 1 || due[0].FulfilmentID != "ful_day" {
		t.Errorf("ending at the day pass's end: %+v, %v", due, err)
	}
	page, err := projections.ListFulfilments(ctx, pool, "org_a", projections.FulfilmentQuery{Limit: 2})
	if err != nil || len(page.Fulfilments) != 2 || page.Fulfilments[0].FulfilmentID != "ful_lost" || page.Next == nil {
		t.Fatalf("first page %+v, %v", page, err)
	}
	page, err = projections.ListFulfilments(ctx, pool, "org_a", projections.FulfilmentQuery{Limit: 2, Before: page.Next})
	if err != nil || len(page.Fulfilments) != 1 || page.Fulfilments[0].FulfilmentID != "ful_day" || page.Next != nil {
		t.Errorf("second page %+v, %v", page, err)
	}
	all, err := projections.AllFulfilments(ctx, pool)
	if ids := idsOf(all); err != nil || !slices.Equal(ids, []string{"ful_day", "ful_px", "ful_lost", "ful_b"}) {
		t.Errorf("all fulfilments %v, %v", ids, err)
	}

	rows := fulfilmentRowsText(t, pool)
	if strings.Count(rows, "\n") != 7 {
		t.Fatalf("rows:\n%s\nwant 4 fulfilments and 3 estimates", rows)
	}
	if err := r.Rebuild(ctx, projections.FulfilmentsName, nil); err != nil {
		t.Fatal(err)
	}
	if again := fulfilmentRowsText(t, pool); again != rows {
		t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", rows, again)
	}
}

func idsOf(vs []projections.FulfilmentView) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.FulfilmentID
	}
	return out
}
