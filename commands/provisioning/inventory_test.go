package provisioning_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// secondInstance is another service instance's provisioning over the same
// PostgreSQL: its own repositories and caches, the same store.
func (e *fulEnv) secondInstance(t *testing.T, devices provisioning.Devices) commands.Application {
	t.Helper()
	return e.instance(t, devices, nil)
}

// instance is secondInstance with the runs it ends on the devices it
// retires (nil: none).
func (e *fulEnv) instance(t *testing.T, devices provisioning.Devices, runs provisioning.RunsOnDevice) commands.Application {
	t.Helper()
	p := provisioning.New(provisioning.Config{Store: e.Store, Catalog: e.p.Catalog(), Devices: devices, Runs: runs,
		WebhookSecret: fulSecret, Now: e.clock.Now,
		ReadModels: testutil.ReadModels{RM: e.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: e.fr}}})
	return commands.NewApplication(commands.Capabilities{Fleet: e.Fleet, Provisioning: p})
}

// fulfilmentState folds a fulfilment's stream (the write side, not the
// read model).
func (e *fulEnv) fulfilmentState(t *testing.T, id string) domain.Fulfilment {
	t.Helper()
	var f domain.Fulfilment
	e.streamEvents(t, domain.FulfilmentStream(id), f.Apply)
	return f
}

// TestInventoryClaimedOnceAcrossInstances: payments of a slot with one
// unit, applied at once by two service instances over one PostgreSQL,
// provision one phone (one device registered); the others await. When
// that phone ends, its unit is released, and sweeps running at once on
// both instances hand it to one awaiting phone.
func TestInventoryClaimedOnceAcrossInstances(t *testing.T) {
	e := newFulEnv(t)
	apps := []commands.Application{e.app, e.secondInstance(t, e.Fleet)}
	const buyers = 6
	var orgs, ids []string
	var paid [][]byte
	for n := range buyers {
		org := domain.NewID(domain.PrefixOrganisation)
		order, fids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
		orgs, ids = append(orgs, org), append(ids, fids[0])
		paid = append(paid, stripeEvent(t, fmt.Sprintf("evt_race_%d", n), payments.EventCheckoutCompleted,
			session(org, order, "payment", "paid", map[string]any{"payment_intent": "pi_race_" + order}), e.clock.Now()))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, buyers)
	for n := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			sig := payments.SignWebhookForTest(paid[n], fulSecret, e.clock.Now())
			_, errs[n] = apps[n%2].Provisioning.ReceiveProviderEvent.Handle(testutil.Context(t),
				provisioning.ReceiveProviderEvent{Payload: paid[n], Signature: sig})
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	provisioned := func() []string {
		var out []string
		for _, id := range ids {
			if f := e.fulfilmentState(t, id); f.State == domain.FulfilmentProvisionedState {
				out = append(out, id)
			}
		}
		return out
	}
	registered := func() int {
		n := 0
		for _, org := range orgs {
			n += e.registrations(t, org)
		}
		return n
	}
	holders := provisioned()
	if len(holders) != 1 || registered() != 1 {
		t.Fatalf("%d phones provisioned, %d devices registered, of a slot with one unit; want 1 and 1", len(holders), registered())
	}

	// The phone ends: its unit goes back, once.
	holder := e.fulfilmentState(t, holders[0])
	if _, err := e.app.Provisioning.CancelFulfilment.Handle(testutil.Context(t),
		provisioning.CancelFulfilment{Auth: fulAdmin(holder.OrgID), FulfilmentID: holder.FulfilmentID}); err != nil {
		t.Fatal(err)
	}
	if got := e.streamTypes(t, domain.InventoryStream(domain.SkuEmulator)); fmt.Sprint(got) !=
		"[inventory.opened inventory.unit_claimed inventory.unit_released]" {
		t.Fatalf("inventory stream %v; want opened, one claim, its release", got)
	}
	// Sweeps on both instances, each over every awaiting phone, at once.
	start = make(chan struct{})
	for n := range 2 {
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := apps[n].Provisioning.SweepFulfilment.Handle(testutil.Context(t), provisioning.SweepFulfilment{FulfilmentID: id}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if now := provisioned(); len(now) != 1 || now[0] == holder.FulfilmentID || registered() != 2 {
		t.Errorf("after the release and concurrent sweeps: provisioned %v, %d devices registered in all; want one other phone, 2",
			now, registered())
	}
}

// failingDevices is the fleet, but every registration it adds to a unit
// makes that unit fail to commit: a crash of the work that registers a
// paid phone's device.
type failingDevices struct{ provisioning.Devices }

var errCrash = errors.New("crash before the commit")

func (d failingDevices) RegisterInto(u *eventstore.Unit, reg domain.DeviceRegistered,
	then func(d *domain.Device) ([]domain.Event, error)) (domain.Device, error) {
	dev, err := d.Devices.RegisterInto(u, reg, then)
	u.Exec(`SELECT 1 / 0`)
	return dev, err
}

// TestNoOrphanDeviceWhenPaymentNotRecorded: when the work recording a
// payment does not commit, the phone's device is not registered either
// (they are one unit); the redelivery registers exactly one.
func TestNoOrphanDeviceWhenPaymentNotRecorded(t *testing.T) {
	e := newFulEnv(t)
	broken := e.secondInstance(t, failingDevices{e.Fleet})
	org := domain.NewID(domain.PrefixOrganisation)
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	paid := stripeEvent(t, "evt_crash", payments.EventCheckoutCompleted,
		session(org, order, "payment", "paid", map[string]any{"payment_intent": "pi_crash"}), e.clock.Now())
	sig := payments.SignWebhookForTest(paid, fulSecret, e.clock.Now())
	if _, err := broken.Provisioning.ReceiveProviderEvent.Handle(testutil.Context(t),
		provisioning.ReceiveProviderEvent{Payload: paid, Signature: sig}); err == nil {
		t.Fatal("the failing instance applied the payment; want its unit refused")
	}
	if n := e.registrations(t, org); n != 0 {
		t.Fatalf("%d devices registered by work that did not commit; want none", n)
	}
	var states int
	if err := e.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM device_states WHERE org_id = $1`, org).Scan(&states); err != nil || states != 0 {
		t.Fatalf("%d saved sim states (%v); want none", states, err)
	}
	e.mustDeliver(t, paid, provisioning.ProviderEventApplied)
	if f := e.fulfilmentState(t, ids[0]); f.State != domain.FulfilmentProvisionedState || f.DeviceID == "" || e.registrations(t, org) != 1 {
		t.Errorf("after the redelivery: %+v, %d devices; want provisioned with its one device", f, e.registrations(t, org))
	}
}
