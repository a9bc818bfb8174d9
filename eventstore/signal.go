package eventstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Signal is a broadcast wake-up: every waiter of the current generation is
// released by one Wake. It carries no data; waiters re-read the feed.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewSignal returns a Signal with no waiters.
func NewSignal() *Signal { return &Signal{ch: make(chan struct{})} }

// C returns a channel closed by the next Wake.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Wake releases every current waiter.
func (s *Signal) Wake() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// notifyChannel is the PostgreSQL channel that carries wake-ups between
// service instances sharing one database.
const notifyChannel = "phonefleet_events"

// Relay carries wake-ups between instances: local commits (woken on local) are announced with
// a coalesced NOTIFY (outside the appending transaction, so appends never
// queue on the notification lock), and NOTIFYs from other instances wake
// readers. It returns when ctx ends.
func Relay(ctx context.Context, pool *pgxpool.Pool, local, readers *Signal, logger *slog.Logger) {
	go Listen(ctx, pool, notifyChannel, readers, logger)
	for {
		select {
		case <-ctx.Done():
			return
		case <-local.C():
		}
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, '')`, notifyChannel); err != nil && ctx.Err() == nil {
			logger.Warn("event wake-up notify failed", "err", err)
		}
		// Coalesce: at most one NOTIFY per few milliseconds whatever the append rate.
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Listen wakes sig on every NOTIFY on channel until ctx ends, reconnecting
// after a lost connection. channel must be a plain identifier.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, sig *Signal, logger *slog.Logger) {
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+channel)
			for err == nil {
				_, err = conn.Conn().WaitForNotification(ctx)
				if err == nil {
					// Our own NOTIFYs come back too; a spare wake-up costs one cheap read,
					// and it wakes only readers, never the relay (no echo loop).
					sig.Wake()
				}
			}
			conn.Release()
		}
		if ctx.Err() != nil {
			return
		}
		logger.Warn("listener lost its connection; retrying", "channel", channel, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
