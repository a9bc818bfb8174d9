// Package claims is the one claims mechanism of the service's reactions
// (workers.Reactor: "event → retried, idempotent side effect"). Every
// reaction keeps its claims in one table, claims (migration 0009), keyed by
// the reaction's stable name and the item's key, and claims, records and
// cleans up through this package; a reaction only says where its items are
// (Source).
//
// The rules it keeps, so that any number of instances can run a reaction
// on one database:
//
//   - An item's attempts are numbered from 1. An instance claims one attempt
//     of one item under a lease (Claim, FOR UPDATE SKIP LOCKED, so
//     instances claiming at once pass over each other's rows).
//   - The attempt's event is appended in the same unit that marks the claim
//     recorded and ends its lease (Recorded). A recorded attempt is never
//     claimed again, even while the read model still lags behind its event:
//     the next attempt is claimed only once the read model has applied it.
//   - A claim whose holder died between acting and recording stays
//     unrecorded; once its lease is over another instance claims the same
//     attempt again (so an effect is made at least once, under the same
//     key).
//   - Claim rows nothing depends on any more are deleted (Cleanup).
package claims

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
)

// Lease is what a claim takes: the holder's name, the time of the claim
// (items due at or before it may be claimed) and the end of the lease,
// after which an unrecorded claim may be taken over.
type Lease struct {
	Holder string
	Now    time.Time
	Until  time.Time
}

// Claimed is one attempt a holder has a lease on.
type Claimed[T any] struct {
	// Key names the item; it is derived from the event reacted to, and it is
	// the same on every attempt (a receiver deduplicates on it).
	Key string
	// Attempt is the 1-based attempt number claimed.
	Attempt int
	Item    T
}

// Source says where one reaction's items are: its read model, read with
// two queries the claim statements embed as subqueries.
type Source[T any] struct {
	// Reaction is the reaction's name in the claims table. It is stable:
	// renaming it forgets the claims held under the old name.
	Reaction string
	// Items selects every item the read model holds, whatever its state, as
	// columns key (the item's key) and attempts (how many attempts the read
	// model has applied). Cleanup reads it: a claim of an item that is gone
	// from it is dropped once its lease is over.
	Items string
	// Due selects the items that wait for an attempt, as columns key,
	// attempts and due_at (when the next attempt is due, as the domain
	// decided it), then the item's own columns, which Scan reads. It takes
	// no parameters: the claim adds the bound on due_at. Claims are taken
	// in (due_at, key) order, so an index on the underlying columns in that
	// order keeps a claim's cost to the rows it takes.
	Due string
	// Scan returns where the item's own columns of Due go.
	Scan func(item *T) []any
}

// Claims claims the items of one reaction for one holder process.
// Claim must not be called concurrently with itself (it keeps a cursor
// from one claim to the next; workers.Reactor serialises its claims);
// Cleanup may run at any time.
type Claims[T any] struct {
	pool                   *pgxpool.Pool
	src                    Source[T]
	ensure, claim, cleanup string
	cursor                 cursor
}

// New returns the claims of src's reaction on pool.
func New[T any](pool *pgxpool.Pool, src Source[T]) *Claims[T] {
	return &Claims[T]{pool: pool, src: src,
		ensure:  fmt.Sprintf(ensureRows, src.Due),
		claim:   fmt.Sprintf(claimDue, src.Due),
		cleanup: fmt.Sprintf(cleanupRows, src.Items, src.Items)}
}

// ensureRows gives due items without a claim row one (attempt 0), outside
// the claiming transaction, so concurrent claims meet on existing rows that
// SKIP LOCKED can pass over. Rows are inserted in one total order, so two
// instances inserting overlapping sets wait for each other at most, never
// deadlock. Parameters: reaction, now, limit, cursor (due_at, key).
//
// Each due item looks up its own claim row by primary key. The OFFSET 0
// keeps that lookup a per-item probe: PostgreSQL would otherwise plan it
// as a join, and on a claims table it has no statistics for yet (a new
// database, a burst in its first minute) it takes "reaction = $1" for a
// condition few rows meet and scans every claim row for each due item.
const ensureRows = `INSERT INTO claims (reaction, key)
	SELECT $1, d.key FROM (%s) d
	WHERE d.due_at <= $2 AND (d.due_at, d.key) > ($4, $5)
	  AND NOT EXISTS (SELECT FROM claims c WHERE c.reaction = $1 AND c.key = d.key OFFSET 0)
	ORDER BY d.due_at, d.key LIMIT $3
	ON CONFLICT DO NOTHING`

// claimDue takes the lease on up to $3 due attempts after the cursor
// ($6, $7), in due order. A claim row is free when the read model has
// caught up with it (its attempt is among the item's attempts), or when its
// holder never recorded it and the lease has ended (the holder died between
// acting and recording: the same attempt is made again). A recorded attempt
// the read model has not applied yet is not free, so lag never causes a
// second effect. Parameters: reaction, now, limit, holder, lease end,
// cursor (due_at, key).
//
// The due items are walked in order and each locks its own claim row (a
// LATERAL subquery that locks cannot be flattened into a join), for the
// reason ensureRows gives: only as many rows are locked as are taken.
const claimDue = `WITH picked AS (
	SELECT d.* FROM (%s) d
	CROSS JOIN LATERAL (SELECT FROM claims c
		WHERE c.reaction = $1 AND c.key = d.key
		  AND (c.attempt <= d.attempts OR (c.attempt = d.attempts + 1 AND NOT c.recorded AND c.leased_until <= $2))
		FOR UPDATE SKIP LOCKED) c
	WHERE d.due_at <= $2 AND (d.due_at, d.key) > ($6, $7)
	ORDER BY d.due_at, d.key
	LIMIT $3
)
UPDATE claims c
SET attempt = p.attempts + 1, recorded = false, claimed_by = $4, claimed_at = $2, leased_until = $5
FROM picked p WHERE c.reaction = $1 AND c.key = p.key
RETURNING p.*`

// cleanupRows drops the claim rows that no longer hold anything back:
// recorded attempts the read model has applied (a later attempt makes a
// new row when it is due), and claims of items gone from the read model
// once their lease is over. Parameters: reaction, now.
const cleanupRows = `DELETE FROM claims c WHERE c.reaction = $1 AND (
	(c.recorded AND EXISTS (SELECT 1 FROM (%s) i WHERE i.key = c.key AND i.attempts >= c.attempt))
	OR (c.leased_until <= $2 AND NOT EXISTS (SELECT 1 FROM (%s) i WHERE i.key = c.key)))`

// cursor is where the next claim starts in due order. Rows before it are
// in flight (claimed by some instance) or wait for the read model, and
// rescanning them on every claim would cost time proportional to the work
// in flight; so a claim that filled its quota moves the cursor past its
// last row, and one that did not resets it to the start, so nothing behind
// the cursor (a lapsed lease, a late-arriving item) waits longer than one
// more round.
type cursor struct {
	at  time.Time
	key string
}

var cursorStart = cursor{at: time.Unix(0, 0).UTC()}

// Claim gives due items claim rows, then takes the lease l on up to n due
// attempts, in due order after the cursor, and returns them. Its errors are
// the database's.
func (c *Claims[T]) Claim(ctx context.Context, l Lease, n int) ([]Claimed[T], error) {
	from := c.cursor
	if from.at.IsZero() {
		from = cursorStart
	}
	if _, err := c.pool.Exec(ctx, c.ensure, c.src.Reaction, l.Now, n, from.at, from.key); err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	var out []Claimed[T]
	last := from
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, c.claim, c.src.Reaction, l.Now, n, l.Holder, l.Until, from.at, from.key)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed[T], error) {
			var cl Claimed[T]
			var due time.Time
			err := r.Scan(append([]any{&cl.Key, &cl.Attempt, &due}, c.src.Scan(&cl.Item)...)...)
			cl.Attempt++ // the row carries the attempts made; this is the next
			if err == nil && (due.After(last.at) || due.Equal(last.at) && cl.Key > last.key) {
				last = cursor{at: due, key: cl.Key}
			}
			return cl, err
		})
		return err
	})
	if err != nil {
		c.cursor = cursorStart
		return nil, fmt.Errorf("claim: %w", err)
	}
	if len(out) == n {
		c.cursor = last
	} else {
		c.cursor = cursorStart
	}
	return out, nil
}

// Cleanup deletes the claim rows that no longer hold anything back:
// recorded attempts the read model has applied, and claims of items gone
// from the read model whose lease ended by now. Its errors are the
// database's.
func (c *Claims[T]) Cleanup(ctx context.Context, now time.Time) error {
	_, err := c.pool.Exec(ctx, c.cleanup, c.src.Reaction, now)
	return err
}

// Recorded adds to u the statement that marks attempt of the reaction's
// item key recorded and ends its lease: the attempt's event must be
// appended in the same unit, so that an attempt is recorded, and seen
// recorded, once. A claim row that is not there, or holds another attempt,
// is left alone.
func Recorded(u *eventstore.Unit, reaction, key string, attempt int) *eventstore.Unit {
	return u.Exec(`UPDATE claims SET recorded = true, leased_until = '-infinity'
		WHERE reaction = $1 AND key = $2 AND attempt = $3`, reaction, key, attempt)
}
