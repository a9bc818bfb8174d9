package workers_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// TestSweepMakesPassesAsTheWorker: the loop makes its first pass at once
// when asked, another whenever it is woken, each as the worker with a
// request of its own; a failed pass is logged and the loop carries on.
func TestSweepMakesPassesAsTheWorker(t *testing.T) {
	var log testutil.SyncBuffer
	passes := make(chan eventstore.Metadata, 8)
	wake := make(chan struct{})
	n := 0
	s := workers.Sweep[int]{Worker: "tester", Interval: time.Hour, AtOnce: true, Wake: wake,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Pass: func(ctx context.Context) (int, error) {
			n++
			md, _ := eventstore.MetadataFrom(ctx)
			passes <- md
			if n == 2 {
				return n, errors.New("the second pass fails")
			}
			return n, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { s.Run(ctx); close(stopped) }()

	seen := map[string]bool{}
	for i := 1; i <= 3; i++ {
		if i > 1 {
			wake <- struct{}{}
		}
		md := <-passes
		if md.ActorKind != "system" || md.ActorID != "tester" || !strings.HasPrefix(md.RequestID, "wrk_") || seen[md.RequestID] {
			t.Fatalf("pass %d: got metadata %+v; want the worker tester as actor and a request of its own", i, md)
		}
		seen[md.RequestID] = true
	}
	cancel()
	<-stopped
	if got := log.String(); !strings.Contains(got, "worker pass failed") || !strings.Contains(got, "worker=tester") ||
		!strings.Contains(got, "the second pass fails") {
		t.Errorf("got log %q; want the failed pass logged with the worker and its error", got)
	}

	got, err := s.Once(context.Background())
	if err != nil || got != 4 {
		t.Fatalf("Once: got %d, %v; want the fourth pass", got, err)
	}
}
