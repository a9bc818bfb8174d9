package provisioning_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// countingTracer counts the statements a pool sends.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAdmissionReadsEveryPhoneAtOnce: the admission read (and checkout's
// provisioned check, which reads the same phones) loads the fulfilments of
// an organisation's paid orders in one read of the write side, however
// many phones it holds: an organisation with six phones costs as many
// statements as one with one. They are still read from their streams (not
// a read model that may lag), so a phone paid a moment ago counts.
func TestAdmissionReadsEveryPhoneAtOnce(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := testutil.Context(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	now := time.Now().UTC().Truncate(time.Second)
	p := provisioning.New(provisioning.Config{Store: store, Now: func() time.Time { return now }})

	// statements returns what GetAdmission sent for an organisation
	// holding a paid subscription of n phones, the last cancelled.
	statements := func(n int) (int64, provisioning.Admission) {
		t.Helper()
		org, order := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrder)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = domain.NewID(domain.PrefixFulfilment)
		}
		choice := domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription, Model: "pixel-8", Region: "US", Quantity: n}
		appendTo := func(stream string, evs ...domain.Event) {
			nes, err := eventstore.Encode(domain.Events, org, evs...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Append(ctx, stream, eventstore.AnyVersion, nes...); err != nil {
				t.Fatal(err)
			}
		}
		appendTo(domain.AccountStream(org), domain.CheckoutStarted{OrgID: org, OrderID: order, FulfilmentIDs: ids, Choice: choice, At: now},
			domain.CheckoutOpened{OrderID: order, SessionID: "cs_" + order, CheckoutURL: "https://pay", ExpiresAt: now.Add(time.Hour), At: now},
			domain.OrderPaid{OrderID: order, ProviderEventID: "evt_" + order, PaidAt: now})
		for i, id := range ids {
			one := choice
			one.Quantity = 1
			appendTo(domain.FulfilmentStream(id), domain.FulfilmentCreated{FulfilmentID: id, OrgID: org, OrderID: order, Choice: one, At: now},
				domain.FulfilmentProvisioned{FulfilmentID: id, DeviceID: "dev_" + id, At: now})
			if i == n-1 {
				appendTo(domain.FulfilmentStream(id), domain.FulfilmentCancelled{FulfilmentID: id, Reason: domain.EndCustomerReturn, At: now})
			}
		}
		before := tracer.n.Load()
		adm, err := (provisioning.GetAdmissionHandler{Provisioning: p}).Handle(ctx, provisioning.GetAdmission{Auth: checkoutAdmin(org), CheckoutServed: true})
		if err != nil {
			t.Fatal(err)
		}
		return tracer.n.Load() - before, adm
	}
	one, adm1 := statements(1)
	six, adm6 := statements(6)
	if adm1.Provisioned || adm1.Fulfilments != (provisioning.FulfilmentCounts{Cancelled: 1}) {
		t.Errorf("one phone, cancelled: got %+v; want not provisioned, one cancelled", adm1)
	}
	if !adm6.Provisioned || adm6.Fulfilments != (provisioning.FulfilmentCounts{Provisioned: 5, Cancelled: 1}) {
		t.Errorf("six phones: got %+v; want provisioned, five live and one cancelled", adm6)
	}
	if six != one {
		t.Fatalf("admission sent %d statements for six phones and %d for one; want the same: every phone in one read", six, one)
	}
}
