package provisioning_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// poolEnv is a running fleet with the provisioning capability over it and
// a shared pool of a given size, on an injected clock.
type poolEnv struct {
	*fleettest.Env
	clock *fleettest.Clock
	app   commands.Application
}

var poolStart = time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)

func newPoolEnv(t *testing.T, size, limit int) *poolEnv {
	t.Helper()
	clock := fleettest.NewClock(poolStart)
	env := fleettest.Start(t, fleettest.Options{Clock: clock, MaxConns: 20})
	catalog := domain.DefaultCatalog()
	catalog.Pool = &domain.CatalogPool{Sku: domain.SkuEmulator, Size: size}
	if size < 0 {
		catalog.Pool = nil
	}
	p := provisioning.New(provisioning.Config{Store: env.Store, ReadModels: env.Runner, Catalog: catalog, Devices: env.Fleet,
		PaygDeviceLimit: limit, Now: clock.Now})
	return &poolEnv{Env: env, clock: clock, app: commands.NewApplication(commands.Capabilities{Fleet: env.Fleet, Provisioning: p})}
}

// person is a signed-in admin of org with every scope.
func person(org string) domain.Auth {
	return domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "u_" + org[len(org)-6:], Role: domain.RoleAdmin,
		Scopes: domain.AllScopes}
}

// grantPayg gives org pay-as-you-go access as the payment webhook records
// it: a payg checkout attempt on the organisation's billing account, then
// its order paid. It returns the order id.
func grantPayg(t *testing.T, store *eventstore.Store, org string) string {
	t.Helper()
	order := domain.NewID(domain.PrefixOrder)
	appendAccount(t, store, org,
		domain.CheckoutStarted{OrgID: org, OrderID: order, FulfilmentIDs: []string{},
			Choice:   domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg, Quantity: 1},
			Currency: "usd", UnitAmount: 3, RequestDigest: "test", By: domain.Actor{Kind: domain.ActorUser, ID: "u_test"}, At: poolStart},
		domain.OrderPaid{OrderID: order, ProviderEventID: "evt_" + order, CustomerID: "cus_test", PaidAt: poolStart})
	return order
}

// endPayg ends the organisation's pay-as-you-go order, as the provider
// ending it would.
func endPayg(t *testing.T, store *eventstore.Store, org, order string) {
	t.Helper()
	appendAccount(t, store, org, domain.OrderEnded{OrderID: order, Reason: domain.EndSubscriptionEnded, At: poolStart})
}

func appendAccount(t *testing.T, store *eventstore.Store, org string, evs ...domain.Event) {
	t.Helper()
	news, err := eventstore.Encode(domain.Events, org, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(testutil.Context(t), domain.AccountStream(org), eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
}

func (e *poolEnv) take(t *testing.T, auth domain.Auth, ttl int) (provisioning.TakenPoolDevice, error) {
	t.Helper()
	return e.app.Provisioning.TakePoolDevice.Handle(testutil.Context(t), provisioning.TakePoolDevice{Auth: auth, TTLSeconds: ttl})
}

func (e *poolEnv) mustTake(t *testing.T, auth domain.Auth, ttl int) provisioning.TakenPoolDevice {
	t.Helper()
	got, err := e.take(t, auth, ttl)
	if err != nil {
		t.Fatalf("take for %s: %v", auth.OrgID, err)
	}
	return got
}

func (e *poolEnv) returnDue(t *testing.T) int {
	t.Helper()
	n, err := e.app.Provisioning.ReturnPoolDevices.Handle(testutil.Context(t), provisioning.ReturnPoolDevices{})
	if err != nil {
		t.Fatalf("return pass: %v", err)
	}
	return n
}

// poolEvents lists the pool stream's event names.
func (e *poolEnv) poolEvents(t *testing.T) []string {
	t.Helper()
	evs, err := e.Store.Load(testutil.Context(t), domain.PoolStreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		names = append(names, ev.Type)
	}
	return names
}

// visible reports whether the device is in org's device list.
func (e *poolEnv) visible(t *testing.T, org, deviceID string) bool {
	t.Helper()
	e.Settle(t)
	page, err := e.App.Fleet.ListDevices.Handle(testutil.Context(t), fleet.ListDevices{Auth: person(org), DeviceQuery: fleet.DeviceQuery{Limit: 200}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range page.Devices {
		if d.DeviceID == deviceID {
			return true
		}
	}
	return false
}

func errExtra(err error, key string) any { return domain.AsError(err).Extra[key] }

func TestTakePoolDeviceRefusals(t *testing.T) {
	env := newPoolEnv(t, 3, 2)
	org := domain.NewID(domain.PrefixOrganisation)
	tests := []struct {
		name   string
		auth   domain.Auth
		ttl    int
		payg   bool
		code   domain.Code
		reason string
	}{
		{name: "no pay-as-you-go access", auth: person(org), code: domain.CodeForbidden},
		{name: "an API key, even with access", payg: true, code: domain.CodePermissionDenied,
			auth: domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes}},
		{name: "no devices:lease", payg: true, code: domain.CodePermissionDenied,
			auth: domain.Auth{OrgID: org, Kind: domain.PrincipalApp, UserID: "u_1", ClientID: "app", Scopes: []domain.Scope{domain.ScopeDevicesRead}}},
		{name: "ttl out of bounds", payg: true, auth: person(org), ttl: 5, code: domain.CodeInvalidArgument},
	}
	granted := false
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.payg && !granted {
				grantPayg(t, env.Store, org)
				granted = true
			}
			_, err := env.take(t, tt.auth, tt.ttl)
			if got := domain.ErrorCode(err); got != tt.code {
				t.Fatalf("got %v; want %s", err, tt.code)
			}
		})
	}
	if names := env.poolEvents(t); len(names) != 0 {
		t.Errorf("refused takes recorded %v; want nothing", names)
	}

	t.Run("no pool", func(t *testing.T) {
		none := newPoolEnv(t, -1, 2)
		org := domain.NewID(domain.PrefixOrganisation)
		grantPayg(t, none.Store, org)
		if _, err := none.take(t, person(org), 0); domain.ErrorCode(err) != domain.CodeServiceUnavailable {
			t.Fatalf("got %v; want service_unavailable", err)
		}
	})
}

// TestTakePoolDeviceLendsDeviceAndLease: with access, a take answers a
// device registered for the organisation alone and the caller's lease on
// it, recorded in one append with pool.device_taken; the device works.
func TestTakePoolDeviceLendsDeviceAndLease(t *testing.T) {
	env := newPoolEnv(t, 3, 2)
	orgA, orgB := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, orgA)
	a := person(orgA)
	got := env.mustTake(t, a, 60)

	dev, lease := got.Device, got.Lease
	if dev.DeviceID == "" || lease.DeviceID != dev.DeviceID || !domain.HasPrefix(lease.LeaseID, domain.PrefixLease) {
		t.Fatalf("got device %+v lease %+v; want a device and a lease on it", dev, lease)
	}
	if lease.FencingToken != 1 || !lease.AcquiredAt.Equal(poolStart) || !lease.ExpiresAt.Equal(poolStart.Add(time.Minute)) ||
		lease.Holder.UserID != a.UserID {
		t.Errorf("lease %+v; want token 1 held by %s from %s for 60 s", lease, a.UserID, poolStart)
	}
	if dev.Backend != domain.BackendSim || !dev.Leased || dev.Name != "Emulator (pay-as-you-go)" {
		t.Errorf("device %+v; want a leased sim named for the pool's sku", dev)
	}
	if !env.visible(t, orgA, dev.DeviceID) {
		t.Errorf("organisation A does not list its pool device")
	}
	if env.visible(t, orgB, dev.DeviceID) {
		t.Errorf("organisation B lists A's pool device")
	}
	if _, err := env.App.Fleet.GetDevice.Handle(testutil.Context(t), fleet.GetDevice{Auth: person(orgB), DeviceID: dev.DeviceID}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Errorf("B reading A's pool device: got %v; want device_unavailable (not_found)", err)
	}

	// The pool stream and the device stream were appended together.
	evs, err := env.Store.Load(testutil.Context(t), domain.PoolStreamID, 1)
	if err != nil || len(evs) != 1 || evs[0].Type != "pool.device_taken" || evs[0].OrgID != orgA {
		t.Fatalf("pool stream: %v %v; want one pool.device_taken for A", evs, err)
	}
	var taken domain.PoolDeviceTaken
	if err := json.Unmarshal(evs[0].Data, &taken); err != nil || taken.DeviceID != dev.DeviceID || taken.LeaseID != lease.LeaseID {
		t.Errorf("pool.device_taken %s; want device %s lease %s", evs[0].Data, dev.DeviceID, lease.LeaseID)
	}
	devEvs, err := env.Store.Load(testutil.Context(t), domain.DeviceStream(dev.DeviceID), 1)
	if err != nil || len(devEvs) != 2 || devEvs[0].Type != "device.registered" || devEvs[1].Type != "lease.acquired" ||
		devEvs[0].TransactionID != evs[0].TransactionID {
		t.Errorf("device stream: %v %v; want device.registered and lease.acquired in the take's transaction", devEvs, err)
	}

	// The phone is real: the holder acts on it under the lease.
	out, err := env.Fleet.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: a, DeviceID: dev.DeviceID,
		Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "pool-1", LeaseID: lease.LeaseID})
	if err != nil {
		t.Fatalf("act on the pool device: %v (%+v)", err, out)
	}
}

// TestTakePoolDeviceAtLimit: an organisation at its limit is refused with
// fleet_at_capacity naming holding, limit and the time until its earliest
// lease ends (at least a second).
func TestTakePoolDeviceAtLimit(t *testing.T) {
	env := newPoolEnv(t, 5, 2)
	org := domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, org)
	a := person(org)
	first := env.mustTake(t, a, 120)
	env.clock.Advance(10 * time.Second)
	env.mustTake(t, a, 60) // ends at 70 s, before the first (120 s)
	env.clock.Advance(5 * time.Second)

	_, err := env.take(t, a, 0)
	e := domain.AsError(err)
	if e.Code != domain.CodeFleetAtCapacity || e.Extra["holding"] != 2 || e.Extra["limit"] != 2 || e.Retryable == nil || !*e.Retryable {
		t.Fatalf("third take: got %v %v; want retryable fleet_at_capacity holding 2 limit 2", err, e.Extra)
	}
	if got := e.Extra["retryAfterMs"]; got != int64(55000) {
		t.Errorf("retryAfterMs %v; want 55000 (the second lease ends 55 s from now)", got)
	}

	// The earliest lease renewed far ahead: the other one decides.
	if _, err := env.Fleet.RenewLease().Handle(testutil.Context(t), fleet.RenewLease{Auth: a, DeviceID: first.Device.DeviceID,
		LeaseID: first.Lease.LeaseID, TTLSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(54*time.Second + 999*time.Millisecond + 400*time.Microsecond)
	if _, err := env.take(t, a, 0); errExtra(err, "retryAfterMs") != int64(1000) {
		t.Errorf("0.6 ms before a lease ends: got %v %v; want retryAfterMs 1000 (the least)", err, errExtra(err, "retryAfterMs"))
	}
	// Run out but not returned yet: still held, retry in a second.
	env.clock.Advance(time.Second)
	if _, err := env.take(t, a, 0); domain.ErrorCode(err) != domain.CodeFleetAtCapacity || errExtra(err, "retryAfterMs") != int64(1000) {
		t.Errorf("a held lease run out: got %v %v; want fleet_at_capacity, retryAfterMs 1000", err, errExtra(err, "retryAfterMs"))
	}
	// Once the return pass has run, the organisation may take again.
	if n := env.returnDue(t); n != 1 {
		t.Fatalf("return pass put back %d; want 1", n)
	}
	env.mustTake(t, a, 0)
}

// TestTakePoolDeviceExhausted: with every unit out, another organisation
// is refused with device_unavailable, reason pool_exhausted.
func TestTakePoolDeviceExhausted(t *testing.T) {
	env := newPoolEnv(t, 2, 2)
	orgA, orgB := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, orgA)
	grantPayg(t, env.Store, orgB)
	env.mustTake(t, person(orgA), 300)
	env.mustTake(t, person(orgA), 30)
	env.clock.Advance(10 * time.Second)
	_, err := env.take(t, person(orgB), 0)
	e := domain.AsError(err)
	if e.Code != domain.CodeDeviceUnavailable || e.Extra["reason"] != domain.ReasonPoolExhausted || e.Extra["retryAfterMs"] != int64(20000) ||
		e.Retryable == nil || !*e.Retryable {
		t.Fatalf("got %v %v; want retryable device_unavailable pool_exhausted, retryAfterMs 20000", err, e.Extra)
	}
	if _, ok := e.Extra["holding"]; ok {
		t.Errorf("pool_exhausted names %v; it must not tell B about A's holding", e.Extra)
	}
}

// TestConcurrentTakesKeepLimitAndPool: many takes at once from several
// organisations never lend more units than the pool has, nor more to one
// organisation than its limit, and fill the pool.
func TestConcurrentTakesKeepLimitAndPool(t *testing.T) {
	const size, limit, orgs, perOrg = 5, 2, 4, 4
	env := newPoolEnv(t, size, limit)
	var auths []domain.Auth
	for range orgs {
		org := domain.NewID(domain.PrefixOrganisation)
		grantPayg(t, env.Store, org)
		auths = append(auths, person(org))
	}
	var mu sync.Mutex
	won := map[string]int{}
	var refusals []error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range auths {
		for range perOrg {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := env.app.Provisioning.TakePoolDevice.Handle(testutil.Context(t), provisioning.TakePoolDevice{Auth: a})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refusals = append(refusals, err)
					return
				}
				won[a.OrgID]++
			}()
		}
	}
	close(start)
	wg.Wait()
	total := 0
	for org, n := range won {
		if n > limit {
			t.Errorf("organisation %s got %d units; limit %d", org, n, limit)
		}
		total += n
	}
	if total != size {
		t.Errorf("lent %d units in all; want the pool's %d", total, size)
	}
	for _, err := range refusals {
		if c := domain.ErrorCode(err); c != domain.CodeFleetAtCapacity && c != domain.CodeDeviceUnavailable {
			t.Errorf("refusal %v; want fleet_at_capacity or device_unavailable", err)
		}
	}
	if names := env.poolEvents(t); len(names) != size {
		t.Errorf("pool stream holds %d events; want %d takes", len(names), size)
	}
	var registered int
	if err := env.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM device_states WHERE backend = 'sim' AND org_id = ANY($1)`,
		[]string{auths[0].OrgID, auths[1].OrgID, auths[2].OrgID, auths[3].OrgID}).Scan(&registered); err != nil || registered != size {
		t.Errorf("registered %d pool devices (%v); want %d", registered, err, size)
	}
}

// TestPoolDeviceReturnedWhenLeaseReleased: releasing the lease gives the
// unit back on the next pass (once): the device leaves the organisation,
// its holding drops, and another organisation can take the unit.
func TestPoolDeviceReturnedWhenLeaseReleased(t *testing.T) {
	env := newPoolEnv(t, 1, 1)
	orgA, orgB := domain.NewID(domain.PrefixOrganisation), domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, orgA)
	grantPayg(t, env.Store, orgB)
	a := person(orgA)
	got := env.mustTake(t, a, 0)
	if n := env.returnDue(t); n != 0 {
		t.Fatalf("return pass with the lease in force put back %d; want 0", n)
	}
	if _, err := env.take(t, person(orgB), 0); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("B while A holds the only unit: got %v; want device_unavailable", err)
	}
	if err := cqrs.Err(env.Fleet.ReleaseLease().Handle(testutil.Context(t), fleet.ReleaseLease{Auth: a, DeviceID: got.Device.DeviceID,
		LeaseID: got.Lease.LeaseID})); err != nil {
		t.Fatal(err)
	}
	if n := env.returnDue(t); n != 1 {
		t.Fatalf("return pass put back %d; want 1", n)
	}
	if n := env.returnDue(t); n != 0 {
		t.Fatalf("second return pass put back %d; want 0 (once)", n)
	}
	if env.visible(t, orgA, got.Device.DeviceID) {
		t.Errorf("the returned device is still listed for A")
	}
	if _, err := env.Fleet.AcquireLease().Handle(testutil.Context(t), fleet.AcquireLease{Auth: a, DeviceID: got.Device.DeviceID}); domain.ErrorCode(err) != domain.CodeDeviceUnavailable || errExtra(err, "reason") != domain.ReasonNotFound {
		t.Errorf("A leasing the returned device: got %v; want device_unavailable not_found", err)
	}
	b := env.mustTake(t, person(orgB), 0)
	if b.Device.DeviceID == got.Device.DeviceID {
		t.Errorf("B got A's device id; want a fresh device")
	}
	// A holds nothing now: at limit 1 it is refused only for the pool.
	if _, err := env.take(t, a, 0); domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Errorf("A after its return, with B holding the unit: got %v; want device_unavailable pool_exhausted", err)
	}
	want := []string{"pool.device_taken", "pool.device_returned", "pool.device_taken"}
	if got := env.poolEvents(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pool stream %v; want %v", got, want)
	}
	devEvs, err := env.Store.Load(testutil.Context(t), domain.DeviceStream(got.Device.DeviceID), 1)
	if err != nil || devEvs[len(devEvs)-1].Type != "device.retired" {
		t.Errorf("device stream %v %v; want it to end retired", devEvs, err)
	}
}

// TestPoolDeviceReturnedWhenLeaseRunsOut: a lease that runs out returns
// the unit without the lease-expiry worker; a renewed one keeps it, and
// the retirement records the expiry it ended.
func TestPoolDeviceReturnedWhenLeaseRunsOut(t *testing.T) {
	env := newPoolEnv(t, 2, 2)
	org := domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, org)
	a := person(org)
	kept := env.mustTake(t, a, 30)
	lapsed := env.mustTake(t, a, 30)
	env.clock.Advance(20 * time.Second)
	if _, err := env.Fleet.RenewLease().Handle(testutil.Context(t), fleet.RenewLease{Auth: a, DeviceID: kept.Device.DeviceID,
		LeaseID: kept.Lease.LeaseID, TTLSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(10 * time.Second)
	if n := env.returnDue(t); n != 1 {
		t.Fatalf("return pass put back %d; want 1 (the lapsed one)", n)
	}
	if env.visible(t, org, lapsed.Device.DeviceID) || !env.visible(t, org, kept.Device.DeviceID) {
		t.Errorf("want the lapsed device gone and the renewed one kept")
	}
	devEvs, err := env.Store.Load(testutil.Context(t), domain.DeviceStream(lapsed.Device.DeviceID), 1)
	if err != nil || len(devEvs) != 4 || devEvs[2].Type != "lease.expired" || devEvs[3].Type != "device.retired" {
		t.Errorf("lapsed device stream %v %v; want registered, acquired, expired, retired", devEvs, err)
	}
}

// TestPoolDevicesReturnedWhenAccessEnds: when the organisation's
// pay-as-you-go order ends, its units go back though their leases are in
// force, and it can take no more.
func TestPoolDevicesReturnedWhenAccessEnds(t *testing.T) {
	env := newPoolEnv(t, 3, 2)
	org := domain.NewID(domain.PrefixOrganisation)
	order := grantPayg(t, env.Store, org)
	a := person(org)
	got := env.mustTake(t, a, 600)
	endPayg(t, env.Store, org, order)
	if n := env.returnDue(t); n != 1 {
		t.Fatalf("return pass put back %d; want 1", n)
	}
	evs, err := env.Store.Load(testutil.Context(t), domain.PoolStreamID, 2)
	var ret domain.PoolDeviceReturned
	if err != nil || len(evs) != 1 || json.Unmarshal(evs[0].Data, &ret) != nil || ret.Reason != domain.PoolReturnAccessEnded ||
		ret.DeviceID != got.Device.DeviceID {
		t.Errorf("return event %v %v; want device %s back for access_ended", evs, err, got.Device.DeviceID)
	}
	if _, err := env.take(t, a, 0); domain.ErrorCode(err) != domain.CodeForbidden {
		t.Errorf("take after access ended: got %v; want forbidden", err)
	}
}

// TestConcurrentReturnPassesReturnOnce: passes running at once (several
// instances) record each return once.
func TestConcurrentReturnPassesReturnOnce(t *testing.T) {
	env := newPoolEnv(t, 4, 4)
	org := domain.NewID(domain.PrefixOrganisation)
	grantPayg(t, env.Store, org)
	for range 4 {
		env.mustTake(t, person(org), 10)
	}
	env.clock.Advance(11 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := env.app.Provisioning.ReturnPoolDevices.Handle(testutil.Context(t), provisioning.ReturnPoolDevices{})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 4 {
		t.Errorf("passes put back %d in all; want 4", total)
	}
	returns := 0
	for _, name := range env.poolEvents(t) {
		if name == "pool.device_returned" {
			returns++
		}
	}
	if returns != 4 {
		t.Errorf("pool stream records %d returns; want 4", returns)
	}
	var retired int
	if err := env.Pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM events WHERE event_type = 'device.retired' AND org_id = $1`, org).Scan(&retired); err != nil || retired != 4 {
		t.Errorf("%d device.retired (%v); want 4", retired, err)
	}
}
