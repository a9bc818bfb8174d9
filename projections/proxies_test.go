package projections_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestProxiesReadModel: every proxy event lands in the read model (an
// order through payment to its end, the proxy issued, rotated, assigned,
// moved and unassigned, operations pending to finished), the reads answer
// from it filtered by organisation, a revoked proxy's credentials are no
// active proxy's, and a rebuild from position 0 produces the same rows.
func TestProxiesReadModel(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Proxies{}}, projections.WithPollInterval(20*time.Millisecond))
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

	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	var last eventstore.Appended
	add := func(org string, evs ...domain.Event) {
		t.Helper()
		news, err := eventstore.Encode(domain.Events, org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = store.Append(ctx, domain.ProxyStream(org), eventstore.AnyVersion, news...); err != nil {
			t.Fatal(err)
		}
	}
	us := domain.ProxyProduct{ID: "us-fixed", Name: "US", Kind: domain.ProxyKindFixed, Country: "US", Protocol: "http", MonthlyPrice: 1500}
	by := domain.Actor{Kind: "user", ID: "u1"}
	add("org_a",
		domain.ProxyOrderStarted{OrgID: "org_a", OrderID: "pxo_1", ProxyID: "prx_1", Product: us, Currency: "usd", QuoteID: "qt_1", By: by, At: t0},
		domain.ProxyOrderOpened{OrderID: "pxo_1", SessionID: "cs_1", CheckoutURL: "https://pay/1", ExpiresAt: t0.Add(time.Hour), At: t0},
		domain.ProxyOrderPaid{OrderID: "pxo_1", SubscriptionID: "sub_1", ProviderEventID: "evt_1", At: t0.Add(time.Minute)},
		domain.ProxyIssued{ProxyID: "prx_1", OrderID: "pxo_1", ProductID: "us-fixed", Kind: "fixed", Country: "US", Protocol: "http",
			Host: "127.0.0.1", Port: 3128, Username: "px-1", SealedPassword: []byte{1}, At: t0.Add(time.Minute)},
		domain.ProxyOrderStarted{OrgID: "org_a", OrderID: "pxo_2", ProxyID: "prx_2", Product: us, Currency: "usd", QuoteID: "qt_1", By: by, At: t0.Add(2 * time.Minute)},
		domain.ProxyOrderPaid{OrderID: "pxo_2", At: t0.Add(3 * time.Minute)},
		domain.ProxyIssued{ProxyID: "prx_2", OrderID: "pxo_2", ProductID: "us-fixed", Host: "127.0.0.1", Port: 3128, Username: "px-2",
			SealedPassword: []byte{2}, At: t0.Add(3 * time.Minute)},
		domain.ProxyOperationRequested{OperationID: "pxop_1", ProxyID: "prx_1", Kind: domain.ProxyOpAssign, DeviceIDs: []string{"dev_a"}, By: by, At: t0.Add(4 * time.Minute)},
		domain.ProxyAssigned{ProxyID: "prx_1", DeviceID: "dev_a", OperationID: "pxop_1", At: t0.Add(5 * time.Minute)},
		domain.ProxyOperationFinished{OperationID: "pxop_1", State: domain.ProxyOpSucceeded, At: t0.Add(5 * time.Minute)},
		domain.ProxyOperationRequested{OperationID: "pxop_2", ProxyID: "prx_1", Kind: domain.ProxyOpRotate, Username: "px-1b", SealedPassword: []byte{3}, By: by, At: t0.Add(6 * time.Minute)},
		domain.ProxyCredentialsRotated{ProxyID: "prx_1", Username: "px-1b", SealedPassword: []byte{3}, OperationID: "pxop_2", At: t0.Add(7 * time.Minute)},
		domain.ProxyOperationFinished{OperationID: "pxop_2", State: domain.ProxyOpSucceeded, At: t0.Add(7 * time.Minute)},
		domain.ProxyOperationRequested{OperationID: "pxop_3", ProxyID: "prx_2", Kind: domain.ProxyOpAssign, DeviceIDs: []string{"dev_a", "dev_b"}, By: by, At: t0.Add(8 * time.Minute)},
		domain.ProxyAssigned{ProxyID: "prx_2", DeviceID: "dev_a", OperationID: "pxop_3", At: t0.Add(9 * time.Minute)},
		domain.ProxyOperationFinished{OperationID: "pxop_3", State: domain.ProxyOpFailed, Code: "device_unavailable", Reason: "dev_b is offline", At: t0.Add(9 * time.Minute)},
		domain.ProxyOperationRequested{OperationID: "pxop_4", ProxyID: "prx_2", Kind: domain.ProxyOpUnassign, DeviceIDs: []string{"dev_a"}, By: by, At: t0.Add(10 * time.Minute)},
		domain.ProxyOrderCancelScheduled{OrderID: "pxo_1", By: by, At: t0.Add(11 * time.Minute)},
		domain.ProxyOrderEnded{OrderID: "pxo_1", Reason: "subscription_ended", At: t0.Add(12 * time.Minute)},
		domain.ProxyCredentialsRevealed{ProxyID: "prx_2", By: by, At: t0.Add(13 * time.Minute)},
		domain.ProxyOrderRefunded{OrderID: "pxo_2", ChargeID: "ch_2", Amount: 1500, AmountRefunded: 500, Currency: "usd",
			ProviderEventID: "evt_r", At: t0.Add(14 * time.Minute)},
		domain.ProxyOrderDisputed{OrderID: "pxo_1", DisputeID: "dp_1", ChargeID: "ch_1", Status: "lost", Reason: "fraudulent",
			Amount: 1500, Currency: "usd", ProviderEventID: "evt_d", At: t0.Add(15 * time.Minute)},
	)
	add("org_b", domain.ProxyOrderStarted{OrgID: "org_b", OrderID: "pxo_b", ProxyID: "prx_b", Product: us, Currency: "usd", By: by, At: t0})
	if err := r.WaitFor(ctx, projections.ProxiesName, last); err != nil {
		t.Fatal(err)
	}
	q := projections.ProxyQueries{DB: pool}
	o, ok, err := q.GetProxyOrder(ctx, "org_a", "pxo_1")
	if err != nil || !ok || o.State != domain.ProxyOrderEndedState || !o.CancelAtPeriodEnd || o.SubscriptionID != "sub_1" || o.EndedReason != "subscription_ended" {
		t.Errorf("order pxo_1 %+v, %v, %v", o, ok, err)
	}
	if o.Dispute == nil || o.Dispute.Status != "lost" || o.Dispute.DisputeID != "dp_1" || o.Refund != nil {
		t.Errorf("order pxo_1's dispute %+v, refund %+v", o.Dispute, o.Refund)
	}
	if o2, _, _ := q.GetProxyOrder(ctx, "org_a", "pxo_2"); o2.Refund == nil || o2.Refund.AmountRefunded != 500 || o2.Refund.Full || o2.State != domain.ProxyOrderPaidState {
		t.Errorf("order pxo_2 %+v; want paid with a partial refund of 500", o2)
	}
	if org, order, ok, err := q.ProxyOrderOfSubscription(ctx, "sub_1"); err != nil || !ok || org != "org_a" || order != "pxo_1" {
		t.Errorf("sub_1's order: %s %s %v %v", org, order, ok, err)
	}
	if _, _, ok, _ := q.ProxyOrderOfSubscription(ctx, "sub_none"); ok {
		t.Error("an unknown subscription names an order")
	}
	if _, ok, _ := q.GetProxyOrder(ctx, "org_b", "pxo_1"); ok {
		t.Error("another organisation reads org_a's order")
	}
	p1, _, _ := q.GetProxy(ctx, "org_a", "prx_1")
	p2, _, _ := q.GetProxy(ctx, "org_a", "prx_2")
	if p1.State != domain.ProxyRevoked || p1.Username != "px-1b" || p1.RotatedAt == nil || len(p1.Devices) != 0 {
		t.Errorf("prx_1 %+v; want revoked, rotated, the device moved away", p1)
	}
	if p2.State != domain.ProxyActive || strings.Join(p2.Devices, ",") != "dev_a" || !p2.Revealed {
		t.Errorf("prx_2 %+v; want active with dev_a, revealed", p2)
	}
	if id, err := q.ProxyOfDevice(ctx, "org_a", "dev_a"); err != nil || id != "prx_2" {
		t.Errorf("dev_a behind %q, %v; want prx_2", id, err)
	}
	if id, _ := q.ProxyOfDevice(ctx, "org_b", "dev_a"); id != "" {
		t.Error("another organisation reads org_a's assignment")
	}
	if _, ok, _ := q.ActiveProxyByUsername(ctx, "px-1b"); ok {
		t.Error("a revoked proxy's credentials are an active proxy's")
	}
	if c, ok, _ := q.ActiveProxyByUsername(ctx, "px-2"); !ok || c.ProxyID != "prx_2" || c.OrgID != "org_a" {
		t.Errorf("px-2: %+v, %v", c, ok)
	}
	op, _, _ := q.GetProxyOperation(ctx, "org_a", "pxop_3")
	if op.State != domain.ProxyOpFailed || op.Code != "device_unavailable" || op.Reason != "dev_b is offline" || op.FinishedAt == nil {
		t.Errorf("failed operation %+v", op)
	}
	at, err := q.ProxiesAt(ctx, "org_a", []projections.DeviceAt{{DeviceID: "dev_a", At: t0}, {DeviceID: "dev_a", At: t0.Add(6 * time.Minute)},
		{DeviceID: "dev_a", At: t0.Add(20 * time.Minute)}, {DeviceID: "dev_b", At: t0.Add(20 * time.Minute)}})
	if err != nil || strings.Join(at, ",") != ",prx_1,prx_2," {
		t.Errorf("proxies at: %q, %v; want none, prx_1, prx_2, none", at, err)
	}
	pending, err := q.PendingProxyOperations(ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].OperationID != "pxop_4" {
		t.Errorf("pending %+v, %v; want pxop_4", pending, err)
	}
	if ops, _ := q.ListProxyOperations(ctx, "org_a", "prx_1", 10); len(ops) != 2 || ops[0].OperationID != "pxop_2" {
		t.Errorf("prx_1's operations %+v; want the rotation first", ops)
	}

	rows := proxyRowsText(t, ctx, pool)
	if n := strings.Count(rows, "\n"); n != 12 {
		t.Fatalf("rows:\n%s\nwant 3 orders, 2 proxies, 1 assignment, 2 periods behind a proxy and 4 operations", rows)
	}
	if err := r.Rebuild(ctx, projections.ProxiesName, nil); err != nil {
		t.Fatal(err)
	}
	if again := proxyRowsText(t, ctx, pool); again != rows {
		t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", rows, again)
	}
}

func proxyRowsText(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{`SELECT o::text FROM proxy_orders o ORDER BY order_id`, `SELECT p::text FROM proxies p ORDER BY proxy_id`,
		`SELECT a::text FROM proxy_assignments a ORDER BY device_id`, `SELECT h::text FROM proxy_assignment_history h ORDER BY device_id, from_at`, `SELECT o::text FROM proxy_operations o ORDER BY operation_id`} {
		rows, err := pool.Query(ctx, q)
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
	}
	return b.String()
}
