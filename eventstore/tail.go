package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// LastTransaction returns the highest transaction id among the events
// committed so far (0 when there are none). Every event committed before
// the call was written by a transaction at or below it; FeedPasses tells
// when the feed has caught up with it.
func (s *Store) LastTransaction(ctx context.Context) (uint64, error) {
	var tx uint64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(transaction_id)::text, '0')::bigint FROM events`).Scan(&tx)
	return tx, err
}

// FeedPasses reports whether ReadFeed now returns every event written by
// transactions up to and including tx: no transaction at or below tx is
// still open anywhere in the cluster (the snapshot xmin is above it), so
// none of them can still commit an event the feed would have to hold
// back. Once true it stays true.
func (s *Store) FeedPasses(ctx context.Context, tx uint64) (bool, error) {
	var passes bool
	err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8`,
		strconv.FormatUint(tx, 10)).Scan(&passes)
	return passes, err
}

// TailOptions says how Tail reads the feed.
type TailOptions struct {
	// After skips the events at or below this position.
	After int64
	// Follow keeps reading as events are committed, by this process or
	// (through NOTIFY) by any other, until ctx ends.
	Follow bool
	// MaxWait bounds, without Follow, how long Tail waits for transactions
	// that hold back events committed before it started; zero means a
	// minute.
	MaxWait time.Duration
	// Logger receives the wake-up listener's warnings (Follow); nil
	// discards them.
	Logger *slog.Logger
}

// HeldBackError is Tail's answer when, without Follow, a transaction stayed
// open for longer than MaxWait and held back events committed before Tail
// started: every event before it was passed, none after it.
type HeldBackError struct {
	// Mark is LastTransaction when Tail started; the open transaction is
	// older.
	Mark uint64
	// Waited is MaxWait.
	Waited time.Duration
}

func (e *HeldBackError) Error() string {
	return fmt.Sprintf("eventstore: the feed is held back by a transaction open for over %s (older than transaction %d)", e.Waited, e.Mark)
}

// tailPage is how many events Tail reads at a time.
const tailPage = 1000

// Tail passes the feed's events to emit in feed order, skipping those at or
// below opts.After, and stops at the first error emit returns.
//
// Without Follow it returns once it has passed every event committed before
// it started. The feed is gap-safe, so it holds back events newer than the
// oldest transaction still open anywhere in the cluster; Tail waits (at
// most MaxWait, then *HeldBackError) until those have become readable.
// With Follow it keeps going, woken by commits here and in other
// processes, until ctx ends. Either way it returns nil when ctx ends.
func (s *Store) Tail(ctx context.Context, opts TailOptions, emit func(Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A tail ends when its context does; that is not a failure.
	fail := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var mark uint64
	poll := time.Second
	if opts.Follow {
		logger := opts.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		go Listen(ctx, s.pool, notifyChannel, s.signal, logger)
	} else {
		var err error
		if mark, err = s.LastTransaction(ctx); err != nil {
			return fail(err)
		}
		poll = 20 * time.Millisecond
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = time.Minute
	}
	deadline := time.Now().Add(opts.MaxWait)
	var cur Cursor
	for {
		wake := s.signal.C()
		evs, next, err := s.ReadFeed(ctx, cur, tailPage)
		if err != nil {
			return fail(err)
		}
		cur = next
		for _, e := range evs {
			if e.Position <= opts.After {
				continue
			}
			if err := emit(e); err != nil {
				return err
			}
		}
		if len(evs) > 0 {
			continue
		}
		if !opts.Follow {
			done, err := s.FeedPasses(ctx, mark)
			if err != nil {
				return fail(err)
			}
			if done {
				return nil // everything committed before we started has been passed
			}
			if time.Now().After(deadline) {
				return &HeldBackError{Mark: mark, Waited: opts.MaxWait}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(poll):
		}
	}
}

// Last returns where the last event committed so far stands in the feed
// (its transaction and position), as an Appended a read model can be
// waited for: once a read model has applied it, it has applied every event
// committed before the call. It is zero when there are none.
func (s *Store) Last(ctx context.Context) (Appended, error) {
	var a Appended
	var txid int64
	err := s.pool.QueryRow(ctx, `SELECT transaction_id::text::bigint, position FROM events
		ORDER BY transaction_id DESC, position DESC LIMIT 1`).Scan(&txid, &a.LastPosition)
	if errors.Is(err, pgx.ErrNoRows) {
		return Appended{}, nil
	}
	a.TransactionID, a.FirstPosition = uint64(txid), a.LastPosition
	return a, err
}
