package runs_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// streamReads counts the round trips that read one stream's events (a
// query, or a batch holding the read; not an append, whose statement also
// reads the stream's version).
type streamReads struct {
	mu     sync.Mutex
	stream string
	reads  int
}

func (c *streamReads) reading(sql string, args []any) bool {
	return strings.Contains(sql, "FROM events WHERE stream_id = $1 AND stream_version >= $2 ORDER BY stream_version") &&
		len(args) > 0 && args[0] == c.stream
}

func (c *streamReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading(data.SQL, data.Args) {
		c.reads++
	}
	return ctx
}

func (c *streamReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *streamReads) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range data.Batch.QueuedQueries {
		if c.reading(q.SQL, q.Arguments) {
			c.reads++
			break
		}
	}
	return ctx
}

func (c *streamReads) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *streamReads) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *streamReads) watch(stream string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stream, c.reads = stream, 0
}

func (c *streamReads) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.reads
	c.reads = 0
	return n
}

// A run's step is decided on the run as this process last saw it: after
// the worker's observation (which reads the run afresh) or its own last
// step, a step reads nothing of the run before it is recorded.
func TestRunStepsReadNothingOfTheRunBeforeTheyRecord(t *testing.T) {
	trace := &streamReads{}
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Tracer: trace})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	acc := fleettest.RunToken(t, s)
	trace.watch(domain.RunStream(s.Run.RunID))
	obs, err := env.App.Runs.RunObserve.Handle(testutil.Background, runs.RunObserve{Access: acc, Image: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if n := trace.take(); n != 1 {
		t.Fatalf("the observation read the run's stream %d times; want 1 (the credential is checked afresh)", n)
	}
	frame := obs.Frame.FrameID
	for i, key := range []string{"step-1", "step-2", "step-3"} {
		out, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"VOLUME_UP"}`),
			IdempotencyKey: key, ObservedFrame: frame})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		frame = out.Receipt.Frames.After
		if n := trace.take(); n != 0 {
			t.Fatalf("step %d read the run's stream %d times before it was recorded; want none", i+1, n)
		}
	}
	env.Settle(t)
	if v, err := env.App.Runs.GetRun.Handle(testutil.Background, runs.GetRun{Auth: env.Auth, RunID: s.Run.RunID}); err != nil || v.StepSeq != 3 {
		t.Fatalf("the run after three steps: %+v, %v; want step 3", v, err)
	}
}

// A step decided on a run that moved on elsewhere (paused and resumed by
// another instance, whose events this process has not read) is decided
// again on the run as it is: refused while it is paused, taken once it
// runs again; and a step asked again with the key of the run's latest
// step answers that step, taking none of its own.
func TestRunStepOnARunThatMovedOnElsewhere(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	s := fleettest.StartExternalRun(t, env, dev, nil)
	acc := fleettest.RunToken(t, s)
	act := func(key string) (bool, error) {
		out, err := env.App.Runs.RunAct.Handle(testutil.Background, runs.RunAct{Access: acc, Action: "key", Arguments: json.RawMessage(`{"key":"VOLUME_UP"}`),
			IdempotencyKey: key})
		return out.Replayed, err
	}
	if _, err := act("first"); err != nil {
		t.Fatal(err)
	}
	// Another instance's events, appended behind this process's back.
	elsewhere := func(ev domain.Event) {
		t.Helper()
		news, err := eventstore.Encode(domain.Events, env.OrgID, ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Store.Append(testutil.Background, domain.RunStream(s.Run.RunID), eventstore.AnyVersion, news...); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere(domain.RunPaused{RunID: s.Run.RunID, By: domain.Actor{Kind: domain.ActorUser, ID: "someone"}, At: env.Now()})
	before := phoneInputs(t, env, dev)
	if _, err := act("while-paused"); domain.ErrorCode(err) != domain.CodeDeviceUnavailable || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("a step on a run paused elsewhere: %v; want device_unavailable (run_paused)", err)
	}
	if phoneInputs(t, env, dev) != before {
		t.Fatal("a step on a paused run acted")
	}
	elsewhere(domain.RunResumed{RunID: s.Run.RunID, By: domain.Actor{Kind: domain.ActorUser, ID: "someone"}, At: env.Now()})
	if _, err := act("after-resume"); err != nil {
		t.Fatalf("a step on a run resumed elsewhere: %v", err)
	}
	if replayed, err := act("after-resume"); err != nil || !replayed {
		t.Fatalf("the latest step's key asked again: replayed %v, %v; want its replay", replayed, err)
	}
	env.Settle(t)
	v, err := env.App.Runs.GetRun.Handle(testutil.Background, runs.GetRun{Auth: env.Auth, RunID: s.Run.RunID})
	if err != nil || v.StepSeq != 2 || v.State != domain.RunStateRunning {
		t.Fatalf("the run: %+v, %v; want running after two steps", v, err)
	}
}
