package projections

import (
	"context"

	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
)

// Audit is the audit feed: one row per event of every type, in feed order
// (applied_seq), with its metadata (actor, request and correlation ids) for
// auditors' queries, e.g. metadata->>'actorId'. It consumes every event and
// emits none. (Actor columns generated from the metadata were measured to
// halve the apply rate, so they are left to queries.)
type Audit struct{}

// AuditName is the projection's stable name.
const AuditName = "audit_feed"

// Name implements Projection.
func (Audit) Name() string { return AuditName }

// Tables implements Projection.
func (Audit) Tables() []string { return []string{"audit_feed"} }

// Setup implements Projection.
func (Audit) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.audit_feed (
		applied_seq     bigint GENERATED ALWAYS AS IDENTITY,
		position        bigint PRIMARY KEY,
		transaction_id  bigint NOT NULL,
		event_id        uuid NOT NULL,
		stream_id       text NOT NULL,
		stream_version  bigint NOT NULL,
		event_type      text NOT NULL,
		schema_version  integer NOT NULL,
		org_id          text NOT NULL,
		metadata        jsonb NOT NULL,
		occurred_at     timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.audit_feed (org_id, occurred_at);`)
	return err
}

var auditColumns = []string{"position", "transaction_id", "event_id", "stream_id", "stream_version",
	"event_type", "schema_version", "org_id", "metadata", "occurred_at"}

// Apply implements Projection with one COPY per batch (measured faster
// overall than a multi-row INSERT of unnest(arrays), which moves the work to
// the server). A replayed event would violate the primary key: the
// checkpoint, committed with these rows, makes that impossible, and the key
// makes any breach loud.
func (Audit) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "audit_feed"}, auditColumns,
		pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
			e := events[i]
			return []any{e.Position, int64(e.TransactionID), [16]byte(e.ID), e.StreamID, e.StreamVersion,
				e.Type, int32(e.SchemaVersion), e.OrgID, []byte(e.Metadata), e.OccurredAt}, nil
		}))
	return err
}
