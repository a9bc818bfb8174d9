package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
)

// ReceiptCheckpoints is the read side of signed receipt checkpoints:
// receipt_checkpoints holds every checkpoint (its export line, byte for
// byte, beside its members). It consumes receipt.checkpoint_signed and
// emits nothing. The signing keys have no read model: their one short
// stream is read where they are published.
type ReceiptCheckpoints struct{}

// ReceiptCheckpointsName is the projection's stable name.
const ReceiptCheckpointsName = "receipt_checkpoints"

// Name implements Projection.
func (ReceiptCheckpoints) Name() string { return ReceiptCheckpointsName }

// Tables implements Projection.
func (ReceiptCheckpoints) Tables() []string {
	return []string{"receipt_checkpoints"}
}

// EventTypes implements Selective.
func (ReceiptCheckpoints) EventTypes() []string {
	return []string{nameOf(domain.ReceiptCheckpointSigned{})}
}

// Setup implements Projection.
func (ReceiptCheckpoints) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.receipt_checkpoints (
		org_id    text NOT NULL,
		entries   bigint NOT NULL,
		head_hash text NOT NULL,
		signed_at timestamptz NOT NULL,
		key_id    text NOT NULL,
		line      text NOT NULL,
		PRIMARY KEY (org_id, entries)
	);`)
	return err
}

// Apply implements Projection.
func (ReceiptCheckpoints) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	for _, e := range events {
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
		}
		if ev, ok := ev.(domain.ReceiptCheckpointSigned); ok {
			c := ev.Checkpoint
			at, err := time.Parse(time.RFC3339Nano, c.SignedAt)
			if err != nil {
				return fmt.Errorf("checkpoint at %d: %w", e.Position, err)
			}
			line, err := receiptchain.CheckpointLine(c)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.receipt_checkpoints (org_id, entries, head_hash, signed_at, key_id, line)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, c.OrgID, c.Entries, c.HeadHash, at, c.KeyID, string(line)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Checkpoints returns up to limit of orgID's checkpoints counting fewer
// than before entries (0: no bound), the newest first.
func Checkpoints(ctx context.Context, pool *pgxpool.Pool, orgID string, before int64, limit int) ([]receiptchain.Checkpoint, error) {
	rows, err := pool.Query(ctx, `SELECT line FROM public.receipt_checkpoints WHERE org_id = $1 AND ($2 = 0 OR entries < $2)
		ORDER BY entries DESC LIMIT $3`, orgID, before, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []receiptchain.Checkpoint
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, err
		}
		var l struct {
			Checkpoint receiptchain.Checkpoint `json:"checkpoint"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return nil, err
		}
		out = append(out, l.Checkpoint)
	}
	return out, rows.Err()
}

// CheckpointLines returns the export lines of orgID's checkpoints counting
// after+1 to upTo entries, by the entry they sign.
func CheckpointLines(ctx context.Context, pool *pgxpool.Pool, orgID string, after, upTo int64) (map[int64]string, error) {
	rows, err := pool.Query(ctx, `SELECT entries, line FROM public.receipt_checkpoints WHERE org_id = $1 AND entries > $2 AND entries <= $3`,
		orgID, after, upTo)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var n int64
		var line string
		if err := rows.Scan(&n, &line); err != nil {
			return nil, err
		}
		out[n] = line
	}
	return out, rows.Err()
}

// ChainDue is an organisation's chain head beside its last checkpoint.
type ChainDue struct {
	OrgID       string
	Head        receiptchain.Head
	LastEntries int64
	LastAt      time.Time
}

// ChainsAhead lists, for every organisation whose chain has entries its
// last checkpoint does not count, the chain's head and that checkpoint
// (zero when none), up to limit of them, after organisation after.
func ChainsAhead(ctx context.Context, pool *pgxpool.Pool, after string, limit int) ([]ChainDue, error) {
	// The organisations are walked one index probe each (a skip scan of
	// the chain's primary key), not by reading every entry.
	rows, err := pool.Query(ctx, `WITH RECURSIVE orgs(org_id) AS (
			(SELECT org_id FROM public.receipt_chain WHERE org_id > $1 ORDER BY org_id LIMIT 1)
			UNION ALL
			SELECT (SELECT r.org_id FROM public.receipt_chain r WHERE r.org_id > o.org_id ORDER BY r.org_id LIMIT 1)
			FROM orgs o WHERE o.org_id IS NOT NULL)
		SELECT o.org_id, h.seq, h.hash, h.idempotency_key, coalesce(c.entries, 0), c.signed_at
		FROM orgs o
		JOIN LATERAL (SELECT seq, hash, idempotency_key FROM public.receipt_chain WHERE org_id = o.org_id ORDER BY seq DESC LIMIT 1) h ON true
		LEFT JOIN LATERAL (SELECT entries, signed_at FROM public.receipt_checkpoints WHERE org_id = o.org_id ORDER BY entries DESC LIMIT 1) c ON true
		WHERE o.org_id IS NOT NULL AND h.seq > coalesce(c.entries, 0)
		ORDER BY o.org_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ChainDue
	for rows.Next() {
		var d ChainDue
		var at *time.Time
		if err := rows.Scan(&d.OrgID, &d.Head.Seq, &d.Head.Hash, &d.Head.Key, &d.LastEntries, &at); err != nil {
			return nil, err
		}
		if at != nil {
			d.LastAt = *at
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
