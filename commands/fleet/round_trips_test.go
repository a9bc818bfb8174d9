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

// actionPath counts what the action path sends to the database: reads of
// one device's stream, and batches holding an action's idempotency row
// (its request and its outcome units). Projection consumers share the
// pool but send neither.
type actionPath struct {
	mu          sync.Mutex
	stream      string
	deviceReads int
	units       int
}

func (c *actionPath) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "FROM events WHERE stream_id = $1") && len(data.Args) > 0 && data.Args[0] == c.stream {
		c.mu.Lock()
		c.deviceReads++
		c.mu.Unlock()
	}
	return ctx
}

func (c *actionPath) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *actionPath) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		if strings.Contains(q.SQL, "action_idempotency") {
			c.mu.Lock()
			c.units++
			c.mu.Unlock()
			break
		}
	}
	return ctx
}

func (c *actionPath) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *actionPath) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *actionPath) take() (reads, units int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, units = c.deviceReads, c.units
	c.deviceReads, c.units = 0, 0
	return reads, units
}

// An action on a device this process already knows is three round trips:
// its request unit (decided on the cached device, expecting the device's
// stream unchanged), the job's fresh read of the device (fencing must see
// a lease ended by any instance), and its outcome unit.
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
	reads, units := trace.take()
	if reads != n || units != 2*n {
		t.Fatalf("got %d device reads and %d units for %d actions; want %d and %d (one read, two units each)", reads, units, n, n, 2*n)
	}
}
