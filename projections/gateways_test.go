package projections_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

func appendGatewayEvent(t *testing.T, s *eventstore.Store, orgID, gatewayID string, ev domain.Event) eventstore.Appended {
	t.Helper()
	name, version, data, err := domain.Events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Append(testutil.Context(t), domain.GatewayStream(gatewayID), eventstore.AnyVersion,
		eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: orgID, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runGateways runs a runner of projs until stop is called or the test
// ends.
func runGateways(t *testing.T, s *eventstore.Store, projs ...projections.Projection) (r *projections.Runner, stop func()) {
	t.Helper()
	r, err := projections.NewRunner(s, quiet, projs, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return r, stop
}

func waitGateways(t *testing.T, r *projections.Runner, name string, a eventstore.Appended) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, name, a); err != nil {
		t.Fatal(err)
	}
}

// gatewayRows dumps the gateways table as text, row by row.
func gatewayRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(testutil.Context(t), `SELECT g::text FROM public.gateways g ORDER BY gateway_id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A gateway's tunnels show in its row: connected, through which
// instance, since when, the version it runs (the enrolled one until it
// connects) and when it was last seen; an end clears the tunnel and
// keeps the version. A rebuild gives the same rows, and another
// organisation's list is empty.
func TestGatewaysShowTheirTunnels(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, _ := runGateways(t, s, projections.Gateways{})
	ctx := testutil.Context(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	gw, other := domain.NewID(domain.PrefixGateway), domain.NewID(domain.PrefixGateway)
	for _, id := range []string{gw, other} {
		appendGatewayEvent(t, s, "org_a", id, domain.GatewayEnrolled{GatewayID: id, OrgID: "org_a", Name: "rack", CodeID: "gwc_1",
			CredentialHash: []byte{1}, Version: "1.0.0", EnrolledAt: t0})
	}
	view := func(a eventstore.Appended) projections.GatewayView {
		t.Helper()
		waitGateways(t, r, projections.GatewaysName, a)
		vs, err := projections.ListGateways(ctx, pool, "org_a")
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(vs, func(v projections.GatewayView) bool { return v.GatewayID == gw })
		if len(vs) != 2 || i < 0 {
			t.Fatalf("list: %+v; want both gateways", vs)
		}
		return vs[i]
	}
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	same := func(p *time.Time, want time.Time) bool { return p != nil && p.Equal(want) }

	v := view(appendGatewayEvent(t, s, "org_a", other, domain.GatewayRevoked{GatewayID: other, At: at(1)}))
	if v.Connected || v.Instance != nil || v.ConnectedAt != nil || v.LastSeenAt != nil || v.Version != "1.0.0" {
		t.Fatalf("enrolled: %+v; want never connected, the enrolled version", v)
	}
	v = view(appendGatewayEvent(t, s, "org_a", gw, domain.GatewayConnected{GatewayID: gw, Instance: "inst-a", Version: "1.1.0",
		Channel: "stable", Devices: 2, At: at(2)}))
	if !v.Connected || str(v.Instance) != "inst-a" || !same(v.ConnectedAt, at(2)) || !same(v.LastSeenAt, at(2)) || v.Version != "1.1.0" {
		t.Fatalf("connected: %+v; want connected through inst-a since %v, version 1.1.0", v, at(2))
	}
	if ids, err := projections.ConnectedGateways(ctx, pool); err != nil || !slices.Equal(ids, []string{gw}) {
		t.Fatalf("connected gateways: %v (%v); want [%s]", ids, err, gw)
	}
	v = view(appendGatewayEvent(t, s, "org_a", gw, domain.GatewayDisconnected{GatewayID: gw, Instance: "inst-a",
		Reason: domain.GatewayReasonHeartbeatLost, At: at(3)}))
	if v.Connected || v.Instance != nil || v.ConnectedAt != nil || !same(v.LastSeenAt, at(3)) || v.Version != "1.1.0" {
		t.Fatalf("disconnected: %+v; want no tunnel, last seen %v, version 1.1.0", v, at(3))
	}
	// A gateway that reports no version keeps the one it had.
	last := appendGatewayEvent(t, s, "org_a", gw, domain.GatewayConnected{GatewayID: gw, Instance: "inst-b", Devices: 0, At: at(4)})
	v = view(last)
	if !v.Connected || str(v.Instance) != "inst-b" || !same(v.ConnectedAt, at(4)) || v.Version != "1.1.0" {
		t.Fatalf("connected again: %+v; want inst-b since %v, version 1.1.0", v, at(4))
	}
	if vs, err := projections.ListGateways(ctx, pool, "org_b"); err != nil || len(vs) != 0 {
		t.Fatalf("another organisation's list: %+v (%v); want none", vs, err)
	}

	before := gatewayRows(t, pool)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Rebuild(wctx, projections.GatewaysName, nil); err != nil {
		t.Fatal(err)
	}
	if after := gatewayRows(t, pool); fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("rebuild changed the rows:\nbefore %v\nafter  %v", before, after)
	}
}

// firstShapeGateways is the gateways read model as it was first built:
// named "gateways", without the tunnel's columns.
type firstShapeGateways struct{ projections.Gateways }

func (firstShapeGateways) Name() string { return "gateways" }

func (firstShapeGateways) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.gateways (
		gateway_id      text PRIMARY KEY,
		org_id          text NOT NULL,
		name            text NOT NULL,
		code_id         text NOT NULL,
		state           text NOT NULL,
		version         text,
		enrolled_at     timestamptz NOT NULL,
		revoked_at      timestamptz,
		revoked_by_kind text,
		revoked_by_id   text
	)`)
	return err
}

// A database whose gateways read model has its first shape gets the
// current one when the service starts, without an operator's rebuild:
// built from position 0, the gateways enrolled before are listed with
// their tunnels.
func TestGatewaysTakeTheirNewShapeOnStart(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	gw := domain.NewID(domain.PrefixGateway)
	a := appendGatewayEvent(t, s, "org_a", gw, domain.GatewayEnrolled{GatewayID: gw, OrgID: "org_a", Name: "rack", CodeID: "gwc_1",
		CredentialHash: []byte{1}, EnrolledAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
	old, stopOld := runGateways(t, s, firstShapeGateways{})
	waitGateways(t, old, "gateways", a)
	if rows := gatewayRows(t, pool); len(rows) != 1 {
		t.Fatalf("first shape: %v; want the gateway", rows)
	}
	stopOld() // the service stops, and starts again with the current shape

	at := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	a = appendGatewayEvent(t, s, "org_a", gw, domain.GatewayConnected{GatewayID: gw, Instance: "inst-a", Version: "1.1.0", At: at})
	r, _ := runGateways(t, s, projections.Gateways{})
	waitGateways(t, r, projections.GatewaysName, a)
	vs, err := projections.ListGateways(testutil.Context(t), pool, "org_a")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].GatewayID != gw || !vs[0].Connected || vs[0].Version != "1.1.0" || vs[0].ConnectedAt == nil || !vs[0].ConnectedAt.Equal(at) {
		t.Fatalf("after the start: %+v; want the gateway connected since %v, version 1.1.0", vs, at)
	}
}
