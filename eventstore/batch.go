package eventstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipelined single-event appends: QueueAppend puts the append in a
// pgx.Batch with the caller's other writes, so a command's whole record is
// one round trip. A batch sent outside an explicit transaction runs in one
// implicit transaction, so every failure must be an error (never "no row"):
// a conflict aborts the batch and none of its writes commit.
//
// The exact variant takes its version from the expected event itself: when
// that event is missing the version is NULL (not-null violation) and when
// another writer got there first the unique (stream, version) constraint
// fails; both are *ConflictError.
const (
	queuedAppendNewIf = insertColumns + `SELECT $2, $1, 1, $3, $4, $5, $6, $7, $8 WHERE `
	queuedAppendExact = insertColumns + `SELECT $2, $1, (SELECT stream_version + 1 FROM events WHERE stream_id = $1 AND stream_version = $9),
	$3, $4, $5, $6, $7, $8` + returning
)

// QueuedAppend is an append queued in a batch; read its result with Read,
// in the batch's order.
type QueuedAppend struct {
	streamID string
	expected int64
}

// QueueAppend queues in b the append of one event to streamID at expected,
// NoStream or an exact version (AnyVersion is not supported). With
// NoStream, onlyIf, when not empty, is an SQL condition (its parameters
// numbered from $9, given in onlyIfArgs) that must hold for the event to be
// appended; when it does not, Read reports appended false and the batch
// goes on. The caller sends the batch outside a transaction (one implicit
// transaction) or inside its own, and calls Committed after the commit.
func (s *Store) QueueAppend(b *pgx.Batch, streamID string, expected int64, e NewEvent, onlyIf string, onlyIfArgs ...any) (*QueuedAppend, error) {
	if streamID == "" {
		return nil, errors.New("eventstore: empty stream id")
	}
	if expected < 0 {
		return nil, fmt.Errorf("eventstore: queued append at expected version %d is not supported", expected)
	}
	if expected > 0 && onlyIf != "" {
		return nil, errors.New("eventstore: a queued exact append takes no condition")
	}
	g, err := s.prepareGrouped(streamID, expected, e)
	if err != nil {
		return nil, err
	}
	args := []any{streamID, g.id, g.typ, g.ver, g.org, g.data, g.meta, g.at}
	switch {
	case expected > 0:
		b.Queue(queuedAppendExact, append(args, expected)...)
	case onlyIf != "":
		b.Queue(queuedAppendNewIf+onlyIf+returning, append(args, onlyIfArgs...)...)
	default:
		b.Queue(appendOneNew, args...)
	}
	return &QueuedAppend{streamID: streamID, expected: expected}, nil
}

// Read reads the append's result from br; appended is false when its
// condition did not hold.
func (q *QueuedAppend) Read(br pgx.BatchResults) (a Appended, appended bool, err error) {
	var pos, txid, ver int64
	err = br.QueryRow().Scan(&pos, &txid, &ver)
	if errors.Is(err, pgx.ErrNoRows) {
		if q.expected == NoStream {
			return Appended{}, false, nil
		}
		return Appended{}, false, &ConflictError{StreamID: q.streamID, Expected: q.expected}
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && ((pgErr.Code == "23505" && pgErr.ConstraintName == "events_stream_version") ||
			(pgErr.Code == "23502" && pgErr.ColumnName == "stream_version")) {
			return Appended{}, false, &ConflictError{StreamID: q.streamID, Expected: q.expected}
		}
		return Appended{}, false, err
	}
	return Appended{FirstPosition: pos, LastPosition: pos, Version: ver, TransactionID: uint64(txid)}, true, nil
}
