package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"time"

	"phonefleet/eventstore"
	"phonefleet/internal/clock"
)

// RateWindow is the rate limit's window (spec 8: a per-minute budget).
const RateWindow = time.Minute

// RateLimiter counts requests per caller per minute in PostgreSQL, so every
// instance sharing the database shares one budget per caller. Each request
// costs one atomic UPSERT on its (caller, minute) row of rate_limit_windows
// (migration 0002); old rows are removed by Sweep.
type RateLimiter struct {
	DB eventstore.DB
	// Now is the clock; nil means clock.Now. Instances sharing a database
	// should keep their clocks in step (NTP): the minute is theirs.
	Now func() time.Time
}

// RateDecision is the outcome of one request's count.
type RateDecision struct {
	// Allowed is false when the caller is over budget.
	Allowed bool
	// Limit is the budget of the window; Remaining what is left of it.
	Limit, Remaining int
	// Reset is the time until the window ends, in whole seconds (≥ 1).
	Reset int
}

// Take counts one request of bucket against limit in the current minute.
func (l *RateLimiter) Take(ctx context.Context, bucket string, limit int) (RateDecision, error) {
	now := clock.Now()
	if l.Now != nil {
		now = l.Now()
	}
	start := now.UTC().Truncate(RateWindow)
	var hits int
	err := l.DB.QueryRow(ctx, `INSERT INTO rate_limit_windows AS w (bucket, window_start, hits) VALUES ($1, $2, 1)
		ON CONFLICT (bucket, window_start) DO UPDATE SET hits = w.hits + 1
		RETURNING hits`, bucket, start).Scan(&hits)
	if err != nil {
		return RateDecision{}, err
	}
	left := start.Add(RateWindow).Sub(now)
	reset := int((left + time.Second - 1) / time.Second)
	return RateDecision{Allowed: hits <= limit, Limit: limit, Remaining: max(0, limit-hits), Reset: max(1, reset)}, nil
}

// Sweep removes windows that ended more than a minute ago.
func (l *RateLimiter) Sweep(ctx context.Context) error {
	now := clock.Now()
	if l.Now != nil {
		now = l.Now()
	}
	_, err := l.DB.Exec(ctx, `DELETE FROM rate_limit_windows WHERE window_start < $1`, now.UTC().Truncate(RateWindow).Add(-RateWindow))
	return err
}

// CallerBucket names the rate-limit bucket of a request, without any work
// beyond hashing: a request with Authorization is counted under a hash of
// that exact value (the raw credential is never stored, and a guessed or
// forged value cannot spend somebody else's budget); a request without is
// counted under its client address. It also reports which budget applies.
// The client address is the connection's peer: X-Forwarded-For is not
// trusted, because any client can write it.
func CallerBucket(r *http.Request) (bucket string, authorized bool) {
	if auth := r.Header.Values("Authorization"); len(auth) > 0 {
		h := sha256.New()
		for _, v := range auth {
			h.Write([]byte(v))
			h.Write([]byte{0})
		}
		return "cred:" + hex.EncodeToString(h.Sum(nil)), true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host, false
}
