package eventstore

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
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
// whether its own subscription was woken by the same commit. s's channel is
// replaced before any subscription wakes and closed after: a waiter released
// by its subscription that then takes s's channel for its next wait takes
// the new one, not the one this same wake is about to close (which would
// wake it once more for a commit it has already seen, as if for another).
func (s *Signal) wake(types []string, all bool) {
	s.mu.Lock()
	old := s.ch
	s.ch = make(chan struct{})
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
	close(old)
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

// MatchesType reports whether typ matches one of patterns (LIKE patterns as
// the feed's type filters use); nil patterns match every type.
func MatchesType(patterns []string, typ string) bool {
	if patterns == nil {
		return true
	}
	for _, p := range patterns {
		if likeMatch(p, typ) {
			return true
		}
	}
	return false
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

// maxNotice is the longest NOTIFY payload a relay sends naming types
// (PostgreSQL refuses 8000 bytes and more); a longer one names none, and
// wakes every reader of the other instances.
const maxNotice = 7000

// notice is a NOTIFY's payload: the store that committed, and the event
// types its commits since its last NOTIFY held. A payload that is not a
// notice (a NOTIFY of an earlier build names only its store), or a notice
// without types, names no types: it wakes every reader.
type notice struct {
	From  string    `json:"from"`
	Types *[]string `json:"types,omitempty"`
}

// encodeNotice is the payload announcing that self committed events of
// types (every subscription of the other instances is woken when they are
// too many to name).
func encodeNotice(self string, types []string) string {
	if types == nil {
		types = []string{} // named: none (null would read as unnamed)
	}
	b, err := json.Marshal(notice{From: self, Types: &types})
	if err != nil || len(b) > maxNotice {
		b, _ = json.Marshal(notice{From: self})
	}
	return string(b)
}

// decodeNotice reads a NOTIFY's payload: the store it comes from, and the
// types its commits held when typed.
func decodeNotice(payload string) (from string, types []string, typed bool) {
	var n notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.From == "" {
		return payload, nil, false
	}
	if n.Types == nil {
		return n.From, nil, false
	}
	return n.From, *n.Types, true
}

// pending gathers the event types of a store's commits until its relay
// announces them: the relay announces every commit, also one made while it
// paused after its last NOTIFY.
type pending struct {
	mu        sync.Mutex
	committed bool
	types     map[string]struct{}
	// wake is woken after each commit is added.
	wake *Signal
}

func newPending() *pending { return &pending{types: map[string]struct{}{}, wake: NewSignal()} }

// add records a commit of events of types and wakes the relay.
func (p *pending) add(types []string) {
	p.mu.Lock()
	p.committed = true
	for _, t := range types {
		p.types[t] = struct{}{}
	}
	p.mu.Unlock()
	p.wake.Wake()
}

// take returns the types of the commits added since the last take, sorted;
// ok is false when there were none.
func (p *pending) take() (types []string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.committed {
		return nil, false
	}
	types = make([]string, 0, len(p.types))
	for t := range p.types {
		types = append(types, t)
	}
	slices.Sort(types)
	p.committed, p.types = false, map[string]struct{}{}
	return types, true
}

// relay carries wake-ups between instances: local commits (gathered in
// local) are announced with a coalesced NOTIFY (outside the appending
// transaction, so appends never queue on the notification lock) naming
// their event types, and NOTIFYs from other instances wake readers, each
// reader only for the types it reads as a local commit does: a projection
// of other types sleeps through another instance's action as through this
// one's. Each NOTIFY names self, so that its own come back to it as
// nothing (local commits woke local readers already). It returns when ctx
// ends.
func relay(ctx context.Context, pool *pgxpool.Pool, self string, local *pending, readers *Signal, logger *slog.Logger) {
	go listen(ctx, pool, notifyChannel, self, readers, logger)
	for {
		// The wake-up is taken before looking: a commit added after the
		// look wakes it.
		woken := local.wake.C()
		types, ok := local.take()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-woken:
			}
			continue
		}
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, encodeNotice(self, types)); err != nil && ctx.Err() == nil {
			logger.Warn("event wake-up notify failed", "err", err)
		}
		// Coalesce: at most one NOTIFY per few milliseconds whatever the
		// append rate; the commits of the pause go in the next.
		select {
		case <-ctx.Done():
			return
		case <-time.After(relayCoalesce):
		}
	}
}

// Listen wakes sig on every NOTIFY on channel until ctx ends, reconnecting
// after a lost connection (a relay's NOTIFY naming event types wakes only
// the subscriptions of those types: wakeOn). channel must be a plain
// identifier.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, sig *Signal, logger *slog.Logger) {
	listen(ctx, pool, channel, "", sig, logger)
}

// listen is Listen ignoring the NOTIFYs sent by self (when set).
func listen(ctx context.Context, pool *pgxpool.Pool, channel, self string, sig *Signal, logger *slog.Logger) {
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+channel)
			for err == nil {
				var n *pgconn.Notification
				if n, err = conn.Conn().WaitForNotification(ctx); err == nil {
					wakeOn(n.Payload, self, sig)
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

// wakeOn wakes sig for a NOTIFY with payload: only the subscriptions of
// the types it names, every one when it names none; nothing when self
// sent it. It wakes only readers, never the relay (no echo loop).
func wakeOn(payload, self string, sig *Signal) {
	from, types, typed := decodeNotice(payload)
	switch {
	case self != "" && from == self:
	case typed:
		sig.WakeTypes(types)
	default:
		sig.Wake()
	}
}
