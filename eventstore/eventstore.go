// Package eventstore is phonefleet's append-only event log on PostgreSQL: the
// one source of truth. Streams are appended with an expected version
// (optimistic concurrency); the global feed is read in (transaction id,
// position) order and is gap-safe under concurrent writers: a reader never
// passes an event whose writing transaction might still commit before it.
package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"phonefleet/internal/clock"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrConflict is matched (errors.Is) by every optimistic-concurrency failure.
var ErrConflict = errors.New("eventstore: stream version conflict")

// ConflictError reports that a stream was not at the expected version.
type ConflictError struct {
	StreamID string
	Expected int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventstore: stream %q is not at version %d", e.StreamID, e.Expected)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Expected versions with a special meaning.
const (
	// NoStream expects the stream not to exist yet.
	NoStream int64 = 0
	// AnyVersion appends at the end of the stream, whatever its version.
	AnyVersion int64 = -1
)

// NewEvent is an event to append. Type and SchemaVersion name the event
// explicitly (see domain.Registry); Data is its JSON body.
type NewEvent struct {
	ID            uuid.UUID // zero → a fresh UUIDv7
	Type          string
	SchemaVersion int
	OrgID         string
	Data          json.RawMessage
	Metadata      Metadata
	OccurredAt    time.Time // zero → now
}

// Event is an event as recorded.
type Event struct {
	Position      int64
	TransactionID uint64
	ID            uuid.UUID
	StreamID      string
	StreamVersion int64
	Type          string
	SchemaVersion int
	OrgID         string
	Data          json.RawMessage
	// Metadata is the recorded metadata JSON; DecodeMetadata reads it.
	Metadata   json.RawMessage
	OccurredAt time.Time
}

// DecodeMetadata returns e's metadata.
func (e Event) DecodeMetadata() (Metadata, error) {
	var m Metadata
	if len(e.Metadata) == 0 {
		return m, nil
	}
	err := json.Unmarshal(e.Metadata, &m)
	return m, err
}

// Cursor is a place in the global feed: the (transaction id, position) of
// the last event read. The zero Cursor is the start.
type Cursor struct {
	TransactionID uint64
	Position      int64
}

// Before reports whether c comes before e in feed order.
func (c Cursor) Before(e Event) bool {
	return e.TransactionID > c.TransactionID ||
		e.TransactionID == c.TransactionID && e.Position > c.Position
}

// Appended describes what an Append wrote.
type Appended struct {
	FirstPosition int64
	LastPosition  int64
	TransactionID uint64
	// Version is the stream's version after the append.
	Version int64
}

// Upcaster turns an event recorded under an old schema version into the
// current shape. It is applied on every read; stored rows never change.
type Upcaster interface {
	Upcast(eventType string, version int, data json.RawMessage) (int, json.RawMessage, error)
}

// DB is what Append and the readers need: a pool or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store appends and reads events.
type Store struct {
	pool     *pgxpool.Pool
	upcaster Upcaster
	signal   *Signal  // readers wait on it
	local    *pending // commits made here, for Relay
	id       string   // this store among the instances, in its NOTIFYs
	now      func() time.Time
	group    *groupCommit // nil: every unit is its own batch
}

// Option configures a Store.
type Option func(*Store)

// WithUpcaster applies u to every event read.
func WithUpcaster(u Upcaster) Option { return func(s *Store) { s.upcaster = u } }

// WithGroupCommit lets units committed concurrently share one batch and
// one commit (see Commit).
func WithGroupCommit() Option {
	return func(s *Store) { s.group = &groupCommit{s: s} }
}

// New returns a store over pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, signal: NewSignal(), local: newPending(), id: uuid.NewString(), now: clock.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Signal is woken after every commit made through this store (and, with
// Relay running, after commits of other instances), so feed readers need not
// wait for a poll.
func (s *Store) Signal() *Signal { return s.signal }

// committed tells readers, here and (through Relay) in other instances,
// that events of types were committed. Commit calls it after every commit.
func (s *Store) committed(types []string) {
	s.signal.WakeTypes(types)
	s.local.add(types)
}

// Relay runs until ctx ends, carrying wake-ups between instances sharing the
// database: it announces this store's commits, with their event types, and
// wakes its readers on the others' (see relay).
func (s *Store) Relay(ctx context.Context, logger *slog.Logger) {
	relay(ctx, s.pool, s.id, s.local, s.signal, logger)
}

// Append appends events to one stream atomically: Commit of a unit with
// that one append. expected is the stream's current version, NoStream, or
// AnyVersion. A stream not at the expected version fails with
// *ConflictError.
func (s *Store) Append(ctx context.Context, streamID string, expected int64, events ...NewEvent) (Appended, error) {
	c, err := s.Commit(ctx, (&Unit{}).Append(streamID, expected, events...))
	if err != nil {
		return Appended{}, err
	}
	return c.Appends[0], nil
}

// The append statements, one per case, so each is a plain statement the
// server plans once: the unique (stream_id, stream_version) constraint is
// the concurrency guard; an exact expected version must also exist, so a
// wrong expectation cannot leave a gap in the stream. Every refusal is an
// error, never "no row": the exact variants take their version from the
// expected event itself, which is NULL (a not-null violation) when it is
// missing. So a unit's batch never commits with one of its appends skipped.
// Parameters: $1 stream id, $2–$8 the event fields (id, type, schema
// version, organisation, data, metadata, occurred at; arrays for several
// events), $9 the exact expected version (exact variants only).
const (
	insertColumns = `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at) `
	returning     = ` RETURNING position, transaction_id::text::bigint, stream_version`
	unnestRows    = ` FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::jsonb[], $7::jsonb[], $8::timestamptz[])
	                   WITH ORDINALITY AS u(id, typ, ver, org, data, meta, at, ord)`
	exactBase  = `(SELECT stream_version FROM events WHERE stream_id = $1 AND stream_version = $9)`
	endVersion = `coalesce((SELECT max(stream_version) FROM events WHERE stream_id = $1), 0)`

	appendOneNew   = insertColumns + `VALUES ($2, $1, 1, $3, $4, $5, $6, $7, $8)` + returning
	appendOneExact = insertColumns + `SELECT $2, $1, ` + exactBase + ` + 1, $3, $4, $5, $6, $7, $8` + returning
	appendOneAny   = insertColumns + `SELECT $2, $1, ` + endVersion + ` + 1, $3, $4, $5, $6, $7, $8` + returning
	appendNew      = summedHead + insertColumns + `SELECT u.id, $1, u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + summedTail
	appendExact    = summedHead + insertColumns + `SELECT u.id, $1, ` + exactBase + ` + u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + summedTail
	appendAny      = summedHead + insertColumns + `SELECT u.id, $1, ` + endVersion + ` + u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + summedTail
)

// appendRun appends single events to distinct streams in one statement,
// each at its own expectation ($2: NoStream, an exact version or
// AnyVersion) decided as its own statement would decide it (appendOneNew,
// appendOneExact, appendOneAny), so a failed expectation is the same
// unique or not-null violation; the events are inserted in the arrays'
// order. Parameters: arrays of stream ids, expected versions and the event
// fields. It answers each event's id, position, transaction and version.
const appendRun = insertColumns + `SELECT u.id, u.stream,
	CASE WHEN u.expected = 0 THEN 1
	     WHEN u.expected > 0 THEN (SELECT e.stream_version FROM events e WHERE e.stream_id = u.stream AND e.stream_version = u.expected) + 1
	     ELSE coalesce((SELECT max(e.stream_version) FROM events e WHERE e.stream_id = u.stream), 0) + 1 END,
	u.typ, u.ver, u.org, u.data, u.meta, u.at
	FROM unnest($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::smallint[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[])
	     WITH ORDINALITY AS u(stream, expected, id, typ, ver, org, data, meta, at, ord)
	ORDER BY u.ord
	RETURNING event_id, position, transaction_id::text::bigint, stream_version`

// summedHead and summedTail make a multi-event insert answer one row —
// the rows inserted, their first and last positions, the transaction id
// (the column's default, pg_current_xact_id()) and the stream's version
// after them — instead of one row per event, each with its transaction id
// cast to text.
const (
	summedHead = `WITH ins AS (`
	summedTail = ` RETURNING position, stream_version)
	SELECT count(*), coalesce(min(position), 0), coalesce(max(position), 0), pg_current_xact_id()::text::bigint, coalesce(max(stream_version), 0) FROM ins`
)

func pick(expected int64, noStream, exact, any string) string {
	switch {
	case expected == NoStream:
		return noStream
	case expected > 0:
		return exact
	}
	return any
}

const eventColumns = `position, transaction_id::text::bigint AS txid, event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at`

// loadSQL reads a stream's events from a version on.
const loadSQL = `SELECT ` + eventColumns + ` FROM events WHERE stream_id = $1 AND stream_version >= $2 ORDER BY stream_version`

// Load returns a stream's events from version from (1 = all) in order.
func (s *Store) Load(ctx context.Context, streamID string, from int64) ([]Event, error) {
	rows, err := s.pool.Query(ctx, loadSQL, streamID, from)
	if err != nil {
		return nil, err
	}
	return s.collect(rows, 16)
}

// Check is a statement sent in the same round trip as a read, before it,
// in one implicit transaction (LoadChecked): a check that fails (raises)
// fails the read with its error.
type Check struct {
	SQL  string
	Args []any
}

// LoadChecked is Load with check run first in the same round trip: the
// check's error, when it fails, is returned as the server sent it. A zero
// check is a plain Load.
func (s *Store) LoadChecked(ctx context.Context, streamID string, from int64, check Check) ([]Event, error) {
	if check.SQL == "" {
		return s.Load(ctx, streamID, from)
	}
	b := &pgx.Batch{}
	b.Queue(check.SQL, check.Args...)
	b.Queue(loadSQL, streamID, from)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	evs, err := s.collect(rows, 16)
	if err != nil {
		return nil, err
	}
	return evs, br.Close()
}

// ReadFeed returns up to limit events after c in feed order, never passing a
// transaction that may still commit, and the cursor to continue from.
func (s *Store) ReadFeed(ctx context.Context, c Cursor, limit int) ([]Event, Cursor, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE (transaction_id, position) > ($1::text::xid8, $2)
		  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY events.transaction_id, events.position LIMIT $3`, strconv.FormatUint(c.TransactionID, 10), c.Position, limit)
	if err != nil {
		return nil, c, err
	}
	evs, err := s.collect(rows, limit)
	if err != nil {
		return nil, c, err
	}
	if len(evs) > 0 {
		last := evs[len(evs)-1]
		c = Cursor{TransactionID: last.TransactionID, Position: last.Position}
	}
	return evs, c, nil
}

// Head returns the highest position written so far (0 when empty).
func (s *Store) Head(ctx context.Context) (int64, error) {
	var head int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM events`).Scan(&head)
	return head, err
}

func (s *Store) collect(rows pgx.Rows, capacity int) ([]Event, error) {
	defer rows.Close()
	out := make([]Event, 0, capacity)
	for rows.Next() {
		var e Event
		var txid int64
		var ver int16
		if err := rows.Scan(&e.Position, &txid, (*[16]byte)(&e.ID), &e.StreamID, &e.StreamVersion, &e.Type, &ver, &e.OrgID, (*[]byte)(&e.Data), (*[]byte)(&e.Metadata), &e.OccurredAt); err != nil {
			return nil, err
		}
		e.TransactionID, e.SchemaVersion = uint64(txid), int(ver)
		if err := s.Upcast(&e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Upcast brings e to the current schema of its type, if an upcaster is set.
func (s *Store) Upcast(e *Event) error {
	if s.upcaster == nil {
		return nil
	}
	v, data, err := s.upcaster.Upcast(e.Type, e.SchemaVersion, e.Data)
	if err != nil {
		return fmt.Errorf("eventstore: upcast %s v%d at %d: %w", e.Type, e.SchemaVersion, e.Position, err)
	}
	e.SchemaVersion, e.Data = v, data
	return nil
}
