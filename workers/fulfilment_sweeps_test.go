package workers_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// TestFulfilmentSweeps: on an injected clock, one pass provisions the
// phone first in line for the free unit and leaves the next waiting; a
// day later a pass ends the day pass and moves the passed estimate; a
// week after payment a pass gives the waiting phone up. What each did is
// recorded on its fulfilment's stream.
func TestFulfilmentSweeps(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	clock := fleettest.NewClock(t0)
	env := fleettest.Start(t, fleettest.Options{Clock: clock, MaxConns: 20})
	fr, err := projections.NewRunner(env.Store, fleettest.Quiet, []projections.Projection{projections.Fulfilments{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := fr.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = fr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	catalog, err := domain.ParseCatalog([]byte(`{"currency": "usd", "skus": [
		{"sku": "emulator", "name": "Emulator", "prices": {"subscription": 2900}, "maxQuantity": 1, "backorderable": true, "inventory": 1},
		{"sku": "cloud_phone", "name": "Cloud phone", "prices": {"day": 1200}, "maxQuantity": 1, "backorderable": true, "inventory": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := provisioning.New(provisioning.Config{Store: env.Store, Catalog: catalog, Devices: env.Fleet, Now: clock.Now,
		ReadModels: testutil.ReadModels{RM: env.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: fr}}})
	app := commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})
	w := workers.FulfilmentSweeps{Sweep: app.Provisioning.SweepFulfilment, Pool: env.Pool, Now: clock.Now}

	org := env.OrgID
	var last eventstore.Appended
	add := func(id string, evs ...domain.Event) {
		t.Helper()
		news, err := eventstore.Encode(domain.Events, org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = env.Store.Append(ctx, domain.FulfilmentStream(id), eventstore.AnyVersion, news...); err != nil {
			t.Fatal(err)
		}
	}
	paid := func(id string, c domain.PurchaseChoice, at time.Time) domain.FulfilmentCreated {
		c.Quantity = 1
		return domain.FulfilmentCreated{FulfilmentID: id, OrgID: org, OrderID: "ord_" + id, Choice: c, Currency: "usd", At: at}
	}
	emulator := domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}
	add("first", paid("first", emulator, t0), domain.FulfilmentAwaitingProvisioning{FulfilmentID: "first", EstimatedBy: t0.Add(24 * time.Hour), At: t0})
	add("second", paid("second", emulator, t0.Add(time.Second)),
		domain.FulfilmentAwaitingProvisioning{FulfilmentID: "second", EstimatedBy: t0.Add(24*time.Hour + time.Second), At: t0.Add(time.Second)})
	add("day", paid("day", domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay}, t0),
		domain.FulfilmentProvisioned{FulfilmentID: "day", DeviceID: "dev_gone", At: t0})
	if err := fr.WaitFor(ctx, projections.FulfilmentsName, last); err != nil {
		t.Fatal(err)
	}

	pass := func(want map[string]int) {
		t.Helper()
		got, err := w.RunOnce(testutil.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("at %s the pass did %v; want %v", clock.Now(), got, want)
		}
	}
	last1 := func(id string) string {
		t.Helper()
		evs, err := env.Store.Load(testutil.Context(t), domain.FulfilmentStream(id), 1)
		if err != nil || len(evs) == 0 {
			t.Fatal(err)
		}
		return evs[len(evs)-1].Type
	}

	pass(map[string]int{provisioning.SweptProvisioned: 1})
	if got := last1("first"); got != "fulfilment.provisioned" {
		t.Errorf("first in line: last event %s", got)
	}
	if got := last1("second"); got != "fulfilment.awaiting_provisioning" {
		t.Errorf("second in line: last event %s", got)
	}
	pass(map[string]int{})

	clock.Advance(24*time.Hour + time.Second)
	pass(map[string]int{provisioning.SweptEnded: 1, provisioning.SweptEstimate: 1})
	if got := last1("day"); got != "fulfilment.cancelled" {
		t.Errorf("day pass: last event %s", got)
	}
	if got := last1("second"); got != "fulfilment.estimate_changed" {
		t.Errorf("passed estimate: last event %s", got)
	}

	clock.Set(t0.Add(time.Second + domain.DefaultUndeliveredAfter))
	pass(map[string]int{provisioning.SweptUndelivered: 1})
	if got := last1("second"); got != "fulfilment.cancelled" {
		t.Errorf("undelivered: last event %s", got)
	}
	pass(map[string]int{})
}
