package projections_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// slowAudit is the audit projection with a pause after each batch's rows are
// written, inside the batch's transaction, so a kill lands inside the open
// transaction most of the time.
type slowAudit struct{ projections.Audit }

func (s slowAudit) QueueApply(b *pgx.Batch, schema string, sp projections.Span) {
	s.Audit.QueueApply(b, schema, sp)
	b.Queue(`SELECT pg_sleep(0.02)`)
}

// TestConsumerProcess is not a test on its own: the kill test runs the test
// binary again with PF_CONSUMER_DB set, and this consumes until killed.
func TestConsumerProcess(t *testing.T) {
	url := os.Getenv("PF_CONSUMER_DB")
	if url == "" {
		t.Skip("helper process for TestProcessKilledMidBatch")
	}
	pool, err := pgxpool.New(testutil.Context(t), url)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(eventstore.New(pool), quiet, []projections.Projection{slowAudit{}}, projections.WithBatchSize(150))
	if err != nil {
		t.Fatal(err)
	}
	r.Run(testutil.Context(t)) // until SIGKILL
}

func TestProcessKilledMidBatchResumesWithoutLossOrDuplicates(t *testing.T) {
	url := testutil.DatabaseURL(t)
	pool, err := pgxpool.New(testutil.Context(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := eventstore.New(pool)
	const total = 40000
	appendN(t, s, 4, total/4)
	rng := rand.New(rand.NewPCG(3, 4))
	appliedNow := func() int64 {
		var n int64
		if err := pool.QueryRow(testutil.Context(t), `SELECT coalesce((SELECT events_applied FROM projection_checkpoints
			WHERE consumer_group = 'audit_feed@1'), 0)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	kills := 0
	var applied int64
	for i := 0; i < 12; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PF_CONSUMER_DB="+url)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill each child a moment after it has committed a batch of its
		// own, not at a fixed time: under load a child may take longer than
		// any fixed pause to start and connect, and then the children would
		// apply nothing at all.
		before := applied
		deadline := time.Now().Add(60 * time.Second)
		for applied = appliedNow(); applied == before && time.Now().Before(deadline); applied = appliedNow() {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup, transaction left open mid-batch
			t.Fatal(err)
		}
		cmd.Wait()
		kills++
		applied = appliedNow()
	}
	t.Logf("after %d kills the children had applied %d of %d events", kills, applied, total)
	if applied == 0 || applied >= total {
		t.Fatalf("after %d kills the children applied %d of %d events; want some but not all, so the final run resumes mid-way", kills, applied, total)
	}
	r := newRunner(t, s)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitApplied(t, pool, total)
	checkFeedExactlyOnce(t, pool)
}
