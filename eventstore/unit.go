package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Unit is one atomic write: appends to one or more streams and the extra
// statements that must commit with them (an idempotency row, a device's
// saved state, a claim marked done). Commit sends the whole unit as one
// pipelined batch, which the server runs as one implicit transaction: every
// statement commits, or none does. Build a unit with Append and Exec, then
// hand it to Store.Commit; the store owns the commit and the wake-ups that
// follow it.
type Unit struct {
	ops []op
}

// op is one statement of a unit: an append (stream != "" and events), an
// expectation (stream != "", no events) or an Exec.
type op struct {
	stream   string
	expected int64
	events   []NewEvent

	sql  string
	args []any
}

// Append adds the append of events to streamID at expected (NoStream, an
// exact version, or AnyVersion). Events whose Metadata is zero take the
// metadata on the committing context.
func (u *Unit) Append(streamID string, expected int64, events ...NewEvent) *Unit {
	u.ops = append(u.ops, op{stream: streamID, expected: expected, events: events})
	return u
}

// Exec adds a statement that commits with the unit's appends. A statement
// that fails (a unique violation, say) fails the whole unit; Commit returns
// its error unchanged, so the caller can tell which constraint refused it.
func (u *Unit) Exec(sql string, args ...any) *Unit {
	u.ops = append(u.ops, op{sql: sql, args: args})
	return u
}

// Expect makes the unit commit only if streamID is still at version (0: it
// does not exist), for a decision that read a stream it does not append
// to. Otherwise the unit fails with *ConflictError for that stream.
func (u *Unit) Expect(streamID string, version int64) *Unit {
	u.ops = append(u.ops, op{stream: streamID, expected: version})
	return u
}

// Empty reports whether the unit has nothing to write.
func (u *Unit) Empty() bool { return len(u.ops) == 0 }

// Committed is what a unit wrote: one Appended per Append, in order.
type Committed struct {
	Appends []Appended
}

// Last is the append that ends last in the feed, for read-your-writes
// waits (zero when the unit appended nothing).
func (c Committed) Last() Appended {
	var last Appended
	for _, a := range c.Appends {
		if a.LastPosition > last.LastPosition {
			last = a
		}
	}
	return last
}

// Commit writes u atomically and wakes feed readers. With WithGroupCommit,
// units committed concurrently share one batch and one commit; a unit that
// fails inside a shared batch is retried alone, so its failure is its own.
// A stream not at the expected version fails with *ConflictError.
// Metadata: events without their own take MetadataFrom(ctx), and the
// commit fails with ErrNoMetadata when ctx has none.
func (s *Store) Commit(ctx context.Context, u *Unit) (Committed, error) {
	p, err := s.prepare(ctx, u)
	if err != nil {
		return Committed{}, err
	}
	if s.group != nil {
		return s.group.do(ctx, p)
	}
	return s.flushOne(ctx, p)
}

// prepared is a unit whose events are encoded and checked.
type prepared struct {
	ops   []preparedOp
	types []string // of the events appended, for the readers' wake-up
}

type preparedOp struct {
	stream   string
	expected int64
	n        int  // events of an append; 0 for an expectation or an Exec
	summed   bool // the append answers one summary row (summed), not a row per event
	sql      string
	args     []any
	// one is the event of a single-event append (n == 1), which a shared
	// batch may write in one statement with its neighbours' (batchStatements).
	one *eventRow
}

// eventRow is one event's columns as bound.
type eventRow struct {
	id   pgtype.UUID
	typ  string
	ver  int16
	org  string
	data []byte
	meta []byte
	at   time.Time
}

func (s *Store) prepare(ctx context.Context, u *Unit) (*prepared, error) {
	if u == nil || len(u.ops) == 0 {
		return nil, errors.New("eventstore: commit of an empty unit")
	}
	p := &prepared{ops: make([]preparedOp, len(u.ops))}
	var ctxMeta *Metadata
	now := s.now().UTC().Truncate(time.Microsecond)
	for i, o := range u.ops {
		if o.stream == "" {
			if o.sql == "" {
				return nil, errors.New("eventstore: empty stream id")
			}
			p.ops[i] = preparedOp{sql: o.sql, args: o.args}
			continue
		}
		if len(o.events) == 0 {
			if o.expected < NoStream {
				return nil, fmt.Errorf("eventstore: invalid expected version %d", o.expected)
			}
			p.ops[i] = preparedOp{stream: o.stream, expected: o.expected, sql: `SELECT eventstore_expect($1, $2)`,
				args: []any{o.stream, o.expected}}
			continue
		}
		if o.expected < AnyVersion {
			return nil, fmt.Errorf("eventstore: invalid expected version %d", o.expected)
		}
		for j := range o.events {
			if o.events[j].Metadata != (Metadata{}) {
				continue
			}
			if ctxMeta == nil {
				m, err := MetadataFrom(ctx)
				if err != nil {
					return nil, err
				}
				ctxMeta = &m
			}
			o.events[j].Metadata = *ctxMeta
		}
		for _, e := range o.events {
			if !slices.Contains(p.types, e.Type) {
				p.types = append(p.types, e.Type)
			}
		}
		sql, args, one, err := appendStatement(o.stream, o.expected, o.events, now)
		if err != nil {
			return nil, err
		}
		p.ops[i] = preparedOp{stream: o.stream, expected: o.expected, n: len(o.events), summed: len(o.events) > 1, sql: sql, args: args, one: one}
	}
	return p, nil
}

// appendStatement returns the statement appending events to streamID at
// expected and its arguments, and for a single event its columns.
func appendStatement(streamID string, expected int64, events []NewEvent, now time.Time) (string, []any, *eventRow, error) {
	n := len(events)
	// pgtype.UUID, not uuid.UUID: pgx encodes the latter through its
	// driver.Valuer, formatting each id as text and parsing it back.
	ids := make([]pgtype.UUID, n)
	types := make([]string, n)
	vers := make([]int16, n)
	orgs := make([]string, n)
	datas := make([][]byte, n)
	metas := make([][]byte, n)
	ats := make([]time.Time, n)
	var err error
	for i, e := range events {
		if e.Type == "" || e.SchemaVersion <= 0 {
			return "", nil, nil, fmt.Errorf("eventstore: event %d has no type or schema version", i)
		}
		ids[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
		if e.ID == uuid.Nil {
			ids[i].Bytes = uuid.Must(uuid.NewV7())
		}
		types[i], vers[i], orgs[i] = e.Type, int16(e.SchemaVersion), e.OrgID
		datas[i] = e.Data
		if len(datas[i]) == 0 {
			datas[i] = []byte("{}")
		}
		if !json.Valid(datas[i]) {
			// Refuse bad JSON here: in a shared batch it would fail everyone.
			return "", nil, nil, fmt.Errorf("eventstore: event %d data is not valid JSON", i)
		}
		if i > 0 && e.Metadata == events[i-1].Metadata {
			metas[i] = metas[i-1] // a command's events usually share their metadata
		} else if metas[i], err = json.Marshal(e.Metadata); err != nil {
			return "", nil, nil, err
		}
		ats[i] = e.OccurredAt
		if ats[i].IsZero() {
			ats[i] = now
		}
	}
	var query string
	var args []any
	var one *eventRow
	if n == 1 {
		args = []any{streamID, ids[0], types[0], vers[0], orgs[0], datas[0], metas[0], ats[0]}
		query = pick(expected, appendOneNew, appendOneExact, appendOneAny)
		one = &eventRow{id: ids[0], typ: types[0], ver: vers[0], org: orgs[0], data: datas[0], meta: metas[0], at: ats[0]}
	} else {
		args = []any{streamID, ids, types, vers, orgs, datas, metas, ats}
		query = pick(expected, appendNew, appendExact, appendAny)
	}
	if expected > 0 {
		args = append(args, expected)
	}
	return query, args, one, nil
}

// flushOne writes one unit on its own and wakes readers.
func (s *Store) flushOne(ctx context.Context, p *prepared) (Committed, error) {
	c, err := s.send(ctx, []*prepared{p})
	if err != nil {
		return Committed{}, err
	}
	s.committed(p.types)
	return c[0], nil
}

// send writes units in one pipelined batch (one implicit transaction, one
// round trip). Any failure aborts the batch; the first error is returned.
// A batch of several units writes each run of adjacent single-event appends
// as one statement (batchStatements).
func (s *Store) send(ctx context.Context, ps []*prepared) ([]Committed, error) {
	stmts := batchStatements(ps)
	b := &pgx.Batch{}
	for _, st := range stmts {
		if len(st) > 1 {
			b.Queue(appendRun, runArgs(ps, st)...)
			continue
		}
		o := ps[st[0].unit].ops[st[0].op]
		b.Queue(o.sql, o.args...)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	out := make([]Committed, len(ps))
	for _, st := range stmts {
		if len(st) > 1 {
			as, err := readRun(br, ps, st)
			if err != nil {
				return nil, err
			}
			for k, r := range st {
				out[r.unit].Appends = append(out[r.unit].Appends, as[k])
			}
			continue
		}
		r := st[0]
		o := ps[r.unit].ops[r.op]
		if o.n == 0 {
			if _, err := br.Exec(); err != nil {
				return nil, conflictOr(err, o)
			}
			continue
		}
		a, err := readAppend(br, o)
		if err != nil {
			return nil, err
		}
		out[r.unit].Appends = append(out[r.unit].Appends, a)
	}
	return out, br.Close()
}

// opRef names one op of a batch: ps[unit].ops[op].
type opRef struct{ unit, op int }

// batchStatements lays a batch's ops out as its statements, in order: one
// op each, except that in a batch of several units (a shared commit) each
// run of adjacent single-event appends, within a unit or across units,
// becomes one statement (appendRun).
// A run never holds one stream or event id twice, so no row of it depends
// on another and the statement writes what the appends would one by one,
// in the same order and transaction. A unit written alone keeps a
// statement per op, so a failure names its own op (a shared batch that
// fails is written again unit by unit).
func batchStatements(ps []*prepared) [][]opRef {
	var out [][]opRef
	var run []opRef
	end := func() {
		if len(run) > 0 {
			out = append(out, run)
			run = nil
		}
	}
	for i, p := range ps {
		for j, o := range p.ops {
			if len(ps) < 2 || o.one == nil {
				end()
				out = append(out, []opRef{{i, j}})
				continue
			}
			for _, r := range run {
				if m := ps[r.unit].ops[r.op]; m.stream == o.stream || m.one.id == o.one.id {
					end()
					break
				}
			}
			run = append(run, opRef{i, j})
		}
	}
	end()
	return out
}

// runArgs binds a run's events as appendRun's arrays.
func runArgs(ps []*prepared, run []opRef) []any {
	n := len(run)
	streams, expected := make([]string, n), make([]int64, n)
	ids, types, vers, orgs := make([]pgtype.UUID, n), make([]string, n), make([]int16, n), make([]string, n)
	datas, metas, ats := make([][]byte, n), make([][]byte, n), make([]time.Time, n)
	for k, r := range run {
		o := ps[r.unit].ops[r.op]
		e := o.one
		streams[k], expected[k] = o.stream, o.expected
		ids[k], types[k], vers[k], orgs[k], datas[k], metas[k], ats[k] = e.id, e.typ, e.ver, e.org, e.data, e.meta, e.at
	}
	return []any{streams, expected, ids, types, vers, orgs, datas, metas, ats}
}

// readRun reads appendRun's rows: an Appended per op of the run, in its
// order, matched by event id.
func readRun(br pgx.BatchResults, ps []*prepared, run []opRef) ([]Appended, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]Appended, len(run))
	written := 0
	for rows.Next() {
		var id pgtype.UUID
		var pos, txid, ver int64
		if err := rows.Scan(&id, &pos, &txid, &ver); err != nil {
			return nil, err
		}
		// The rows come in the run's order; the id is checked, not assumed.
		k := written
		if k >= len(run) || ps[run[k].unit].ops[run[k].op].one.id != id {
			k = slices.IndexFunc(run, func(r opRef) bool { return ps[r.unit].ops[r.op].one.id == id })
		}
		if k < 0 || out[k] != (Appended{}) {
			return nil, fmt.Errorf("eventstore: a shared append answered an event it was not sent")
		}
		out[k] = Appended{FirstPosition: pos, LastPosition: pos, TransactionID: uint64(txid), Version: ver}
		written++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if written != len(run) {
		return nil, fmt.Errorf("eventstore: a shared append wrote %d of its %d events", written, len(run))
	}
	return out, nil
}

// readAppend reads an append's RETURNING rows. Each append statement fails
// (never returns fewer rows) when the stream is not at the expected
// version, so that a batch never commits half a unit.
func readAppend(br pgx.BatchResults, o preparedOp) (Appended, error) {
	rows, err := br.Query()
	if err != nil {
		return Appended{}, conflictOr(err, o)
	}
	var out Appended
	count := 0
	if o.summed {
		var txid int64
		if rows.Next() {
			if err := rows.Scan(&count, &out.FirstPosition, &out.LastPosition, &txid, &out.Version); err != nil {
				rows.Close()
				return Appended{}, err
			}
			out.TransactionID = uint64(txid)
		}
	}
	for !o.summed && rows.Next() {
		var pos, txid, ver int64
		if err := rows.Scan(&pos, &txid, &ver); err != nil {
			rows.Close()
			return Appended{}, err
		}
		if count == 0 || pos < out.FirstPosition {
			out.FirstPosition = pos
		}
		out.LastPosition = max(out.LastPosition, pos)
		out.Version = max(out.Version, ver)
		out.TransactionID = uint64(txid)
		count++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Appended{}, conflictOr(err, o)
	}
	if count != o.n {
		return Appended{}, &ConflictError{StreamID: o.stream, Expected: o.expected}
	}
	return out, nil
}

// conflictOr turns the constraint failures of an append into *ConflictError:
// the unique (stream, version) (another writer got there first), the
// not-null version (the expected version does not exist) and a failed
// expectation (SQLSTATE PF409, eventstore_expect).
func conflictOr(err error, o preparedOp) error {
	var pgErr *pgconn.PgError
	if o.stream != "" && errors.As(err, &pgErr) && ((pgErr.Code == "23505" && pgErr.ConstraintName == "events_stream_version") ||
		(pgErr.Code == "23502" && pgErr.ColumnName == "stream_version") || pgErr.Code == "PF409") {
		return &ConflictError{StreamID: o.stream, Expected: o.expected}
	}
	return err
}

// maxGroup bounds how many units share one batch.
const maxGroup = 64

// maxFlushes is how many shared batches may be in flight at once: while
// one commits, the next can already be on the wire, as the action path's
// separate request and outcome queues allowed before they became one.
const maxFlushes = 2

// groupFlushTimeout bounds one shared batch; it does not depend on any one
// caller's context, since it carries the others' writes too.
const groupFlushTimeout = 15 * time.Second

// groupCommit lets concurrent commits share batches: a caller that finds
// fewer than maxFlushes flushes under way leads one, and flushes itself
// with every unit queued by then; units arriving while the flushes are
// busy wait, and a finishing leader hands the lead to the first of them. A
// lone writer is flushed at once, so grouping adds no latency; under load
// many units share one commit (one WAL flush, one wake-up of every read
// model) instead of queueing for their own.
type groupCommit struct {
	s        *Store
	mu       sync.Mutex
	pending  []*groupCall
	flushing int
}

type groupCall struct {
	p    *prepared
	out  Committed
	err  error
	wake chan bool // true: lead the next flush; false: done
}

func (g *groupCommit) do(ctx context.Context, p *prepared) (Committed, error) {
	c := &groupCall{p: p, wake: make(chan bool, 1)}
	g.mu.Lock()
	if g.flushing < maxFlushes {
		g.flushing++
		g.mu.Unlock()
	} else {
		g.pending = append(g.pending, c)
		g.mu.Unlock()
		// Wait even when ctx ends: the unit is queued and may be written.
		if lead := <-c.wake; !lead {
			return c.out, c.err
		}
		// Handed the lead, and the flush slot with it.
	}
	g.mu.Lock()
	n := min(len(g.pending), maxGroup-1)
	batch := append([]*groupCall{c}, g.pending[:n]...)
	g.pending = g.pending[n:]
	g.mu.Unlock()
	g.flush(batch)
	for _, b := range batch[1:] {
		b.wake <- false
	}
	g.mu.Lock()
	if len(g.pending) > 0 {
		next := g.pending[0]
		g.pending = g.pending[1:]
		next.wake <- true
	} else {
		g.flushing--
	}
	g.mu.Unlock()
	return c.out, c.err
}

// flush writes a group in one batch; when the batch fails, each unit is
// written alone so that one unit's failure is not another's.
func (g *groupCommit) flush(batch []*groupCall) {
	ctx, cancel := context.WithTimeout(context.Background(), groupFlushTimeout)
	defer cancel()
	ps := make([]*prepared, len(batch))
	for i, b := range batch {
		ps[i] = b.p
	}
	out, err := g.s.send(ctx, ps)
	if err == nil {
		var types []string
		for _, p := range ps {
			types = append(types, p.types...)
		}
		g.s.committed(types)
		for i, b := range batch {
			b.out = out[i]
		}
		return
	}
	if len(batch) == 1 {
		batch[0].err = err
		return
	}
	for _, b := range batch {
		b.out, b.err = g.s.flushOne(ctx, b.p)
	}
}

// Transient reports whether a write failed for a reason that passes — the
// database unreachable, restarting or out of connections, or the
// connection lost — so that the same write may succeed if tried again. A
// conflict, a constraint or any other answer the server gave about the
// write itself is not transient, nor is anything decided above the store.
func Transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53", "57": // connection exception, insufficient resources, operator intervention
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
