package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
)

// group applies the live versions of several projections from ONE read of
// the feed in ONE transaction (issue 28: each projection reading the feed
// in a transaction of its own after each commit was most of the database's
// work per device action). Each member keeps its own checkpoint row, locked
// and advanced in that transaction with its rows, so exactly-once apply,
// status, WaitFor, rebuild and takeover see projections as before: the
// group reads from its members' lowest checkpoint, and each member applies
// only the events past its own.
//
// A member whose batch fails is rolled back to its savepoint, leaves the
// group (the others' batches commit) and is run by a consumer of its own,
// which retries with backoff and reports the error in its status. A member
// whose apply has not returned after the runner's stuckAfter (waiting on a
// lock, or never returning at all) leaves the group the same way: the group
// stops waiting for that batch, ends its transaction by terminating its
// server session (so the checkpoints it locked are free again) and goes on
// without the member; one stuck read model stops only itself, as it did
// with a consumer each. A member that left rejoins once its own consumer
// has caught up with no failure since, no sooner than 4× stuckAfter after
// it left (Runner.rejoiners). A version being built (rebuild) always has a
// consumer of its own.
type group struct {
	r       *Runner
	members []*member
	// key lists the member consumer groups, as sync compares it.
	key map[string]bool

	cancel      context.CancelFunc
	done        chan struct{}
	stopOnce    sync.Once
	drained     atomic.Bool
	typed       *eventstore.Signal // nil when a member reads every type
	unsubscribe func()
	// types are the event type patterns the feed transfers (nil: every
	// type); spanOnly when every member is applied inside the server.
	types    []string
	spanOnly bool
	query    string
	// limit is the most events one batch reads (see maxTransferBatch).
	limit int
}

// maxTransferBatch caps a group batch whose events travel to the service.
// The batch is read as ONE row of arrays, and pgx reads a message into one
// buffer of its size rounded up to a power of two, pooled until the next
// garbage collections: a full batch of 5,000 action events (about 1.5 KB
// each with their metadata) was a buffer of 16–32 MB held live, beside the
// events decoded from it, whenever the group lagged (measured at 1,000
// sim phones). A batch of 1,000 still spreads the transaction, the read
// and the checkpoints over hundreds of events. A group applied inside the
// server (spanOnly) reads only the span, so it keeps the runner's span
// batch.
const maxTransferBatch = 1000

// applying is the member whose apply a batch is in, and since when; the
// batch's own mark (nil between applies), read by the run loop's watchdog.
// Each batch has its own, so an abandoned batch that resumes cannot set or
// clear the mark of the batch after it.
type applying struct {
	m     *member
	since time.Time
}

// batchResult is what a batch reports to the run loop: whether the page
// was empty (or held none of the members' types, see batch), its error,
// and the members whose batch failed.
type batchResult struct {
	noMsg  bool
	err    error
	failed []*member
}

type member struct {
	p        Projection
	version  int
	group    string
	schema   string
	types    []string // nil: every type
	inServer bool
}

func newGroup(r *Runner, members []*member) *group {
	g := &group{r: r, members: members, key: map[string]bool{}, done: make(chan struct{}), unsubscribe: func() {}, spanOnly: true}
	var wakeTypes []string
	every := false
	transferAll := false
	for _, m := range members {
		g.key[m.group] = true
		if m.types == nil {
			every = true
		} else {
			wakeTypes = append(wakeTypes, m.types...)
		}
		if !m.inServer {
			g.spanOnly = false
			if m.types == nil {
				transferAll = true
			} else {
				g.types = append(g.types, m.types...)
			}
		}
	}
	if transferAll {
		g.types = nil
	}
	if !every {
		g.typed, g.unsubscribe = r.store.Signal().Sub(wakeTypes)
	}
	g.query = groupSelect(g.spanOnly)
	g.limit = r.batchLimit(g.spanOnly)
	if !g.spanOnly {
		g.limit = min(g.limit, maxTransferBatch)
	}
	return g
}

func newMember(p Projection, version int) *member {
	_, inServer := p.(InServer)
	return &member{p: p, version: version, group: Group(p.Name(), version), schema: Schema(p.Name(), version),
		types: eventTypesOf(p), inServer: inServer}
}

// groupCheckpoints locks the members' checkpoints (in one order, so two
// instances' groups never deadlock) and opens the page at the lowest.
const groupCheckpoints = `
WITH cps AS (
    SELECT consumer_group AS g, last_transaction_id AS tx, last_position AS pos
    FROM projection_checkpoints
    WHERE consumer_group = ANY($1) AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    ORDER BY consumer_group
    FOR UPDATE
), cp AS (
    SELECT tx, pos FROM cps ORDER BY tx, pos LIMIT 1
), page AS (
`

// groupMembers returns each member's checkpoint and how many of the page's
// events lie past it, in the order of the member's consumer group.
const groupMembers = `,
       (SELECT array_agg(g ORDER BY g) FROM cps), (SELECT array_agg(tx::text::bigint ORDER BY g) FROM cps),
       (SELECT array_agg(pos ORDER BY g) FROM cps),
       (SELECT array_agg((SELECT count(*) FROM page p WHERE (p.transaction_id, p.position) > (cps.tx, cps.pos)) ORDER BY g) FROM cps)
FROM page
HAVING count(*) > 0`

// groupSelect is the feed select (feedSelect, spanSelect) of a group: the
// same cut and seek from the lowest member checkpoint, and each member's
// checkpoint and share of the page.
func groupSelect(spanOnly bool) string {
	if spanOnly {
		return groupCheckpoints + feedSpan + feedSeek + groupMembers
	}
	return groupCheckpoints + feedEvents + feedSeek + feedEventArrays + groupMembers
}

// bulkCheckpointSQL advances the checkpoints of the members that found
// none of their types in a batch, in one statement.
const bulkCheckpointSQL = `UPDATE projection_checkpoints c
	SET last_transaction_id = $1::text::xid8, last_position = $2, events_applied = events_applied + u.n,
	    updated_at = now(), last_error = NULL, last_error_at = NULL
	FROM unnest($3::text[], $4::bigint[]) u(g, n)
	WHERE c.consumer_group = u.g`

func (g *group) launch(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	g.cancel = cancel
	go g.run(ctx)
}

func (g *group) stop() {
	g.stopOnce.Do(func() {
		g.unsubscribe()
		if g.cancel == nil {
			return
		}
		g.cancel()
		<-g.done
	})
}

// nudge wakes the group for a WaitFor on projection name.
func (g *group) nudge(name string) {
	if g.typed == nil {
		return
	}
	for _, m := range g.members {
		if m.p.Name() == name {
			g.typed.Wake()
			return
		}
	}
}

func (g *group) run(ctx context.Context) {
	defer close(g.done)
	logger := watermill.NewSlogLoggerWithLevelMapping(g.r.logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	wake := &wakeBackoff{ctx: ctx, signal: g.r.store.Signal(), typed: g.typed, poll: g.r.poll, idle: func() {}, drained: &g.drained}
	for ctx.Err() == nil && len(g.members) > 0 {
		res := g.await(ctx)
		for _, m := range res.failed {
			g.eject(m)
		}
		if ctx.Err() != nil {
			return
		}
		if res.err != nil {
			g.r.logger.Error("projection group batch failed; retrying", "err", res.err)
		}
		if d := wake.HandleError(logger, res.noMsg, res.err); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// await runs one batch and waits for it. A batch, once begun, runs to its
// commit or rollback (it is not cancelled with ctx) unless a member's apply
// in it outlasts stuckAfter: then the batch is abandoned, its server
// session terminated (its transaction rolls back and its checkpoint locks
// go), and the member reported failed, so it leaves the group.
func (g *group) await(ctx context.Context) batchResult {
	pid := make(chan uint32, 1)
	res := make(chan batchResult, 1)
	members, mark := g.members, &atomic.Pointer[applying]{}
	go func() { res <- g.batch(context.WithoutCancel(ctx), members, mark, pid) }()
	tick := time.NewTicker(g.r.stuckAfter / 4)
	defer tick.Stop()
	for {
		select {
		case r := <-res:
			return r
		case <-tick.C:
		}
		a := mark.Load()
		if a == nil || time.Since(a.since) < g.r.stuckAfter {
			continue
		}
		g.r.logger.Error("projection apply did not return; the projection leaves its group and runs alone",
			"group", a.m.group, "after", time.Since(a.since).Round(time.Millisecond))
		// The batch sent its session's pid before its first apply.
		bg := context.WithoutCancel(ctx)
		if _, err := g.r.pool.Exec(bg, `SELECT pg_terminate_backend($1)`, int64(<-pid)); err != nil {
			g.r.logger.Error("ending the abandoned group transaction failed", "err", err)
		}
		// Its status tells why it left (its own consumer clears this once
		// a batch of its succeeds).
		if _, err := g.r.pool.Exec(bg, `UPDATE projection_checkpoints SET last_error = $2, last_error_at = now() WHERE consumer_group = $1`,
			a.m.group, fmt.Sprintf("apply did not return within %s", g.r.stuckAfter)); err != nil {
			g.r.logger.Error("recording a stuck projection failed", "group", a.m.group, "err", err)
		}
		return batchResult{failed: []*member{a.m}}
	}
}

// batch reads the next page of the feed for every member and applies each
// member's share, in one transaction, sending its session's pid on pid
// first, and marking on mark the member it applies. It touches no group
// state (its run loop may have abandoned it, see await).
func (g *group) batch(ctx context.Context, members []*member, mark *atomic.Pointer[applying], pid chan<- uint32) (res batchResult) {
	tx, err := g.r.pool.Begin(ctx)
	if err != nil {
		return batchResult{err: err}
	}
	defer func() {
		if res.err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	pid <- tx.Conn().PgConn().PID()
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.group
	}
	args := []any{names, g.limit}
	if !g.spanOnly {
		var types any // NULL: every type
		if g.types != nil {
			types = g.types
		}
		args = append(args, types)
	}
	var (
		groups             []string
		cpTxs, cpPos, cpNs []int64
	)
	h, evs, err := scanBatch(tx.QueryRow(ctx, g.query, args...), g.spanOnly, &groups, &cpTxs, &cpPos, &cpNs)
	if errors.Is(err, pgx.ErrNoRows) {
		return batchResult{noMsg: true, err: tx.Commit(ctx)}
	}
	if err != nil {
		return batchResult{err: err}
	}
	g.drained.Store(h.scanned < g.limit)
	for i := range evs {
		if err := g.r.store.Upcast(&evs[i]); err != nil {
			return batchResult{err: err}
		}
	}
	last := strconv.FormatUint(h.lastTx, 10)
	byGroup := make(map[string]*member, len(members))
	for _, m := range members {
		byGroup[m.group] = m
	}
	actx := withDecodeMemo(ctx) // each event decoded once for all members
	var (
		quiet   []string // members that found none of their types
		quietNs []int64
		failed  []*member
		applied bool // a member found some of its types
	)
	for i, name := range groups {
		m, n := byGroup[name], cpNs[i]
		if m == nil || n == 0 {
			continue // nothing past its checkpoint in this page
		}
		after := eventstore.Cursor{TransactionID: uint64(cpTxs[i]), Position: cpPos[i]}
		var own []eventstore.Event
		if !m.inServer {
			for _, e := range evs {
				if (e.TransactionID > after.TransactionID || e.TransactionID == after.TransactionID && e.Position > after.Position) &&
					eventstore.MatchesType(m.types, e.Type) {
					own = append(own, e)
				}
			}
			if len(own) == 0 {
				quiet, quietNs = append(quiet, m.group), append(quietNs, n)
				continue
			}
		}
		applied = true
		mark.Store(&applying{m: m, since: time.Now()})
		aerr := g.apply(actx, tx, m, after, h, n, last, own)
		mark.Store(nil)
		if aerr != nil {
			if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT apply_batch`); rerr != nil {
				return batchResult{err: errors.Join(aerr, rerr)}
			}
			if _, rerr := tx.Exec(ctx, `UPDATE projection_checkpoints SET last_error = $2, last_error_at = now() WHERE consumer_group = $1`,
				m.group, aerr.Error()); rerr != nil {
				return batchResult{err: errors.Join(aerr, rerr)}
			}
			g.r.logger.Error("projection batch failed; the projection leaves its group and retries alone", "group", m.group, "err", aerr)
			failed = append(failed, m)
		}
	}
	if len(quiet) > 0 {
		if _, err := tx.Exec(ctx, bulkCheckpointSQL, last, h.lastPos, quiet, quietNs); err != nil {
			return batchResult{err: err}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return batchResult{err: err}
	}
	// A page that held none of any member's types, and was the feed's end,
	// counts as empty for the wait that follows (wakeBackoff): the group
	// then sleeps through commits of other types, as a consumer of a few
	// types does, instead of querying after each.
	return batchResult{failed: failed, noMsg: !applied && h.scanned < g.limit}
}

// apply applies member m's share of a batch (the events after its
// checkpoint after, n of every type) inside a savepoint that also holds its
// checkpoint, as consumer.handle does.
func (g *group) apply(ctx context.Context, tx pgx.Tx, m *member, after eventstore.Cursor, h batchHeader, n int64, last string, own []eventstore.Event) error {
	b := &pgx.Batch{}
	b.Queue(`SAVEPOINT apply_batch`)
	b.Queue(checkpointSQL, last, h.lastPos, n, m.group)
	if p, ok := m.p.(InServer); ok {
		p.QueueApply(b, m.schema, Span{After: after, Through: eventstore.Cursor{TransactionID: h.lastTx, Position: h.lastPos}, Events: int(n)})
		return tx.SendBatch(ctx, b).Close()
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return m.p.Apply(ctx, tx, m.schema, own)
}

// eject takes m out of the group (from the group's own goroutine) and
// starts a consumer of its own for it.
func (g *group) eject(m *member) {
	kept := g.members[:0:0]
	for _, o := range g.members {
		if o != m {
			kept = append(kept, o)
		}
	}
	g.r.mu.Lock() // nudge reads members and sync reads key under it
	g.members = kept
	delete(g.key, m.group)
	g.r.mu.Unlock()
	g.r.startAlone(m.p, m.version)
}

func (g *group) String() string { return fmt.Sprintf("group of %d", len(g.members)) }
