package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil/fleettest"
)

// actionPath counts what the action path sends to the database: round
// trips reading one device's stream (a query, or a batch holding the
// read), batches holding an action's idempotency row (its request and its
// outcome units), host claim checks sent on their own, and statements
// sent on their own that write to the frames table. Projection consumers
// share the pool but send none of these.
type actionPath struct {
	mu          sync.Mutex
	stream      string
	deviceReads int
	units       int
	fenceAlone  int
	frameWrites int
}

func (c *actionPath) deviceRead(sql string, args []any) bool {
	return strings.Contains(sql, "FROM events WHERE stream_id = $1") && len(args) > 0 && args[0] == c.stream
}

func (c *actionPath) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deviceRead(data.SQL, data.Args) {
		c.deviceReads++
	}
	if strings.Contains(data.SQL, "host_fence") {
		c.fenceAlone++
	}
	if strings.Contains(data.SQL, "UPDATE frames") || strings.Contains(data.SQL, "INSERT INTO frames") {
		c.frameWrites++
	}
	return ctx
}

func (c *actionPath) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *actionPath) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	unit, read := false, false
	for _, q := range data.Batch.QueuedQueries {
		unit = unit || strings.Contains(q.SQL, "action_idempotency")
		read = read || c.deviceRead(q.SQL, q.Arguments)
	}
	if unit {
		c.units++
	}
	if read {
		c.deviceReads++
	}
	return ctx
}

func (c *actionPath) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *actionPath) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *actionPath) take() (reads, units, fenceAlone int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, units, fenceAlone = c.deviceReads, c.units, c.fenceAlone
	c.deviceReads, c.units, c.fenceAlone, c.frameWrites = 0, 0, 0, 0
	return reads, units, fenceAlone
}

// takeFrameWrites counts the statements sent on their own that wrote to
// the frames table (an action's frames go in its units' batches).
func (c *actionPath) takeFrameWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.frameWrites
	c.frameWrites = 0
	return n
}

// An action on a device this process already knows is three round trips:
// its request unit (decided on the cached device, expecting the device's
// stream unchanged), the job's fresh read of the device (fencing must see
// a lease ended by any instance) with the check of its host's claim in the
// same round trip, and its outcome unit.
func TestAnActionIsThreeRoundTrips(t *testing.T) {
	trace := &actionPath{}
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Tracer: trace})
	dev := env.DeviceIDs[0]
	trace.mu.Lock()
	trace.stream = domain.DeviceStream(dev)
	trace.mu.Unlock()
	lease := env.Lease(t, dev)
	if _, err := act(env, dev, lease.LeaseID, "rt-0", "key", `{"key":"HOME"}`); err != nil {
		t.Fatal(err)
	}
	trace.take()
	const n = 5
	for i := 1; i <= n; i++ {
		if _, err := act(env, dev, lease.LeaseID, "rt-"+string(rune('0'+i)), "key", `{"key":"HOME"}`); err != nil {
			t.Fatal(err)
		}
	}
	reads, units, fenceAlone := trace.take()
	if reads != n || units != 2*n || fenceAlone != 0 {
		t.Fatalf("got %d device reads, %d units and %d host claim checks on their own for %d actions; want %d, %d and 0 (one read with the check, two units each)",
			reads, units, fenceAlone, n, n, 2*n)
	}
}

// An observation of the screen an action left (the same screen as the
// action's after frame) names that frame; on a sim, which redraws trees
// cheaply from a frame's replay bytes, it writes nothing to the frames
// table, observed once or four times, and a read of the frame's tree
// (what a tap bound to one of its elements checks against) draws the very
// tree the observation answered, writing nothing either.
func TestObservingASimScreenWritesNoTree(t *testing.T) {
	trace := &actionPath{}
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Tracer: trace})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev)
	out, err := act(env, dev, lease.LeaseID, "tree-0", "key", `{"key":"HOME"}`)
	if err != nil {
		t.Fatal(err)
	}
	after := out.Receipt.Frames.After
	if after == "" {
		t.Fatal("the action's receipt names no after frame")
	}
	trace.takeFrameWrites()
	var seen json.RawMessage
	for i := range 4 {
		obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		if obs.Frame.FrameID != after {
			t.Fatalf("observation %d named frame %s; want the action's after frame %s (same screen)", i, obs.Frame.FrameID, after)
		}
		if len(obs.Snapshot) == 0 {
			t.Fatalf("observation %d answered no tree", i)
		}
		seen = obs.Snapshot
		if got := trace.takeFrameWrites(); got != 0 {
			t.Fatalf("observation %d wrote to the frames table %d times; want none", i, got)
		}
	}
	fr, err := env.Fleet.Frame(bg, fleet.GetFrame{Auth: env.Auth, FrameID: after, FrameOptions: fleet.FrameOptions{Snapshot: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fr.Snapshot, seen) {
		t.Errorf("the frame's tree read back differs from the one its observation answered:\n%s\nwant\n%s", fr.Snapshot, seen)
	}
	if got := trace.takeFrameWrites(); got != 0 {
		t.Errorf("reading the frame's tree wrote to the frames table %d times; want none", got)
	}
	var kept bool
	if err := env.Pool.QueryRow(bg, `SELECT snapshot IS NOT NULL FROM frames WHERE frame_id = $1`, after).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept {
		t.Error("the sim frame's row keeps a tree; it is drawn from the replay bytes when read")
	}
}
