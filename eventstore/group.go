package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// groupCommit writes concurrent single-event appends together: while one
// statement is being written and committed, new appends queue, and the next
// flush writes all of them in one INSERT (one commit, one WAL flush). A lone
// writer is flushed at once, so grouping adds no latency; under load it
// turns N commits into one.
//
// Each append keeps its own outcome: the statement skips a row whose
// (stream, version) already exists (ON CONFLICT DO NOTHING) or whose
// expected version is missing, and that append alone fails with
// *ConflictError. Only single-event appends with NoStream or an exact
// expected version take this path; multi-event appends must be atomic on
// their own and AnyVersion must read the stream's end, so both go direct.
type groupCommit struct {
	s          *Store
	maxFlushes int
	maxBatch   int

	mu       sync.Mutex
	pending  []*groupedAppend
	flushing int
}

type groupedAppend struct {
	stream   string
	expected int64
	id       uuid.UUID
	typ      string
	ver      int16
	org      string
	data     []byte
	meta     []byte
	at       time.Time
	done     chan groupResult
}

type groupResult struct {
	a   Appended
	err error
}

const groupInsert = `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
SELECT u.id, u.stream, u.expected + 1, u.typ, u.ver, u.org, u.data, u.meta, u.at
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::smallint[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])
     AS u(id, stream, expected, typ, ver, org, data, meta, at)
WHERE u.expected = 0 OR EXISTS (SELECT 1 FROM events e WHERE e.stream_id = u.stream AND e.stream_version = u.expected)
ON CONFLICT (stream_id, stream_version) DO NOTHING
RETURNING event_id, position, transaction_id::text::bigint, stream_version`

// append queues one append and waits for its flush. If ctx ends first the
// append may still be written (as with any statement cancelled in flight).
func (g *groupCommit) append(ctx context.Context, req *groupedAppend) (Appended, error) {
	if !json.Valid(req.data) || !json.Valid(req.meta) {
		// Refuse bad JSON here: in a shared statement it would fail everyone.
		return Appended{}, errors.New("eventstore: event data or metadata is not valid JSON")
	}
	req.done = make(chan groupResult, 1)
	g.mu.Lock()
	g.pending = append(g.pending, req)
	if g.flushing < g.maxFlushes {
		g.flushing++
		go g.flushLoop()
	}
	g.mu.Unlock()
	select {
	case r := <-req.done:
		return r.a, r.err
	case <-ctx.Done():
		return Appended{}, ctx.Err()
	}
}

// flushLoop writes queued appends until none are left.
func (g *groupCommit) flushLoop() {
	for {
		g.mu.Lock()
		n := min(len(g.pending), g.maxBatch)
		if n == 0 {
			g.flushing--
			g.mu.Unlock()
			return
		}
		batch := g.pending[:n:n]
		g.pending = g.pending[n:]
		g.mu.Unlock()
		g.flush(batch)
	}
}

func (g *groupCommit) flush(batch []*groupedAppend) {
	n := len(batch)
	ids := make([]uuid.UUID, n)
	streams, types, orgs := make([]string, n), make([]string, n), make([]string, n)
	expected := make([]int64, n)
	vers := make([]int16, n)
	datas, metas := make([][]byte, n), make([][]byte, n)
	ats := make([]time.Time, n)
	byID := make(map[uuid.UUID]*groupedAppend, n)
	for i, r := range batch {
		ids[i], streams[i], expected[i], types[i], vers[i], orgs[i] = r.id, r.stream, r.expected, r.typ, r.ver, r.org
		datas[i], metas[i], ats[i] = r.data, r.meta, r.at
		byID[r.id] = r
	}
	// The flush serves many callers; no single caller's context may cancel it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := g.s.pool.Query(ctx, groupInsert, ids, streams, expected, types, vers, orgs, datas, metas, ats)
	if err == nil {
		for rows.Next() {
			var id uuid.UUID
			var pos, txid, ver int64
			if err = rows.Scan((*[16]byte)(&id), &pos, &txid, &ver); err != nil {
				break
			}
			if r := byID[id]; r != nil {
				r.done <- groupResult{a: Appended{FirstPosition: pos, LastPosition: pos, TransactionID: uint64(txid), Version: ver}}
				delete(byID, id)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		err = fmt.Errorf("eventstore: grouped append: %w", err)
	}
	wrote := len(byID) < n
	for _, r := range byID {
		if err != nil {
			r.done <- groupResult{err: err}
		} else {
			r.done <- groupResult{err: &ConflictError{StreamID: r.stream, Expected: r.expected}}
		}
	}
	if wrote {
		g.s.Committed()
	}
}
