package workers_test

import (
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// TestPoolReturnsWorker: a pool device whose lease was released, and one
// whose lease ran out, are given back by one pass of the worker, which
// records the returns as its own act caused by each device; a device
// still leased stays out, and a second pass changes nothing.
func TestPoolReturnsWorker(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	clock := fleettest.NewClock(t0)
	env := fleettest.Start(t, fleettest.Options{Clock: clock})
	catalog := domain.DefaultCatalog()
	catalog.Pool = &domain.CatalogPool{Sku: domain.SkuEmulator, Size: 3}
	p := provisioning.New(provisioning.Config{Store: env.Store, ReadModels: env.Runner, Catalog: catalog, Devices: env.Fleet,
		PaygDeviceLimit: 3, Now: clock.Now})
	app := commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})

	// Pay-as-you-go access, as the payment webhook records it.
	org, order := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrder)
	news, err := eventstore.Encode[domain.Event](domain.Events, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg, Quantity: 1},
			Currency: "usd", UnitAmount: 3, RequestDigest: "test", At: t0},
		domain.OrderPaid{OrderID: order, ProviderEventID: "evt_" + order, PaidAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(bg, domain.AccountStream(org), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
	auth := domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "u_pool", Role: domain.RoleMember, Scopes: domain.AllScopes}
	take := func(ttl int) provisioning.TakenPoolDevice {
		got, err := app.Provisioning.TakePoolDevice.Handle(bg, provisioning.TakePoolDevice{Auth: auth, TTLSeconds: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	released, lapsed, kept := take(60), take(30), take(600)
	if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(bg, fleet.ReleaseLease{Auth: auth, DeviceID: released.Device.DeviceID,
		LeaseID: released.Lease.LeaseID})); err != nil {
		t.Fatal(err)
	}
	clock.Advance(31 * time.Second)

	w := workers.PoolReturns{Return: app.Provisioning.ReturnPoolDevices, Logger: fleettest.Quiet}
	if n, err := w.RunOnce(bg); err != nil || n != 2 {
		t.Fatalf("pass: put back %d (%v); want 2", n, err)
	}
	if n, err := w.RunOnce(bg); err != nil || n != 0 {
		t.Fatalf("second pass: put back %d (%v); want 0", n, err)
	}
	evs, err := env.Store.Load(bg, domain.PoolStreamID, 4)
	if err != nil || len(evs) != 2 {
		t.Fatalf("returns: %v %v; want 2", evs, err)
	}
	causes := map[string]bool{}
	for _, e := range evs {
		m, err := e.DecodeMetadata()
		if err != nil || e.Type != "pool.device_returned" || m.ActorKind != "system" || m.ActorID != "pool-returns" {
			t.Errorf("%s by %+v (%v); want pool.device_returned by the pool-returns worker", e.Type, m, err)
		}
		causes[m.CausationID] = true
	}
	if !causes[released.Device.DeviceID] || !causes[lapsed.Device.DeviceID] || causes[kept.Device.DeviceID] {
		t.Errorf("returns caused by %v; want the released and the lapsed devices", causes)
	}
	env.Settle(t)
	page, err := env.App.Fleet.ListDevices.Handle(bg, fleet.ListDevices{Auth: auth, DeviceQuery: fleet.DeviceQuery{}})
	if err != nil || len(page.Devices) != 1 || page.Devices[0].DeviceID != kept.Device.DeviceID {
		t.Errorf("devices after the pass: %+v %v; want only the one still leased", page.Devices, err)
	}
}
