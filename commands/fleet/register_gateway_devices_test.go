package fleet_test

import (
	"sync"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// A gateway's devices are registered once per key: reported again (every
// reconnection), concurrently, or beside a new one, they keep their ids.
// They carry the gateway and the key, and a gateway's sim saves no state
// here.
func TestRegisterGatewayDevicesOncePerKey(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{})
	ctx := testutil.Context(t)
	gw := domain.NewID(domain.PrefixGateway)
	h := env.Fleet.RegisterGatewayDevices()
	sim1 := fleet.GatewayDevice{Key: "sim-1", Backend: domain.BackendSim, Model: "Pixel7", Serial: "GW-SIM-1", Width: 1080, Height: 2400}
	adb := fleet.GatewayDevice{Key: "adb-emulator-5554", Backend: domain.BackendADB, Model: "sdk_gphone64", Serial: "emulator-5554"}

	const racers = 4
	got := make([]map[string]string, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			got[i], errs[i] = h.Handle(ctx, fleet.RegisterGatewayDevices{GatewayID: gw, OrgID: env.OrgID, Devices: []fleet.GatewayDevice{sim1}})
		})
	}
	wg.Wait()
	for i := range racers {
		if errs[i] != nil || got[i]["sim-1"] == "" || got[i]["sim-1"] != got[0]["sim-1"] {
			t.Fatalf("concurrent registration %d: %v (%v); want one id for sim-1, %v", i, got[i], errs[i], got[0])
		}
	}
	simID := got[0]["sim-1"]

	again, err := h.Handle(ctx, fleet.RegisterGatewayDevices{GatewayID: gw, GatewayName: "lab-1", OrgID: env.OrgID, Devices: []fleet.GatewayDevice{sim1, adb}})
	if err != nil || again["sim-1"] != simID || again[adb.Key] == "" || again[adb.Key] == simID {
		t.Fatalf("second report with a new device: %v (%v); want sim-1 = %s and a new id for %s", again, err, simID, adb.Key)
	}
	// Another gateway's sim-1 is another device.
	other, err := h.Handle(ctx, fleet.RegisterGatewayDevices{GatewayID: domain.NewID(domain.PrefixGateway), OrgID: env.OrgID, Devices: []fleet.GatewayDevice{sim1}})
	if err != nil || other["sim-1"] == simID {
		t.Fatalf("another gateway's sim-1: %v (%v); want a device of its own", other, err)
	}

	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'device.registered' AND org_id = $1`, env.OrgID).Scan(&n); err != nil || n != 3 {
		t.Fatalf("device.registered events: %d (%v); want 3", n, err)
	}
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM device_states WHERE org_id = $1`, env.OrgID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("device_states rows: %d (%v); want none (the gateway keeps its sims' state)", n, err)
	}
	for key, id := range again {
		d := foldDevice(t, env, id)
		name := "lab-1/" + key // named after the gateway that first reported it
		if key == "sim-1" {
			name = key // first reported with no gateway name
		}
		if d.GatewayID != gw || d.GatewayKey != key || d.Name != name || d.HostKey() != domain.GatewayHostKey(gw) || d.OrgID != env.OrgID {
			t.Fatalf("device %s: %+v; want gateway %s, key %s, name %s", id, d, gw, key, name)
		}
	}
	if d := foldDevice(t, env, simID); d.Model != "Pixel7" || d.Serial != "GW-SIM-1" || d.Width != 1080 || d.Backend != domain.BackendSim {
		t.Fatalf("sim-1 as registered: %+v", d)
	}

	for _, bad := range []fleet.RegisterGatewayDevices{
		{OrgID: env.OrgID, Devices: []fleet.GatewayDevice{sim1}},
		{GatewayID: gw, Devices: []fleet.GatewayDevice{sim1}},
		{GatewayID: gw, OrgID: env.OrgID, Devices: []fleet.GatewayDevice{{Key: "has space", Backend: domain.BackendSim}}},
		{GatewayID: gw, OrgID: env.OrgID, Devices: []fleet.GatewayDevice{{Key: "robot-1", Backend: domain.BackendRobot}}},
		{GatewayID: gw, OrgID: env.OrgID, Devices: []fleet.GatewayDevice{sim1, sim1}},
	} {
		if _, err := h.Handle(ctx, bad); domain.ErrorCode(err) != domain.CodeInvalidArgument {
			t.Errorf("%+v: %v; want invalid_argument", bad, err)
		}
	}
}

// foldDevice reads a device's state from its stream.
func foldDevice(t *testing.T, env *fleettest.Env, id string) domain.Device {
	t.Helper()
	evs, err := env.Store.Load(testutil.Context(t), domain.DeviceStream(id), 1)
	if err != nil {
		t.Fatal(err)
	}
	var d domain.Device
	for _, e := range evs {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		d.Apply(ev, e.StreamVersion)
	}
	return d
}
