package provisioning_test

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

func (e *poolEnv) takeKeyed(t *testing.T, auth domain.Auth, ttl int, key string) (provisioning.TakenPoolDevice, error) {
	t.Helper()
	return e.app.Provisioning.TakePoolDevice.Handle(testutil.Context(t),
		provisioning.TakePoolDevice{Auth: auth, TTLSeconds: ttl, IdempotencyKey: key})
}

// countTaken counts pool.device_taken on the pool stream.
func (e *poolEnv) countTaken(t *testing.T) int {
	t.Helper()
	n := 0
	for _, name := range e.poolEvents(t) {
		if name == "pool.device_taken" {
			n++
		}
	}
	return n
}

// TestTakeIdempotencyKeyReplaysFirstAnswer: a take repeated with its
// Idempotency-Key within 24 hours takes no second unit and answers the
// first take exactly, marked replayed, even once that unit went back; the
// key used for another request is idempotency_conflict (not retryable);
// a key is the organisation's own; after 24 hours it takes again.
func TestTakeIdempotencyKeyReplaysFirstAnswer(t *testing.T) {
	env := newPoolEnv(t, 5, 2)
	orgA, orgB := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, orgA)
	grantPayg(t, env.Store, orgB)
	a := person(orgA)

	first, err := env.takeKeyed(t, a, 60, "take-1")
	if err != nil || first.Replayed {
		t.Fatalf("first take: %+v %v; want a take, not replayed", first, err)
	}
	env.clock.Advance(5 * time.Second)
	again, err := env.takeKeyed(t, a, 60, "take-1")
	if err != nil || !again.Replayed {
		t.Fatalf("repeat: %+v %v; want the first answer replayed", again, err)
	}
	again.Replayed = false
	if !reflect.DeepEqual(again, first) {
		t.Errorf("replayed answer\n%+v\nwant the first\n%+v", again, first)
	}
	if n := env.countTaken(t); n != 1 {
		t.Fatalf("pool stream holds %d takes after a repeat; want 1", n)
	}
	// The default spelled out (ttl 300) asks something else than ttl 60.
	_, err = env.takeKeyed(t, a, 300, "take-1")
	if e := domain.AsError(err); e == nil || e.Code != domain.CodeIdempotencyConflict || e.Retryable == nil || *e.Retryable {
		t.Fatalf("same key, other ttl: got %v; want idempotency_conflict, not retryable", err)
	}

	// The unit goes back; the key still answers the first take.
	env.clock.Advance(time.Minute)
	if n := env.returnDue(t); n != 1 {
		t.Fatalf("return pass put back %d; want 1", n)
	}
	late, err := env.takeKeyed(t, a, 60, "take-1")
	late.Replayed = false
	if err != nil || !reflect.DeepEqual(late, first) {
		t.Errorf("repeat after the return: %+v %v; want the first answer", late, err)
	}
	if n := env.countTaken(t); n != 1 {
		t.Errorf("pool stream holds %d takes; want 1", n)
	}

	// Another organisation's same key is its own take.
	other, err := env.takeKeyed(t, person(orgB), 60, "take-1")
	if err != nil || other.Replayed || other.Device.DeviceID == first.Device.DeviceID {
		t.Errorf("B with A's key: %+v %v; want a take of its own", other, err)
	}

	// 24 hours after the first take, the key takes a new unit.
	env.clock.Advance(domain.CheckoutKeyWindow)
	fresh, err := env.takeKeyed(t, a, 60, "take-1")
	if err != nil || fresh.Replayed || fresh.Device.DeviceID == first.Device.DeviceID {
		t.Errorf("after 24 hours: %+v %v; want a new take", fresh, err)
	}
}

// TestTakeIdempotencyKeyConcurrentRepeats: a take sent many times at once
// with one key (a client retrying a lost answer) takes one unit; every
// answer names it, and exactly one is not a replay.
func TestTakeIdempotencyKeyConcurrentRepeats(t *testing.T) {
	env := newPoolEnv(t, 5, 5)
	org := domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, org)
	const n = 8
	answers := make([]provisioning.TakenPoolDevice, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = env.app.Provisioning.TakePoolDevice.Handle(testutil.Context(t),
				provisioning.TakePoolDevice{Auth: person(org), TTLSeconds: 60, IdempotencyKey: "retry-me"})
		}()
	}
	close(start)
	wg.Wait()
	firsts := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("take %d: %v", i, errs[i])
		}
		if !answers[i].Replayed {
			firsts++
		}
		if answers[i].Device.DeviceID != answers[0].Device.DeviceID || answers[i].Lease.LeaseID != answers[0].Lease.LeaseID {
			t.Errorf("take %d answered %s/%s; want %s/%s", i, answers[i].Device.DeviceID, answers[i].Lease.LeaseID,
				answers[0].Device.DeviceID, answers[0].Lease.LeaseID)
		}
	}
	if firsts != 1 {
		t.Errorf("%d answers are not replays; want 1", firsts)
	}
	if got := env.countTaken(t); got != 1 {
		t.Errorf("pool stream holds %d takes; want 1", got)
	}
}

// endingDevices is the fleet, but the first registration it adds to a
// unit first ends the organisation's pay-as-you-go order: the end of
// access commits between the take's reading of the account and its
// append.
type endingDevices struct {
	provisioning.Devices
	once sync.Once
	end  func()
}

func (d *endingDevices) RegisterInto(u *eventstore.Unit, reg domain.DeviceRegistered,
	then func(d *domain.Device) ([]domain.Event, error)) (domain.Device, error) {
	d.once.Do(d.end)
	return d.Devices.RegisterInto(u, reg, then)
}

// TestTakeRacingEndOfAccessIsRefused: a take whose access ends while it
// decides is refused forbidden, and lends nothing.
func TestTakeRacingEndOfAccessIsRefused(t *testing.T) {
	clock := fleettest.NewClock(poolStart)
	env := fleettest.Start(t, fleettest.Options{Clock: clock})
	catalog := domain.DefaultCatalog()
	catalog.Pool = &domain.CatalogPool{Sku: domain.SkuEmulator, Size: 3}
	org := domain.NewID(domain.PrefixOrganisation)
	order := grantPayg(t, env.Store, org)
	devices := &endingDevices{Devices: env.Fleet, end: func() { endPayg(t, env.Store, org, order) }}
	p := provisioning.New(provisioning.Config{Store: env.Store, ReadModels: env.Runner, Catalog: catalog, Devices: devices,
		PaygDeviceLimit: 2, Now: clock.Now})
	pe := &poolEnv{Env: env, clock: clock, app: commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})}

	got, err := pe.take(t, person(org), 60)
	if domain.ErrorCode(err) != domain.CodeForbidden {
		t.Fatalf("take racing the end of access: got %+v %v; want forbidden", got, err)
	}
	if names := pe.poolEvents(t); len(names) != 0 {
		t.Errorf("pool stream %v; want nothing lent", names)
	}
}

// TestPoolDeviceIsThePoolSkusModel: a pool device is registered as the
// simulator model the pool's sku names (its screen with it), not the
// simulator's default.
func TestPoolDeviceIsThePoolSkusModel(t *testing.T) {
	clock := fleettest.NewClock(poolStart)
	env := fleettest.Start(t, fleettest.Options{Clock: clock})
	catalog := domain.DefaultCatalog()
	for i := range catalog.Skus {
		if catalog.Skus[i].Sku == domain.SkuEmulator {
			catalog.Skus[i].SimModel = "Compact"
		}
	}
	catalog.Pool = &domain.CatalogPool{Sku: domain.SkuEmulator, Size: 2}
	p := provisioning.New(provisioning.Config{Store: env.Store, ReadModels: env.Runner, Catalog: catalog, Devices: env.Fleet,
		PaygDeviceLimit: 2, Now: clock.Now})
	pe := &poolEnv{Env: env, clock: clock, app: commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})}
	org := domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, org)

	got := pe.mustTake(t, person(org), 60)
	if got.Device.Model != "Compact" || got.Device.Width != 720 || got.Device.Height != 1600 {
		t.Errorf("answered device %s %dx%d; want the sku's Compact, 720x1600", got.Device.Model, got.Device.Width, got.Device.Height)
	}
	view, err := env.App.Fleet.GetDevice.Handle(testutil.Context(t), fleet.GetDevice{Auth: person(org), DeviceID: got.Device.DeviceID})
	if err != nil || view.Model != "Compact" {
		t.Errorf("GET the device: %+v %v; want model Compact", view, err)
	}
	var model string
	if err := env.Pool.QueryRow(testutil.Context(t), `SELECT model FROM device_states WHERE device_id = $1`, got.Device.DeviceID).Scan(&model); err != nil || model != "Compact" {
		t.Errorf("saved sim state is model %q (%v); want Compact", model, err)
	}
}
