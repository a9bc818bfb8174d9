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

// Metadata travels with every event: who caused it and in answer to what.
type Metadata struct {
	// ActorKind is "user", "api_key", "operator", "system" or "run".
	ActorKind string `json:"actorKind,omitempty"`
	// ActorID is the person's subject id, the key id, or a system name.
	ActorID       string `json:"actorId,omitempty"`
	RequestID     string `json:"requestId,omitempty"`
	CorrelationID string `json:"correlationId,omitempty"`
	CausationID   string `json:"causationId,omitempty"`
}

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
	signal   *Signal // readers wait on it
	local    *Signal // commits made here, for Relay
	now      func() time.Time
	group    *groupCommit // nil: every append is its own statement
}

// Option configures a Store.
type Option func(*Store)

// WithUpcaster applies u to every event read.
func WithUpcaster(u Upcaster) Option { return func(s *Store) { s.upcaster = u } }

// WithGroupCommit lets concurrent single-event appends share one statement
// and commit, with up to flushes statements in flight (see groupCommit).
func WithGroupCommit(flushes int) Option {
	return func(s *Store) { s.group = &groupCommit{s: s, maxFlushes: max(1, flushes), maxBatch: 1000} }
}

// WithClock replaces the clock used for OccurredAt defaults.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns a store over pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, signal: NewSignal(), local: NewSignal(), now: time.Now}
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

// Committed tells readers, here and (through Relay) in other instances, that
// events were committed. Append and InTx call it; a caller committing its own
// transaction after AppendTx calls it once after the commit.
func (s *Store) Committed() {
	s.signal.Wake()
	s.local.Wake()
}

// Relay runs until ctx ends, carrying wake-ups between instances sharing the
// database (see the package-level Relay).
func (s *Store) Relay(ctx context.Context, logger *slog.Logger) {
	Relay(ctx, s.pool, s.local, s.signal, logger)
}

// Append appends events to one stream in one statement (so atomically) with
// the pool's implicit transaction, then wakes local feed readers.
// expected is the stream's current version, NoStream, or AnyVersion. A stream
// not at the expected version fails with *ConflictError.
func (s *Store) Append(ctx context.Context, streamID string, expected int64, events ...NewEvent) (Appended, error) {
	if s.group != nil && len(events) == 1 && expected >= 0 && streamID != "" {
		req, err := s.prepareGrouped(streamID, expected, events[0])
		if err != nil {
			return Appended{}, err
		}
		return s.group.append(ctx, req)
	}
	a, err := s.AppendTx(ctx, s.pool, streamID, expected, events...)
	if err == nil {
		s.Committed()
	}
	return a, err
}

// InTx runs fn in one transaction; events appended with AppendTx(ctx, tx, …)
// inside it commit or roll back together with fn's other writes.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, fn)
	if err == nil {
		s.Committed()
	}
	return err
}

// The append statements, one per case, so each is a plain statement the
// server plans once: the unique (stream_id, stream_version) constraint is
// the concurrency guard; an exact expected version must also exist, so a
// wrong expectation cannot leave a gap in the stream.
// Parameters: $1 stream id, $2–$8 the event fields (id, type, schema
// version, organisation, data, metadata, occurred at; arrays for several
// events), $9 the exact expected version (exact variants only).
const (
	insertColumns = `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at) `
	returning     = ` RETURNING position, transaction_id::text::bigint, stream_version`
	unnestRows    = ` FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::jsonb[], $7::jsonb[], $8::timestamptz[])
	                   WITH ORDINALITY AS u(id, typ, ver, org, data, meta, at, ord)`
	exactGuard = ` WHERE EXISTS (SELECT 1 FROM events WHERE stream_id = $1 AND stream_version = $9)`
	endVersion = `coalesce((SELECT max(stream_version) FROM events WHERE stream_id = $1), 0)`

	appendOneNew   = insertColumns + `VALUES ($2, $1, 1, $3, $4, $5, $6, $7, $8)` + returning
	appendOneExact = insertColumns + `SELECT $2, $1, $9::bigint + 1, $3, $4, $5, $6, $7, $8` + exactGuard + returning
	appendOneAny   = insertColumns + `SELECT $2, $1, ` + endVersion + ` + 1, $3, $4, $5, $6, $7, $8` + returning
	appendNew      = insertColumns + `SELECT u.id, $1, u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + returning
	appendExact    = insertColumns + `SELECT u.id, $1, $9::bigint + u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + exactGuard + returning
	appendAny      = insertColumns + `SELECT u.id, $1, ` + endVersion + ` + u.ord, u.typ, u.ver, u.org, u.data, u.meta, u.at` + unnestRows + returning
)

// AppendTx appends within db, which may be a transaction the caller commits;
// the caller then calls Committed after its commit (InTx does).
func (s *Store) AppendTx(ctx context.Context, db DB, streamID string, expected int64, events ...NewEvent) (Appended, error) {
	if len(events) == 0 {
		return Appended{}, errors.New("eventstore: append of no events")
	}
	if streamID == "" {
		return Appended{}, errors.New("eventstore: empty stream id")
	}
	if expected < AnyVersion {
		return Appended{}, fmt.Errorf("eventstore: invalid expected version %d", expected)
	}
	n := len(events)
	ids := make([]uuid.UUID, n)
	types := make([]string, n)
	vers := make([]int16, n)
	orgs := make([]string, n)
	datas := make([][]byte, n)
	metas := make([][]byte, n)
	ats := make([]time.Time, n)
	now := s.now().UTC().Truncate(time.Microsecond)
	var err error
	for i, e := range events {
		if e.Type == "" || e.SchemaVersion <= 0 {
			return Appended{}, fmt.Errorf("eventstore: event %d has no type or schema version", i)
		}
		ids[i] = e.ID
		if e.ID == uuid.Nil {
			ids[i] = uuid.Must(uuid.NewV7())
		}
		types[i], vers[i], orgs[i] = e.Type, int16(e.SchemaVersion), e.OrgID
		datas[i] = e.Data
		if len(datas[i]) == 0 {
			datas[i] = []byte("{}")
		}
		if i > 0 && e.Metadata == events[i-1].Metadata {
			metas[i] = metas[i-1] // a command's events usually share their metadata
		} else if metas[i], err = json.Marshal(e.Metadata); err != nil {
			return Appended{}, err
		}
		ats[i] = e.OccurredAt
		if ats[i].IsZero() {
			ats[i] = now
		}
	}
	var query string
	var args []any
	if n == 1 {
		args = []any{streamID, ids[0], types[0], vers[0], orgs[0], datas[0], metas[0], ats[0]}
		query = pick(expected, appendOneNew, appendOneExact, appendOneAny)
	} else {
		args = []any{streamID, ids, types, vers, orgs, datas, metas, ats}
		query = pick(expected, appendNew, appendExact, appendAny)
	}
	if expected > 0 {
		args = append(args, expected)
	}
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return Appended{}, err
	}
	var out Appended
	count := 0
	for rows.Next() {
		var pos, txid, ver int64
		if err := rows.Scan(&pos, &txid, &ver); err != nil {
			rows.Close()
			return Appended{}, err
		}
		if count == 0 || pos < out.FirstPosition {
			out.FirstPosition = pos
		}
		if pos > out.LastPosition {
			out.LastPosition = pos
		}
		if ver > out.Version {
			out.Version = ver
		}
		out.TransactionID = uint64(txid)
		count++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "events_stream_version" {
			return Appended{}, &ConflictError{StreamID: streamID, Expected: expected}
		}
		return Appended{}, err
	}
	if count != n {
		return Appended{}, &ConflictError{StreamID: streamID, Expected: expected}
	}
	return out, nil
}

func (s *Store) prepareGrouped(streamID string, expected int64, e NewEvent) (*groupedAppend, error) {
	if e.Type == "" || e.SchemaVersion <= 0 {
		return nil, errors.New("eventstore: event has no type or schema version")
	}
	meta, err := json.Marshal(e.Metadata)
	if err != nil {
		return nil, err
	}
	r := &groupedAppend{stream: streamID, expected: expected, id: e.ID, typ: e.Type, ver: int16(e.SchemaVersion),
		org: e.OrgID, data: e.Data, meta: meta, at: e.OccurredAt}
	if r.id == uuid.Nil {
		r.id = uuid.Must(uuid.NewV7())
	}
	if len(r.data) == 0 {
		r.data = []byte("{}")
	}
	if r.at.IsZero() {
		r.at = s.now().UTC().Truncate(time.Microsecond)
	}
	return r, nil
}

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

// Load returns a stream's events from version from (1 = all) in order.
func (s *Store) Load(ctx context.Context, streamID string, from int64) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE stream_id = $1 AND stream_version >= $2 ORDER BY stream_version`, streamID, from)
	if err != nil {
		return nil, err
	}
	return s.collect(rows, 16)
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
