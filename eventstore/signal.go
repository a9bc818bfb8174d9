package eventstore

import (
	"context"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Signal is a broadcast wake-up: every waiter of the current generation is
// released by one Wake. It carries no data; waiters re-read the feed.
//
// A Signal can also be told which event types a commit held (WakeTypes):
// it then wakes its own waiters and only those of its subscriptions (Sub)
// with a pattern matching one of them. A reader of a few event types thus
// sleeps through commits of others instead of querying the database after
// each (issue 28: every action's commits woke every projection).
type Signal struct {
	mu   sync.Mutex
	ch   chan struct{}
	subs map[*Signal][]string // a subscription and its patterns
}

// NewSignal returns a Signal with no waiters.
func NewSignal() *Signal { return &Signal{ch: make(chan struct{})} }

// C returns a channel closed by the next Wake.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Wake releases every current waiter, those of every subscription too.
func (s *Signal) Wake() { s.wake(nil, true) }

// WakeTypes releases the current waiters and those of the subscriptions
// with a pattern matching one of types.
func (s *Signal) WakeTypes(types []string) { s.wake(types, false) }

// wake wakes the subscriptions first, so that a waiter released by s finds
// whether its own subscription was woken by the same commit.
func (s *Signal) wake(types []string, all bool) {
	s.mu.Lock()
	var woken []*Signal
	for sub, patterns := range s.subs {
		if all || matchesAny(patterns, types) {
			woken = append(woken, sub)
		}
	}
	s.mu.Unlock()
	for _, sub := range woken {
		sub.Wake()
	}
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// Sub returns a Signal woken by every Wake of s and by each WakeTypes of s
// naming a type that matches one of patterns (LIKE patterns as the feed's
// type filters use: % any run of characters, _ any one), and the function
// that ends the subscription.
func (s *Signal) Sub(patterns []string) (*Signal, func()) {
	sub := NewSignal()
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[*Signal][]string{}
	}
	s.subs[sub] = patterns
	s.mu.Unlock()
	return sub, func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}
}

func matchesAny(patterns, types []string) bool {
	for _, t := range types {
		for _, p := range patterns {
			if likeMatch(p, t) {
				return true
			}
		}
	}
	return false
}

// likeMatch reports whether s matches the SQL LIKE pattern p with no escape
// character, as the feed's type filter matches it in the database.
func likeMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '%':
			for p = p[1:]; len(p) > 0 && p[0] == '%'; p = p[1:] {
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if likeMatch(p, s[i:]) {
					return true
				}
			}
			return false
		case '_':
			if s == "" {
				return false
			}
			_, n := utf8.DecodeRuneInString(s)
			p, s = p[1:], s[n:]
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return s == ""
}

// relayCoalesce is the least time between two NOTIFYs of one relay: the
// commits of that moment share the next.
var relayCoalesce = 5 * time.Millisecond

// notifyChannel is the PostgreSQL channel that carries wake-ups between
// service instances sharing one database.
const notifyChannel = "phonefleet_events"

// Relay carries wake-ups between instances: local commits (woken on local) are announced with
// a coalesced NOTIFY (outside the appending transaction, so appends never
// queue on the notification lock), and NOTIFYs from other instances wake
// readers. Each NOTIFY carries self, so that its own come back to it as
// nothing: local commits woke local readers already, each reader only for
// the types it reads. A NOTIFY of another instance wakes every reader (it
// names no types). It returns when ctx ends.
func Relay(ctx context.Context, pool *pgxpool.Pool, self string, local, readers *Signal, logger *slog.Logger) {
	go listen(ctx, pool, notifyChannel, self, readers, logger)
	for {
		select {
		case <-ctx.Done():
			return
		case <-local.C():
		}
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, self); err != nil && ctx.Err() == nil {
			logger.Warn("event wake-up notify failed", "err", err)
		}
		// Coalesce: at most one NOTIFY per few milliseconds whatever the append rate.
		select {
		case <-ctx.Done():
			return
		case <-time.After(relayCoalesce):
		}
	}
}

// Listen wakes sig on every NOTIFY on channel until ctx ends, reconnecting
// after a lost connection. channel must be a plain identifier.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, sig *Signal, logger *slog.Logger) {
	listen(ctx, pool, channel, "", sig, logger)
}

// listen is Listen ignoring the NOTIFYs whose payload is self (when set).
func listen(ctx context.Context, pool *pgxpool.Pool, channel, self string, sig *Signal, logger *slog.Logger) {
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+channel)
			for err == nil {
				var n *pgconn.Notification
				n, err = conn.Conn().WaitForNotification(ctx)
				if err == nil && (self == "" || n.Payload != self) {
					// It wakes only readers, never the relay (no echo loop).
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
