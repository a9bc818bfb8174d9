package projections

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"phonefleet/eventstore"
)

// A consumer is caught up once it has read the feed to its end: after a
// query that found nothing new, and after a batch that was not full (under
// a steady stream of commits a query almost never finds nothing, and a
// rebuild waiting for that took over only at a lucky gap between two
// commits). A full batch, a failed query and a subscription ended by its
// own session are not the feed's end.
func TestConsumerIsCaughtUpOnceItReadTheFeedToItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name             string
		noMsg, drained   bool
		failed, canceled bool
		want             bool
	}{
		{name: "a batch that was not full", drained: true, want: true},
		{name: "a query that found nothing", noMsg: true, want: true},
		{name: "a full batch"},
		{name: "a failed query", failed: true},
		{name: "a subscription its session ended", noMsg: true, canceled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.canceled {
				cancel()
			}
			var idle atomic.Int32
			var drained atomic.Bool
			drained.Store(tc.drained)
			b := &wakeBackoff{ctx: ctx, signal: eventstore.NewSignal(), poll: time.Millisecond,
				idle: func() { idle.Add(1) }, drained: &drained}
			b.take() // as after a first query
			var err error
			if tc.failed {
				err = context.DeadlineExceeded
			}
			b.HandleError(watermill.NopLogger{}, tc.noMsg, err)
			if got := idle.Load() == 1; got != tc.want {
				t.Errorf("caught up: %v, want %v", got, tc.want)
			}
		})
	}
}
