package projections

import (
	stdsql "database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"phonefleet/eventstore"
)

// feedTopic is the Watermill topic name for the events table. There is one
// topic: the whole ordered feed.
const feedTopic = "events"

// feedSchema is a Watermill SchemaAdapter that reads the events table itself
// (no outbox copy of each event). Each SELECT returns ONE row that aggregates
// the next batch of up to batchSize events for the consumer group, so one
// Watermill message carries a batch and a projection applies it with a
// single COPY or multi-row statement inside the subscriber's transaction.
//
// The select is gap-safe: it never returns an event whose transaction id is
// not below pg_snapshot_xmin(pg_current_snapshot()), so a transaction that
// drew an earlier position but commits later is never skipped. It seeks with
// a row comparison on the (transaction_id, position) index instead of
// scanning and sorting the whole unread backlog.
type feedSchema struct {
	batchSize int
	// types are SQL LIKE patterns of the event types the projection reads;
	// nil reads every type. Other events are scanned (the checkpoint passes
	// them) but not transferred.
	types []string
	// spanOnly transfers no events, only where the batch starts and ends
	// (spanSelect): the projection applies it inside the server (InServer).
	spanOnly bool
}

// feedCheckpoint locks the consumer group's checkpoint and opens the page;
// feedSeek reads the page after it under the cut and returns the batch's
// bounds and size. feedSelect and spanSelect put them together.
const feedCheckpoint = `
WITH cp AS (
    SELECT last_transaction_id AS tx, last_position AS pos
    FROM projection_checkpoints
    -- the batch is re-derivable from the durable events, so its commit need
    -- not wait for the WAL flush (set here to spare a round trip)
    WHERE consumer_group = $1 AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    FOR UPDATE
), page AS (
`

const feedSeek = `
    FROM events e
    -- scalar subqueries, so the seek is an index condition, not a join filter
    WHERE (e.transaction_id, e.position) > ((SELECT tx FROM cp), (SELECT pos FROM cp))
      AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY e.transaction_id, e.position
    LIMIT $2
), last AS (
    SELECT transaction_id, position FROM page ORDER BY transaction_id DESC, position DESC LIMIT 1
)
SELECT (SELECT tx::text::bigint FROM cp), (SELECT pos FROM cp),
       (SELECT transaction_id::text::bigint FROM last), (SELECT position FROM last), count(*)`

// feedEvents is the page's event columns, each marked wanted when its type
// is one the reader asked for ($3; NULL: every type); feedEventArrays
// returns the wanted ones as one array per column. feedSpan is the page of
// a reader that needs only where the batch starts and ends.
const feedEvents = `    SELECT e.position, e.transaction_id, e.event_id, e.stream_id, e.stream_version, e.event_type,
           e.schema_version, e.org_id, e.data, e.metadata, e.occurred_at,
           ($3::text[] IS NULL OR e.event_type LIKE ANY ($3::text[])) AS wanted
`

const feedEventArrays = `,
       array_agg(position) FILTER (WHERE wanted), array_agg(transaction_id::text::bigint) FILTER (WHERE wanted),
       array_agg(event_id) FILTER (WHERE wanted), array_agg(stream_id) FILTER (WHERE wanted),
       array_agg(stream_version) FILTER (WHERE wanted), array_agg(event_type) FILTER (WHERE wanted),
       array_agg(schema_version) FILTER (WHERE wanted), array_agg(org_id) FILTER (WHERE wanted),
       array_agg(data) FILTER (WHERE wanted), array_agg(metadata) FILTER (WHERE wanted),
       array_agg(occurred_at) FILTER (WHERE wanted)`

const feedSpan = `    SELECT e.transaction_id, e.position
`

const feedSelect = feedCheckpoint + feedEvents + feedSeek + feedEventArrays + `
FROM page
HAVING count(*) > 0`

// spanSelect is feedSelect for a projection applied inside the server: the
// same checkpoint, cut and seek, but it reads only the feed index's columns
// and returns where the batch starts and ends, not its events.
const spanSelect = feedCheckpoint + feedSpan + feedSeek + `
FROM page
HAVING count(*) > 0`

func (a feedSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	if a.spanOnly {
		return wsql.Query{Query: spanSelect, Args: []any{p.ConsumerGroup, a.batchSize}}, nil
	}
	var types any // NULL: every type
	if a.types != nil {
		types = a.types
	}
	return wsql.Query{Query: feedSelect, Args: []any{p.ConsumerGroup, a.batchSize, types}}, nil
}

// batchHeader is where a batch starts and ends in the feed (after the
// checkpoint it read, through its last event) and how many events it
// scanned, whether or not they were transferred.
type batchHeader struct {
	afterTx  uint64
	afterPos int64
	lastTx   uint64
	lastPos  int64
	scanned  int
}

func (a feedSchema) UnmarshalMessage(p wsql.UnmarshalMessageParams) (wsql.Row, error) {
	h, evs, err := scanBatch(p.Row, a.spanOnly)
	if err != nil {
		return wsql.Row{}, err
	}
	msg := message.NewMessage(fmt.Sprintf("batch-%d-%d", h.lastTx, h.lastPos), encodeBatch(h, evs))
	return wsql.Row{
		Offset:    h.lastPos,
		UUID:      []byte(msg.UUID),
		Msg:       msg,
		ExtraData: map[string]any{"transaction_id": strconv.FormatUint(h.lastTx, 10)},
	}, nil
}

// scanBatch reads the batch header and, unless spanOnly, the events of a
// feed select's row; extra receives the columns after them.
func scanBatch(row interface{ Scan(...any) error }, spanOnly bool, extra ...any) (batchHeader, []eventstore.Event, error) {
	var (
		afterTx, afterPos        int64
		lastTx, lastPos, scanned int64
		pos, txid, vers          []int64
		ids                      [][16]byte
		streams, types           []string
		schemas                  []int16
		orgs                     []string
		datas, metas             [][]byte
		ats                      []time.Time
	)
	dest := []any{&afterTx, &afterPos, &lastTx, &lastPos, &scanned}
	if !spanOnly {
		dest = append(dest, &pos, &txid, &ids, &streams, &vers, &types, &schemas, &orgs, &datas, &metas, &ats)
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return batchHeader{}, nil, err
	}
	evs := make([]eventstore.Event, len(pos))
	for i := range pos {
		evs[i] = eventstore.Event{
			Position: pos[i], TransactionID: uint64(txid[i]), ID: uuid.UUID(ids[i]),
			StreamID: streams[i], StreamVersion: vers[i], Type: types[i], SchemaVersion: int(schemas[i]),
			OrgID: orgs[i], Data: datas[i], Metadata: metas[i], OccurredAt: ats[i],
		}
	}
	// Aggregation normally keeps the page order; sort to be certain.
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].TransactionID != evs[j].TransactionID {
			return evs[i].TransactionID < evs[j].TransactionID
		}
		return evs[i].Position < evs[j].Position
	})
	h := batchHeader{afterTx: uint64(afterTx), afterPos: afterPos, lastTx: uint64(lastTx), lastPos: lastPos, scanned: int(scanned)}
	return h, evs, nil
}

func (feedSchema) InsertQuery(wsql.InsertQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errors.New("projections: the feed is written by the event store, not by Watermill")
}

func (feedSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil // migrations own the schema
}

func (feedSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelReadCommitted
}

// checkpoints is the Watermill OffsetsAdapter over projection_checkpoints.
type checkpoints struct{}

// ackCheckpointSQL is the ack query. It repeats what the handler already
// wrote in the same transaction (see consumer.handle), so the subscriber's
// transaction skips it (detachedTx.ExecContext): one round trip less per
// batch.
const ackCheckpointSQL = `UPDATE projection_checkpoints
		SET last_transaction_id = $1::text::xid8, last_position = $2
		WHERE consumer_group = $3`

// AckMessageQuery repeats what the handler already wrote in the same
// transaction (see consumer.handle); it is idempotent by construction.
func (checkpoints) AckMessageQuery(p wsql.AckMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{Query: ackCheckpointSQL,
		Args: []any{p.LastRow.ExtraData["transaction_id"], p.LastRow.Offset, p.ConsumerGroup}}, nil
}

func (checkpoints) ConsumedMessageQuery(wsql.ConsumedMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

func (checkpoints) NextOffsetQuery(p wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return wsql.Query{Query: `SELECT last_position, last_transaction_id FROM projection_checkpoints WHERE consumer_group = $1 FOR UPDATE`,
		Args: []any{p.ConsumerGroup}}, nil
}

func (checkpoints) SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

func (checkpoints) BeforeSubscribingQueries(p wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: `INSERT INTO projection_checkpoints (consumer_group) VALUES ($1) ON CONFLICT DO NOTHING`,
		Args: []any{p.ConsumerGroup}}}, nil
}

// The batch codec: length-prefixed fields, no reflection. Metadata stays raw
// JSON and is decoded lazily by projections that need it.
func encodeBatch(h batchHeader, evs []eventstore.Event) []byte {
	size := 48
	for _, e := range evs {
		size += 64 + len(e.StreamID) + len(e.Type) + len(e.OrgID) + len(e.Data) + len(e.Metadata)
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, h.afterTx)
	b = binary.AppendVarint(b, h.afterPos)
	b = binary.AppendUvarint(b, h.lastTx)
	b = binary.AppendVarint(b, h.lastPos)
	b = binary.AppendUvarint(b, uint64(h.scanned))
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for _, e := range evs {
		b = binary.AppendVarint(b, e.Position)
		b = binary.AppendUvarint(b, e.TransactionID)
		b = append(b, e.ID[:]...)
		b = appendBytes(b, []byte(e.StreamID))
		b = binary.AppendVarint(b, e.StreamVersion)
		b = appendBytes(b, []byte(e.Type))
		b = binary.AppendVarint(b, int64(e.SchemaVersion))
		b = appendBytes(b, []byte(e.OrgID))
		b = appendBytes(b, e.Data)
		b = appendBytes(b, e.Metadata)
		b = binary.AppendVarint(b, e.OccurredAt.UnixMicro())
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("projections: corrupt batch payload")
	}
	r.b = nil
}

func decodeBatch(b []byte) (batchHeader, []eventstore.Event, error) {
	r := &reader{b: b}
	var h batchHeader
	h.afterTx = r.uvarint()
	h.afterPos = r.varint()
	h.lastTx = r.uvarint()
	h.lastPos = r.varint()
	scanned := r.uvarint()
	n := r.uvarint()
	if r.err != nil || n > uint64(len(b)) || scanned > 1<<31 {
		return h, nil, errors.New("projections: corrupt batch payload")
	}
	h.scanned = int(scanned)
	evs := make([]eventstore.Event, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		var e eventstore.Event
		e.Position = r.varint()
		e.TransactionID = r.uvarint()
		if len(r.b) < 16 {
			r.fail()
			break
		}
		copy(e.ID[:], r.b[:16])
		r.b = r.b[16:]
		e.StreamID = string(r.bytes())
		e.StreamVersion = r.varint()
		e.Type = string(r.bytes())
		e.SchemaVersion = int(r.varint())
		e.OrgID = string(r.bytes())
		e.Data = r.bytes()
		e.Metadata = r.bytes()
		e.OccurredAt = time.UnixMicro(r.varint()).UTC()
		evs = append(evs, e)
	}
	if r.err != nil {
		return h, nil, r.err
	}
	return h, evs, nil
}
