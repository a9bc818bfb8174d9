package gateways_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// gatewayConnections returns the connection events of a gateway's stream.
func gatewayConnections(t *testing.T, env *fleettest.Env, gatewayID string) []domain.Event {
	t.Helper()
	evs, err := env.Store.Load(testutil.Context(t), domain.GatewayStream(gatewayID), 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []domain.Event
	for _, r := range evs {
		ev, err := domain.Events.Decode(r.Type, r.SchemaVersion, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		if r.Type != "gateway.enrolled" {
			out = append(out, ev)
		}
	}
	return out
}

// A gateway's tunnels are recorded on its stream: a connection always
// (ending first one still recorded open, as superseded), an end only of
// the tunnel the stream shows open, once, however many instances record
// it at the same time.
func TestRecordGatewayConnection(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Clock: clock})
	ctx := testutil.Context(t)
	h := commands.NewApplication(commands.Capabilities{Gateways: gateways.New(gateways.Config{Store: env.Store, Now: clock.Now})}).Gateways.RecordGatewayConnection
	gw := domain.NewID(domain.PrefixGateway)
	enrolled, err := eventstore.Encode(domain.Events, env.OrgID, domain.Event(domain.GatewayEnrolled{GatewayID: gw, OrgID: env.OrgID,
		Name: "rack", CodeID: "gwc_1", CredentialHash: []byte{1}, EnrolledAt: clock.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(ctx, domain.GatewayStream(gw), eventstore.NoStream, enrolled...); err != nil {
		t.Fatal(err)
	}
	record := func(cmd gateways.RecordGatewayConnection) bool {
		t.Helper()
		cmd.GatewayID = gw
		changed, err := h.Handle(ctx, cmd)
		if err != nil {
			t.Fatalf("%+v: %v", cmd, err)
		}
		return changed
	}
	connectA := gateways.RecordGatewayConnection{Connected: true, Instance: "inst-a", Version: "1.2.0", Channel: "stable", Devices: 2}
	if !record(connectA) {
		t.Fatal("a connection recorded nothing")
	}
	t0 := clock.Now().UTC().Truncate(time.Microsecond)
	want := []domain.Event{domain.GatewayConnected{GatewayID: gw, Instance: "inst-a", Version: "1.2.0", Channel: "stable", Devices: 2, At: t0}}
	if got := gatewayConnections(t, env, gw); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("after the connection: %+v; want %+v", got, want)
	}

	// Another instance's end of a tunnel it no longer serves records nothing.
	clock.Advance(time.Minute)
	if record(gateways.RecordGatewayConnection{Instance: "inst-b", Reason: domain.GatewayReasonClaimLost}) {
		t.Fatal("the end of another instance's tunnel was recorded")
	}
	// A connection while one is recorded open ends it first.
	if !record(gateways.RecordGatewayConnection{Connected: true, Instance: "inst-b"}) {
		t.Fatal("a second connection recorded nothing")
	}
	t1 := t0.Add(time.Minute)
	want = append(want,
		domain.GatewayDisconnected{GatewayID: gw, Instance: "inst-a", Reason: domain.GatewayReasonSuperseded, At: t1},
		domain.GatewayConnected{GatewayID: gw, Instance: "inst-b", At: t1})
	if record(gateways.RecordGatewayConnection{Instance: "inst-a", Reason: domain.GatewayReasonShuttingDown}) {
		t.Fatal("the end of the superseded tunnel was recorded again")
	}

	// The serving instance and the sweep end the tunnel at once: one end.
	clock.Advance(time.Minute)
	const racers = 4
	changed := make([]bool, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			cmd := gateways.RecordGatewayConnection{GatewayID: gw, Instance: "inst-b", Reason: domain.GatewayReasonHeartbeatLost}
			if i%2 == 1 {
				cmd.Instance, cmd.Reason = "", domain.GatewayReasonInstanceLost
			}
			changed[i], errs[i] = h.Handle(ctx, cmd)
		})
	}
	wg.Wait()
	ends := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("concurrent end %d: %v", i, errs[i])
		}
		if changed[i] {
			ends++
		}
	}
	got := gatewayConnections(t, env, gw)
	if ends != 1 || len(got) != len(want)+1 {
		t.Fatalf("concurrent ends: %d recorded, events %+v; want one end after %+v", ends, got, want)
	}
	last, ok := got[len(got)-1].(domain.GatewayDisconnected)
	if !ok || last.Instance != "inst-b" || !last.At.Equal(t1.Add(time.Minute)) ||
		(last.Reason != domain.GatewayReasonHeartbeatLost && last.Reason != domain.GatewayReasonInstanceLost) {
		t.Fatalf("the end: %#v; want inst-b's tunnel ended", got[len(got)-1])
	}
	for i, ev := range want {
		if got[i] != ev {
			t.Fatalf("event %d: %#v; want %#v", i, got[i], ev)
		}
	}

	for _, bad := range []gateways.RecordGatewayConnection{
		{Connected: true, Instance: "inst-a"},
		{GatewayID: gw, Connected: true},
		{GatewayID: gw, Instance: "inst-a"},
		{GatewayID: gw, Connected: true, Instance: "inst-a", Version: strings.Repeat("9", 65)},
		{GatewayID: gw, Connected: true, Instance: "inst-a", Channel: "Not A Channel"},
	} {
		if _, err := h.Handle(ctx, bad); domain.ErrorCode(err) != domain.CodeInvalidArgument {
			t.Errorf("%+v: %v; want invalid_argument", bad, err)
		}
	}
	if _, err := h.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: domain.NewID(domain.PrefixGateway), Connected: true,
		Instance: "inst-a"}); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Errorf("a gateway never enrolled: %v; want not_found", err)
	}
}
