package fleet_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/testutil/fleettest"
)

// actionPath counts what the action path sends to the database: round
// trips reading one device's stream (a query, or a batch holding the
// read), batches holding an action's idempotency row (its request and its
// outcome units), host claim checks sent on their own, and trees added to
// stored frames. Projection consumers share the pool but send none of
// these.
type actionPath struct {
	mu          sync.Mutex
	stream      string
	deviceReads int
	units       int
	fenceAlone  int
	frameTrees  int
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
	if strings.Contains(data.SQL, "UPDATE frames SET snapshot") {
		c.frameTrees++
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
	c.deviceReads, c.units, c.fenceAlone, c.frameTrees = 0, 0, 0, 0
	return reads, units, fenceAlone
}

func (c *actionPath) takeFrameTrees() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.frameTrees
	c.frameTrees = 0
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
// action's after frame, stored without a tree on a sim, which redraws
// trees cheaply) names that frame and adds the tree it took to the frame's
// row, once: observing the unchanged screen again sends nothing to the
// frames table.
func TestObservingAnUnchangedScreenAddsItsTreeOnce(t *testing.T) {
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
	trace.takeFrameTrees()
	for i := range 4 {
		frame, _ := observeTree(t, env, dev)
		if frame != after {
			t.Fatalf("observation %d named frame %s; want the action's after frame %s (same screen)", i, frame, after)
		}
		want := 0
		if i == 0 {
			want = 1
		}
		if got := trace.takeFrameTrees(); got != want {
			t.Fatalf("observation %d added the tree to the frame's row %d times; want %d", i, got, want)
		}
	}
	var kept bool
	if err := env.Pool.QueryRow(bg, `SELECT snapshot IS NOT NULL FROM frames WHERE frame_id = $1`, after).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept {
		t.Error("the after frame's row keeps no tree after it was observed with one")
	}
}
