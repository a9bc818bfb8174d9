package identity_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/identity"
	"phonefleet/testutil"
)

func TestRateLimiterCountsPerMinute(t *testing.T) {
	pool := testutil.SmallPool(t, 4)
	clock := newClock()
	clock.Set(clock.Now().Truncate(time.Minute).Add(15 * time.Second))
	l := &identity.RateLimiter{DB: pool, Now: clock.Now}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := l.Take(ctx, "addr:1", 3)
		if err != nil {
			t.Fatal(err)
		}
		want := identity.RateDecision{Allowed: i <= 3, Limit: 3, Remaining: max(0, 3-i), Reset: 45}
		if d != want {
			t.Fatalf("request %d: got %+v; want %+v", i, d, want)
		}
	}
	if d, _ := l.Take(ctx, "addr:2", 3); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("another caller: got %+v; want its own budget", d)
	}
	clock.Advance(45 * time.Second) // the next minute
	if d, _ := l.Take(ctx, "addr:1", 3); !d.Allowed || d.Remaining != 2 || d.Reset != 60 {
		t.Fatalf("next minute: got %+v; want a fresh budget", d)
	}
	clock.Advance(2 * time.Minute)
	if err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var rows int
	pool.QueryRow(ctx, `SELECT count(*) FROM rate_limit_windows`).Scan(&rows)
	if rows != 0 {
		t.Fatalf("got %d rows after the sweep; want 0", rows)
	}
}

func TestRateLimiterSharedAcrossInstances(t *testing.T) {
	pool := testutil.SmallPool(t, 8)
	// Two limiters on one database are two instances.
	a, b := &identity.RateLimiter{DB: pool}, &identity.RateLimiter{DB: pool}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := a
			if i%2 == 1 {
				l = b
			}
			d, err := l.Take(context.Background(), "cred:shared", 25)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The 40 requests may straddle a minute boundary; then each window
	// allows its own 25.
	if allowed != 25 && allowed != 40 {
		t.Fatalf("got %d of 40 requests allowed across two instances; want 25", allowed)
	}
}

func TestCallerBucket(t *testing.T) {
	tests := []struct {
		name       string
		auth       string
		remote     string
		authorized bool
		same       string // another Authorization expected to share the bucket ("" = none)
	}{
		{name: "anonymous by address", remote: "10.0.0.1:1234"},
		{name: "authorized by credential", auth: "Bearer abc", remote: "10.0.0.1:1234", authorized: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/x", nil)
			r.RemoteAddr = tt.remote
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			bucket, authorized := identity.CallerBucket(r)
			if authorized != tt.authorized {
				t.Fatalf("got authorized %v; want %v", authorized, tt.authorized)
			}
			if !tt.authorized && bucket != "addr:10.0.0.1" {
				t.Fatalf("got bucket %q; want addr:10.0.0.1", bucket)
			}
			if tt.authorized && (len(bucket) != len("cred:")+64 || bucket == "cred:abc") {
				t.Fatalf("got bucket %q; want a hash of the credential, never the credential", bucket)
			}
		})
	}
}
