package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/backends"
	"phonefleet/testutil"
)

// TestFulfilmentsRefund runs `phonefleet fulfilments refund ID` against a
// database holding a provisioned phone: the fulfilment is cancelled
// owner_refund without a webhook (notify false) and its device retired in
// the same unit; a second refund fails naming the state; the family
// without a subcommand prints its usage.
func TestFulfilmentsRefund(t *testing.T) {
	url := testutil.DatabaseURL(t)
	env := []string{"DATABASE_URL=" + url, "SERVICE_DATA_DIR=" + t.TempDir()}
	ctx := testutil.Context(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	org, ful := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixFulfilment)
	devices, err := fleet.New(fleet.Config{Store: store, NewSimState: backends.NewSimState}).RegisterDevices().Handle(ctx,
		fleet.RegisterDevices{OrgID: org, Backend: domain.BackendSim, Count: 1, SeedMarker: domain.FulfilmentDeviceStream(ful)})
	if err != nil || len(devices) != 1 {
		t.Fatalf("register: %v, %v", devices, err)
	}
	at := time.Date(2026, 2, 1, 9, 0, 0, 0, time.UTC)
	news, err := eventstore.Encode[domain.Event](domain.Events, org,
		domain.FulfilmentCreated{FulfilmentID: ful, OrgID: org, OrderID: domain.NewID(domain.PrefixOrder),
			Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription, Quantity: 1}, Currency: "usd",
			UnitAmount: 2900, At: at},
		domain.FulfilmentProvisioned{FulfilmentID: ful, DeviceID: devices[0], At: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.FulfilmentStream(ful), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}

	out, err := runCmd(t, env, "fulfilments", "refund", ful)
	if err != nil || !strings.Contains(out, "cancelled (owner_refund)") {
		t.Fatalf("refund: %v\n%s", err, out)
	}
	evs, err := store.Load(ctx, domain.FulfilmentStream(ful), 3)
	if err != nil || len(evs) != 1 || evs[0].Type != "fulfilment.cancelled" {
		t.Fatalf("fulfilment stream after the refund: %v, %v", evs, err)
	}
	de, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if c := de.(domain.FulfilmentCancelled); c.Reason != domain.EndOwnerRefund || c.Notify || c.By == nil || c.By.Kind != "operator" {
		t.Errorf("recorded %+v; want owner_refund, not notified, by the operator", c)
	}
	dev, err := store.Load(ctx, domain.DeviceStream(devices[0]), 1)
	if err != nil || len(dev) != 2 || dev[1].Type != "device.retired" {
		t.Errorf("device stream %v, %v; want it retired", dev, err)
	}

	out, err = runCmd(t, env, "fulfilments", "refund", ful)
	if exitCodeOf(err) != 1 || !strings.Contains(out, "wrong_state") {
		t.Errorf("a second refund: exit %d\n%s", exitCodeOf(err), out)
	}
	out, err = runCmd(t, env, "fulfilments")
	if exitCodeOf(err) != 2 || !strings.Contains(out, "phonefleet fulfilments refund ID") {
		t.Errorf("no subcommand: exit %d\n%s", exitCodeOf(err), out)
	}
}
