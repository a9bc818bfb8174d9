// Package projections builds phonefleet's read models from the event feed
// with Watermill subscribers. Each projection has a stable name and its own
// consumer group (name@version) whose checkpoint commits in the same
// transaction as its rows, so each event takes effect exactly once. Its
// tables live in a versioned schema (proj_<name>_v<N>) and are read through
// views of the same names in public; a rebuild builds version N+1 beside the
// live one and takes over by swapping the views in one transaction.
package projections

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
)

// Projection is one read model.
//
// A projection writes only its own tables and never performs side effects
// (HTTP, device I/O): it runs inside the subscriber's transaction, and while
// that transaction is open no consumer group can read past it (the
// snapshot-xmin cut). Work with side effects reads a projection's rows from
// a worker; because rows are rebuilt deterministically (ids derived from
// event ids), a rebuild never repeats such work.
type Projection interface {
	// Name is stable: renaming a projection re-consumes everything.
	Name() string
	// Tables lists the tables Setup creates; each is readable as public.<table>.
	Tables() []string
	// Setup creates the projection's empty tables in schema.
	Setup(ctx context.Context, tx pgx.Tx, schema string) error
	// Apply applies a batch of events, in feed order, inside tx. Events the
	// projection does not care about are skipped.
	Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error
}

// Selective is implemented by a projection that reads only some event
// types. The feed then transfers only those; the checkpoint still passes
// the others. Each pattern is an SQL LIKE pattern ('api_key.%' or an exact
// name); a pattern may admit more than needed (`_` matches any character),
// so Apply still skips what it does not handle.
type Selective interface {
	EventTypes() []string
}

// InServer is implemented by a projection whose rows are a pure function of
// each event's stored columns, so the server can write them straight from
// the events table (INSERT … SELECT) faster than Go can read the events and
// send the rows back. The feed then transfers no events to it: each batch
// is a Span of the feed, and QueueApply queues the statements that apply
// the span's events; the runner sends them in one round trip with the
// checkpoint, in the subscriber's transaction. Apply is not called.
//
// The statements see the events as stored: upcasters, which change an
// event's data in Go, do not run.
type InServer interface {
	Projection
	QueueApply(b *pgx.Batch, schema string, s Span)
}

// Span is the stretch of the feed one batch covers: the events after After
// up to and including Through, in feed order. Every transaction that wrote
// in it has ended (the feed's snapshot-xmin cut), so the set of events in a
// span never changes and selecting them again returns the same rows.
type Span struct {
	After, Through eventstore.Cursor
	// Events is how many events the span holds (of every type).
	Events int
}

// spanEvents is the condition selecting a span's events from the events
// table, with Span.args as $1–$4.
const spanEvents = `(transaction_id, position) > ($1::text::xid8, $2) AND (transaction_id, position) <= ($3::text::xid8, $4)`

func (s Span) args() []any {
	return []any{strconv.FormatUint(s.After.TransactionID, 10), s.After.Position,
		strconv.FormatUint(s.Through.TransactionID, 10), s.Through.Position}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// Group returns the consumer group of a projection version.
func Group(name string, version int) string { return fmt.Sprintf("%s@%d", name, version) }

// Schema returns the schema holding a projection version's tables.
func Schema(name string, version int) string { return fmt.Sprintf("proj_%s_v%d", name, version) }

// projectionsChannel carries registry changes (takeovers) between processes.
const projectionsChannel = "phonefleet_projections"

// Runner runs the live version of every projection and performs rebuilds.
type Runner struct {
	store     *eventstore.Store
	pool      *pgxpool.Pool
	logger    *slog.Logger
	projs     map[string]Projection
	names     []string
	batchSize int
	// spanBatch is the most events one batch applies inside the server
	// (an InServer projection's span); see WithBatchSize.
	spanBatch int
	poll      time.Duration
	// stuckAfter is how long a live projection's apply may take inside
	// the group before it leaves the group (see group).
	stuckAfter time.Duration

	mu        sync.Mutex
	consumers map[string]*consumer // by group: versions being built, and members that left the group
	grp       *group               // the live versions, applied together
	runCtx    context.Context      // Run's, for consumers started by a group
}

// Option configures a Runner.
type Option func(*Runner)

// WithBatchSize sets the most events one transaction applies, whether its
// events travel to the service or it is applied inside the server.
func WithBatchSize(n int) Option { return func(r *Runner) { r.batchSize, r.spanBatch = n, n } }

// batchLimit is the most events one batch reads: spanBatch for a batch
// applied inside the server, which transfers only where it starts and
// ends, batchSize for one whose events travel to the service.
func (r *Runner) batchLimit(spanOnly bool) int {
	if spanOnly {
		return r.spanBatch
	}
	return r.batchSize
}

// WithPollInterval sets the fallback poll when no wake-up arrives.
func WithPollInterval(d time.Duration) Option { return func(r *Runner) { r.poll = d } }

// WithStuckAfter sets how long one live projection's apply may take before
// it leaves the group of live projections and runs alone, so that it holds
// back no other read model.
func WithStuckAfter(d time.Duration) Option { return func(r *Runner) { r.stuckAfter = d } }

// NewRunner returns a runner for projs over store's database.
func NewRunner(store *eventstore.Store, logger *slog.Logger, projs []Projection, opts ...Option) (*Runner, error) {
	r := &Runner{store: store, pool: store.Pool(), logger: logger, projs: map[string]Projection{},
		batchSize: 5000, spanBatch: 50000, poll: 100 * time.Millisecond, stuckAfter: 15 * time.Second, consumers: map[string]*consumer{}}
	for _, p := range projs {
		if !nameRE.MatchString(p.Name()) {
			return nil, fmt.Errorf("projection name %q: want lower-case letters, digits and _", p.Name())
		}
		if _, dup := r.projs[p.Name()]; dup {
			return nil, fmt.Errorf("projection %q registered twice", p.Name())
		}
		r.projs[p.Name()] = p
		r.names = append(r.names, p.Name())
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Names lists the projections in registration order.
func (r *Runner) Names() []string { return append([]string(nil), r.names...) }

// Ensure creates the registry entry, schema, views and checkpoint of every
// projection seen for the first time. Safe to run from several processes.
func (r *Runner) Ensure(ctx context.Context) error {
	for _, name := range r.names {
		p := r.projs[name]
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT claim_xact_lock('projection:' || $1)`, name); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO projection_registry (name, active_version) VALUES ($1, 1) ON CONFLICT DO NOTHING`, name)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if err := createVersion(ctx, tx, p, 1); err != nil {
				return err
			}
			return swapViews(ctx, tx, p, 1)
		})
		if err != nil {
			return fmt.Errorf("projection %s: ensure: %w", name, err)
		}
	}
	return nil
}

func createVersion(ctx context.Context, tx pgx.Tx, p Projection, version int) error {
	schema := Schema(p.Name(), version)
	if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return err
	}
	if err := p.Setup(ctx, tx, schema); err != nil {
		return fmt.Errorf("setup %s: %w", schema, err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO projection_checkpoints (consumer_group) VALUES ($1)
		ON CONFLICT (consumer_group) DO UPDATE SET last_transaction_id = '0', last_position = 0, events_applied = 0,
		    updated_at = now(), last_error = NULL, last_error_at = NULL`, Group(p.Name(), version))
	return err
}

// swapViews points public.<table> at version's tables. CREATE OR REPLACE
// keeps each view's identity, so readers queued on it continue unharmed; a
// version whose columns changed shape needs drop-and-create, still inside
// the caller's transaction, so the change is atomic either way.
func swapViews(ctx context.Context, tx pgx.Tx, p Projection, version int) error {
	schema := Schema(p.Name(), version)
	for _, t := range p.Tables() {
		replace := `CREATE OR REPLACE VIEW public.` + t + ` AS SELECT * FROM ` + schema + `.` + t
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			_, err := sp.Exec(ctx, replace)
			return err
		})
		if err != nil {
			if _, err := tx.Exec(ctx, `DROP VIEW IF EXISTS public.`+t+`; `+replace); err != nil {
				return fmt.Errorf("view %s: %w", t, err)
			}
		}
	}
	return nil
}

// Run keeps the active version of every projection consuming until ctx
// ends, following takeovers made by rebuilds in any process.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Ensure(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	r.runCtx = ctx
	r.mu.Unlock()
	changed := eventstore.NewSignal()
	go eventstore.Listen(ctx, r.pool, projectionsChannel, changed, r.logger)
	for {
		next := changed.C()
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("projection registry sync failed", "err", err)
		}
		select {
		case <-ctx.Done():
			r.stopAll()
			return nil
		case <-next:
		case <-time.After(2 * time.Second):
		}
	}
}

// sync starts a consumer for each active version and stops the rest.
func (r *Runner) sync(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, `SELECT name, active_version FROM projection_registry`)
	if err != nil {
		return err
	}
	active := map[string]int{}
	for rows.Next() {
		var name string
		var v int
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return err
		}
		active[name] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	r.rejoiners()
	want := map[string]bool{}
	var members []*member
	r.mu.Lock()
	for _, name := range r.names {
		if v, ok := active[name]; ok {
			g := Group(name, v)
			want[g] = true
			if _, alone := r.consumers[g]; !alone {
				members = append(members, newMember(r.projs[name], v))
			}
		}
	}
	old := r.grp
	same := old != nil && len(old.key) == len(members)
	for _, m := range members {
		same = same && old.key[m.group]
	}
	r.mu.Unlock()
	if !same {
		if old != nil {
			old.stop()
		}
		var g *group
		if len(members) > 0 {
			g = newGroup(r, members)
		}
		r.mu.Lock()
		r.grp = g
		r.mu.Unlock()
		if g != nil {
			g.launch(ctx)
		}
	}
	r.mu.Lock()
	var stale []*consumer
	for g, c := range r.consumers {
		if !want[g] && !c.building {
			stale = append(stale, c)
		}
	}
	r.mu.Unlock()
	for _, c := range stale {
		c.stop()
		if v, ok := active[c.p.Name()]; ok && c.version < v {
			// A restarted session of a retired version may have re-created
			// its checkpoint row; retired versions keep none.
			if _, err := r.pool.Exec(ctx, `DELETE FROM projection_checkpoints WHERE consumer_group = $1`, c.group); err != nil {
				return err
			}
		}
		r.logger.Info("projection version retired", "group", c.group)
	}
	return nil
}

// startAlone runs the live version of p by a consumer of its own (a member
// that left the group: its batch failed, or its apply did not return).
func (r *Runner) startAlone(p Projection, version int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, g := r.runCtx, Group(p.Name(), version)
	if _, ok := r.consumers[g]; ok || ctx == nil || ctx.Err() != nil {
		return
	}
	c := newConsumer(r, p, version)
	c.leftAt = time.Now()
	r.consumers[g] = c
	c.launch(ctx)
}

// rejoiners stops and returns the consumers of members that left the group
// and may rejoin it: at least rejoinAfter since they left, and caught up
// with no batch failed since. One that never recovers (a poison event, a
// hung apply) stays alone; one that left for a passing cause (a lock held
// for a while, a slow moment) does not stay alone for good.
func (r *Runner) rejoiners() {
	r.mu.Lock()
	var back []*consumer
	for _, c := range r.consumers {
		if !c.leftAt.IsZero() && time.Since(c.leftAt) >= r.rejoinAfter() && c.settled.Load() {
			back = append(back, c)
		}
	}
	r.mu.Unlock()
	for _, c := range back {
		c.stop() // its goroutine forgets it before done closes
		r.logger.Info("projection rejoins the group", "group", c.group)
	}
}

// rejoinAfter is how long a member stays alone at least after leaving.
func (r *Runner) rejoinAfter() time.Duration { return 4 * r.stuckAfter }

func (r *Runner) forget(c *consumer) {
	r.mu.Lock()
	if r.consumers[c.group] == c {
		delete(r.consumers, c.group)
	}
	r.mu.Unlock()
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	all := make([]*consumer, 0, len(r.consumers))
	for _, c := range r.consumers {
		all = append(all, c)
	}
	g := r.grp
	r.grp = nil
	r.mu.Unlock()
	if g != nil {
		g.stop()
	}
	for _, c := range all {
		c.stop()
	}
}

// consumer runs one consumer group: a Watermill subscriber on the feed whose
// messages (event batches) it applies in the subscriber's transaction.
type consumer struct {
	r        *Runner
	p        Projection
	version  int
	group    string
	schema   string
	building bool
	// leftAt is when the member this consumer runs left the group (zero
	// for a version being built); set before launch.
	leftAt time.Time
	// settled is set when the consumer has read the feed to its end (a
	// query found nothing new, or a batch was not full) and cleared when a
	// batch fails.
	settled atomic.Bool

	// cancel is set by launch before the consumer's goroutine starts and
	// never written again, so stop may read it from any goroutine.
	cancel context.CancelFunc
	done   chan struct{}
	idle   *eventstore.Signal // woken when the consumer has read the feed to its end
	// drained is set when the last batch applied was not full: the feed
	// held nothing more, so the subscriber waits for a commit instead of
	// querying again at once.
	drained  atomic.Bool
	stopOnce sync.Once
	// typed is woken by commits of the projection's event types (nil when
	// it reads every type) and by WaitFor; unsubscribe ends it.
	typed       *eventstore.Signal
	unsubscribe func()
}

func newConsumer(r *Runner, p Projection, version int) *consumer {
	c := &consumer{r: r, p: p, version: version, group: Group(p.Name(), version),
		schema: Schema(p.Name(), version), done: make(chan struct{}), idle: eventstore.NewSignal(), unsubscribe: func() {}}
	if types := eventTypesOf(p); types != nil {
		c.typed, c.unsubscribe = r.store.Signal().Sub(types)
	}
	return c
}

// caughtUpNow records that the consumer has read the feed to its end.
func (c *consumer) caughtUpNow() {
	c.settled.Store(true)
	c.idle.Wake()
}

// caughtUp returns a channel closed the next time the consumer has read the
// feed to its end.
func (c *consumer) caughtUp() <-chan struct{} { return c.idle.C() }

// launch starts the consumer under a context of its own that stop cancels.
// The cancel func is stored before the goroutine exists: writing it from the
// goroutine would race a concurrent stop.
func (c *consumer) launch(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	c.cancel = cancel
	go c.run(ctx)
}

func (c *consumer) run(ctx context.Context) {
	defer close(c.done)
	defer c.r.forget(c)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		c.settled.Store(false)
		c.r.logger.Error("projection batch failed; retrying", "group", c.group, "err", err, "retry_in", backoff.String())
		_, _ = c.r.pool.Exec(ctx, `UPDATE projection_checkpoints SET last_error = $2, last_error_at = now() WHERE consumer_group = $1`,
			c.group, err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (c *consumer) stop() {
	c.stopOnce.Do(func() {
		c.unsubscribe()
		if c.cancel == nil { // never launched
			return
		}
		c.cancel()
		<-c.done
	})
}

// session subscribes once and applies batches until ctx ends or a batch
// fails. The subscription is cancelled only from this goroutine and only
// between batches: Watermill's subscriber commits its transaction as soon as
// its context ends, so cancelling while a batch is being applied would race
// the handler on one connection. A failed batch cancels the subscription
// at once, ending its transaction: a poison event must not hold the feed's
// snapshot xmin for every other consumer while it is retried.
func (c *consumer) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	noDeadline := time.Duration(0) // batches are short; a deadline would cancel mid-batch
	wake := &wakeBackoff{ctx: sctx, signal: c.r.store.Signal(), typed: c.typed, poll: c.r.poll, idle: c.caughtUpNow, drained: &c.drained}
	sub, err := wsql.NewSubscriber(detached{wsql.BeginnerFromPgx(c.r.pool)}, wsql.SubscriberConfig{
		ConsumerGroup:  c.group,
		SchemaAdapter:  c.feed(),
		OffsetsAdapter: checkpoints{},
		BackoffManager: wake,
		AckDeadline:    &noDeadline,
		ResendInterval: time.Second,
	}, watermill.NewSlogLoggerWithLevelMapping(c.r.logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return err
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(sctx, feedTopic)
	if err != nil {
		return err
	}
	stop := func() {
		cancel()
		for range msgs { // let the subscriber finish its transaction
		}
	}
	for {
		select {
		case <-ctx.Done():
			stop()
			return nil
		case msg, ok := <-msgs:
			if !ok {
				return errors.New("projections: subscription ended")
			}
			if err := c.handle(msg); err != nil {
				stop()
				return err
			}
			msg.Ack()
		}
	}
}

// feed returns the feed adapter for the consumer's projection.
func (c *consumer) feed() feedSchema {
	_, inServer := c.p.(InServer)
	return feedSchema{batchSize: c.r.batchLimit(inServer), types: eventTypesOf(c.p), spanOnly: inServer}
}

// checkpointSQL advances a consumer group's checkpoint past a batch.
const checkpointSQL = `UPDATE projection_checkpoints
	SET last_transaction_id = $1::text::xid8, last_position = $2, events_applied = events_applied + $3,
	    updated_at = now(), last_error = NULL, last_error_at = NULL
	WHERE consumer_group = $4`

// handle applies one batch and advances the checkpoint in the subscriber's
// transaction. Rows and checkpoint must be committed together or not at all
// whatever the subscriber then decides (it commits when its context ends,
// even after a failed batch), so a projection's Apply runs inside a
// savepoint that also holds the checkpoint, and a failure rolls back to it.
// The savepoint and the checkpoint go in one round trip before the rows; an
// in-server projection's statements and the checkpoint go in one round trip
// with no savepoint, as any error in them fails the whole transaction.
func (c *consumer) handle(msg *message.Message) error {
	ctx := context.WithoutCancel(msg.Context()) // a started batch finishes (see detached)
	h, evs, err := decodeBatch(msg.Payload)
	if err != nil {
		return err
	}
	tx, err := pgxTxOf(msg)
	if err != nil {
		return err
	}
	_, inServer := c.p.(InServer)
	c.drained.Store(h.scanned < c.r.batchLimit(inServer))
	checkpoint := []any{strconv.FormatUint(h.lastTx, 10), h.lastPos, h.scanned, c.group}
	if p, ok := c.p.(InServer); ok {
		b := &pgx.Batch{}
		p.QueueApply(b, c.schema, Span{After: eventstore.Cursor{TransactionID: h.afterTx, Position: h.afterPos},
			Through: eventstore.Cursor{TransactionID: h.lastTx, Position: h.lastPos}, Events: h.scanned})
		b.Queue(checkpointSQL, checkpoint...)
		return tx.SendBatch(ctx, b).Close()
	}
	for i := range evs {
		if err := c.r.store.Upcast(&evs[i]); err != nil {
			return err
		}
	}
	b := &pgx.Batch{}
	b.Queue(`SAVEPOINT apply_batch`)
	b.Queue(checkpointSQL, checkpoint...)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if len(evs) > 0 {
		if err := c.p.Apply(ctx, tx, c.schema, evs); err != nil {
			if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT apply_batch`); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
	}
	// The savepoint need not be released: COMMIT keeps what it holds.
	return nil
}

// pgxTxOf returns the subscriber's transaction carried by msg.
func pgxTxOf(msg *message.Message) (pgx.Tx, error) {
	wtx, ok := wsql.TxFromContext(msg.Context())
	if !ok {
		return nil, errors.New("projections: message carries no transaction")
	}
	if d, ok := wtx.(detachedTx); ok {
		wtx = d.Tx
	}
	switch t := wtx.(type) {
	case *wsql.PgxTx:
		return t.Tx, nil
	case wsql.PgxTx:
		return t.Tx, nil
	default:
		return nil, fmt.Errorf("projections: unexpected transaction type %T", wtx)
	}
}

// eventTypesOf returns p's event type patterns, or nil for every type.
func eventTypesOf(p Projection) []string {
	if s, ok := p.(Selective); ok {
		return s.EventTypes()
	}
	return nil
}

// wakeBackoff is the subscriber's BackoffManager: when the feed has nothing
// new it waits for a commit wake-up (local, or relayed by NOTIFY from other
// instances) instead of a fixed poll, with poll as the fallback.
//
// A selective consumer mostly waits only for commits holding its event
// types (typed): an action's commits then wake the few projections that
// read them, not every one (issue 28). The feed is gap-safe, so events of
// its types can be held back behind a transaction in flight that holds none
// of them, and that commit must wake it too: after a query that found events
// or that followed a commit of its types, the next wait is on every commit.
// (A matching commit held back behind two such transactions in turn waits
// for the second's commit until the poll: at most poll late.)
type wakeBackoff struct {
	ctx    context.Context
	signal *eventstore.Signal
	typed  *eventstore.Signal // commits of the consumer's types; nil: it reads every type
	poll   time.Duration
	idle   func()
	// next and nextTyped were taken before the query just run; typedWake
	// reports that the wait before that query ended by a commit of the
	// consumer's types.
	next, nextTyped <-chan struct{}
	typedWake       bool
	// drained, when set, reports that the batch just applied was not full
	// (see consumer.drained).
	drained *atomic.Bool
}

func (b *wakeBackoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	if err != nil {
		if b.ctx.Err() == nil {
			logger.Error("projection feed query failed", err, nil)
		}
		b.next, b.nextTyped = nil, nil
		return time.Second
	}
	woken := false
	wide := b.typed == nil || !noMsg || b.typedWake
	b.typedWake = false
	wait := func() {
		if b.next == nil {
			b.take()
		}
		ch := b.nextTyped
		if wide {
			ch = b.next
		}
		select {
		case <-b.ctx.Done():
		case <-ch:
			woken = true
			select {
			case <-b.nextTyped:
				b.typedWake = true
			default:
			}
		case <-time.After(b.poll):
		}
	}
	drained := b.drained != nil && b.drained.Swap(false)
	if !noMsg && drained {
		// The batch read the feed to its end: the consumer is caught up as
		// of its query, as when a query finds nothing. Under a steady
		// stream of commits a query almost never finds nothing, so a
		// rebuild waiting for that took over only at a lucky gap (11 s
		// instead of 0.7 s at 1,000 sim phones) and a member that left the
		// group might never rejoin it.
		b.idle()
		if b.next != nil {
			// A query now would find only what was committed since that
			// batch's query started, which wakes b.next (taken before it),
			// or events held back behind a transaction then in flight,
			// whose commit wakes it too (or, if it wrote no events, the
			// poll finds them). Wait instead of querying.
			wait()
		}
	} else if noMsg {
		// A subscription ended by its session (a failed batch cancels it)
		// also reports "no message": that is not the feed being read to its
		// end, and a rebuild waiting for its version to catch up must not
		// take it over then.
		if b.ctx.Err() == nil {
			b.idle()
		}
		wait()
	}
	// Take the channels for the next wait before the next query runs, so a
	// commit landing during that query is not missed.
	b.take()
	if woken {
		// Let the commits of the next moment join this query: under load
		// one query (one transaction per projection) then serves several
		// commits instead of one each. Read models lag by this much more.
		select {
		case <-b.ctx.Done():
		case <-time.After(wakeDebounce):
		}
	}
	return 0
}

func (b *wakeBackoff) take() {
	b.next = b.signal.C()
	b.nextTyped = b.next
	if b.typed != nil {
		b.nextTyped = b.typed.C()
	}
}

// wakeDebounce is how long a woken consumer waits before it queries.
const wakeDebounce = 2 * time.Millisecond

// detached makes the subscriber's transactions immune to cancellation: a
// batch, once begun, runs to its commit or rollback. Shutdown still stops
// the subscriber between batches. Besides keeping shutdown orderly, this
// avoids a pgx panic ("slow write timer already active") seen when a
// context is cancelled while COMMIT is being written.
type detached struct{ wsql.Beginner }

func (d detached) BeginTx(ctx context.Context, opts *stdsql.TxOptions) (wsql.Tx, error) {
	ctx = context.WithoutCancel(ctx)
	tx, err := d.Beginner.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	// A projection's batch is re-derivable from the durable events, and its
	// rows and checkpoint are lost or kept together, so its commit need not
	// wait for the WAL flush: after a crash the batch is simply applied again.
	// The feed query itself turns synchronous_commit off for the transaction
	// (feedSelect), sparing a round trip per poll.
	return detachedTx{tx}, nil
}

type detachedTx struct{ wsql.Tx }

// skippedAck is the result of the ack query that was not sent.
type skippedAck struct{}

func (skippedAck) RowsAffected() (int64, error) { return 1, nil }

func (t detachedTx) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	if query == ackCheckpointSQL {
		// The handler wrote this checkpoint in this transaction already
		// (Ack follows only a successful consumer.handle).
		return skippedAck{}, nil
	}
	return t.Tx.ExecContext(context.WithoutCancel(ctx), query, args...)
}

func (t detachedTx) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	return t.Tx.QueryContext(context.WithoutCancel(ctx), query, args...)
}
