package devices

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"phonefleet/domain"
)

// silent is a transport whose holder takes every call and never answers.
type silent struct{}

func (silent) Forward(ctx context.Context, _, _ string, _ []byte) ([]byte, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// claims is a host's claim as a test changes it, with the reads made.
type claims struct {
	mu    sync.Mutex
	epoch int64
	held  bool
	reads int
}

func (c *claims) state(context.Context, string) (int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.epoch, c.held, nil
}

// A watched call whose holder went away ends unanswered well before its
// deadline: when the claim is found free at the first look, and when it
// is taken anew while the call waits.
func TestAWatchedCallEndsWhenItsHolderGoesAway(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims *claims
		then   func(c *claims)
	}{
		{"free at the first look", &claims{epoch: 3, held: false}, func(*claims) {}},
		{"taken anew while waiting", &claims{epoch: 3, held: true}, func(c *claims) {
			for {
				c.mu.Lock()
				read := c.reads
				if read > 0 {
					c.epoch = 4
				}
				c.mu.Unlock()
				if read > 0 {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := New(Config{Transport: silent{}, HostState: tc.claims.state})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go tc.then(tc.claims)
			var out struct{}
			err := rt.CallWatched(ctx, domain.HostSim, "perform_action", struct{}{}, &out)
			if !errors.Is(err, domain.ErrUnanswered) || ctx.Err() != nil {
				t.Fatalf("got %v (the call's own context: %v); want unanswered, before the call's deadline", err, ctx.Err())
			}
		})
	}
}
