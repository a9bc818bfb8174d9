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
// outcome units), and host claim checks sent on their own. Projection
// consumers share the pool but send none of these.
type actionPath struct {
	mu          sync.Mutex
	stream      string
	deviceReads int
	units       int
	fenceAlone  int
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
	c.deviceReads, c.units, c.fenceAlone = 0, 0, 0
	return reads, units, fenceAlone
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
