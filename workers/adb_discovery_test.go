package workers_test

import (
	"slices"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestADBDiscovery: a phone connected to the adb server is registered as
// an adb device of the organisation (one device.registered event, by the
// discovery worker), then recorded offline when its daemon dies and
// online when it returns, one event each time.
func TestADBDiscovery(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "adb-discover")
	env := fleettest.Start(t, fleettest.Options{ADBAddr: server})
	env.StartADBDiscovery(t)
	ctx := testutil.Context(t)

	// history lists the device's events by name, oldest first, and who
	// appended its registration.
	history := func(id string) (names []string, registeredBy string) {
		t.Helper()
		rows, err := env.Pool.Query(ctx, `SELECT event_type, metadata->>'actorId' FROM events WHERE stream_id = $1 ORDER BY position`,
			domain.DeviceStream(id))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name, actor string
			if err := rows.Scan(&name, &actor); err != nil {
				t.Fatal(err)
			}
			if name == "device.registered" {
				registeredBy = actor
			}
			names = append(names, name)
		}
		return names, registeredBy
	}
	devicesWithSerial := func() []string {
		t.Helper()
		env.Settle(t)
		rows, err := env.Pool.Query(ctx, `SELECT device_id FROM public.devices WHERE org_id = $1 AND backend = 'adb' AND serial = $2`,
			env.OrgID, daemon.Serial())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}

	var ids []string
	for deadline := time.Now().Add(time.Minute); len(ids) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("discovery did not register %s within a minute", daemon.Serial())
		}
		ids = devicesWithSerial()
	}
	dev := ids[0]
	env.WaitDeviceStatus(t, dev, domain.DeviceOnline)

	daemon.Kill()
	env.WaitDeviceStatus(t, dev, domain.DeviceOffline)
	if err := daemon.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.ConnectADB(t, server, daemon.Serial())
	env.WaitDeviceStatus(t, dev, domain.DeviceOnline)

	// Every device list the worker saw meanwhile named the serial again;
	// it is still one device, with one event per change.
	if got := devicesWithSerial(); len(got) != 1 {
		t.Errorf("got devices %v for serial %s; want one", got, daemon.Serial())
	}
	names, by := history(dev)
	if want := []string{"device.registered", "device.went_offline", "device.came_online"}; !slices.Equal(names, want) {
		t.Errorf("got events %v; want %v", names, want)
	}
	if by != "adb-discovery" {
		t.Errorf("got the registration appended by %q; want the adb-discovery worker", by)
	}
}
