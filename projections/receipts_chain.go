package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
)

// ReceiptChain is the tamper-evident chain of every organisation's
// receipts (package receiptchain defines it): one entry per receipt event
// (request, outcome, outcome unknown, review) in feed order, per
// organisation, each hashing the receipt as it stood just after that event
// together with the previous entry's hash. It consumes the same events as
// Receipts and emits nothing.
//
// Tables: receipt_chain holds the entries (the export line as written,
// byte for byte); receipt_chain_records holds, per receipt, the folded
// action (to continue it in a later batch) and its latest entry's number
// and hash, the hash that chains it to its organisation's previous receipt.
//
// It is a projection of its own rather than columns of receipts: a new
// projection is built from position 0 on an existing deployment by the
// runner's Ensure, with no rebuild step, while the receipts read model
// keeps serving; and its rows depend on the events alone (never on the
// receipts table's progress), so a rebuild of either yields the same
// hashes.
type ReceiptChain struct{}

// ReceiptChainName is the projection's stable name.
const ReceiptChainName = "receipt_chain"

// Name implements Projection.
func (ReceiptChain) Name() string { return ReceiptChainName }

// Tables implements Projection.
func (ReceiptChain) Tables() []string { return []string{"receipt_chain", "receipt_chain_records"} }

// EventTypes implements Selective.
func (ReceiptChain) EventTypes() []string {
	return []string{nameOf(domain.ActionRequested{}), nameOf(domain.ActionCommitted{}), nameOf(domain.ActionFailed{}),
		nameOf(domain.ActionOutcomeUnknown{}), nameOf(domain.ReceiptReviewed{})}
}

// Setup implements Projection. line is text, not jsonb: the export writes
// the bytes that were hashed, and jsonb would reorder them.
func (ReceiptChain) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.receipt_chain (
		org_id          text NOT NULL,
		seq             bigint NOT NULL,
		action_id       text NOT NULL,
		idempotency_key text NOT NULL,
		event_type      text NOT NULL,
		hash            text NOT NULL,
		line            text NOT NULL,
		PRIMARY KEY (org_id, seq)
	);
	CREATE TABLE `+schema+`.receipt_chain_records (
		action_id       text PRIMARY KEY,
		org_id          text NOT NULL,
		idempotency_key text NOT NULL,
		record          jsonb NOT NULL,
		chain_seq       bigint NOT NULL,
		chain_hash      text NOT NULL
	);
	CREATE INDEX ON `+schema+`.receipt_chain_records (org_id, idempotency_key);`)
	return err
}

type chainedAction struct {
	rec  domain.ActionRecord
	head receiptchain.Head
}

// Apply implements Projection. A batch is folded in Go: the actions it
// continues and the heads of the organisations it extends are read first
// (one query each), then every event appends one entry, and the entries
// and records are written in one pipelined batch.
func (ReceiptChain) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	type decoded struct {
		e        eventstore.Event
		ev       domain.Event
		actionID string
	}
	var evs []decoded
	var continued, orgs []string
	seenAction, seenOrg := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		if !receiptEvents[e.Type] {
			continue
		}
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
		}
		id := actionIDOf(ev)
		evs = append(evs, decoded{e, ev, id})
		if _, req := ev.(domain.ActionRequested); !req && !seenAction[id] {
			continued = append(continued, id)
		}
		seenAction[id] = true
		if !seenOrg[e.OrgID] {
			seenOrg[e.OrgID] = true
			orgs = append(orgs, e.OrgID)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	actions := map[string]*chainedAction{}
	if len(continued) > 0 {
		rows, err := tx.Query(ctx, `SELECT action_id, record, chain_seq, chain_hash FROM `+schema+`.receipt_chain_records
			WHERE action_id = ANY($1)`, continued)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var raw []byte
			a := &chainedAction{}
			if err := rows.Scan(&id, &raw, &a.head.Seq, &a.head.Hash); err != nil {
				rows.Close()
				return err
			}
			if err := json.Unmarshal(raw, &a.rec); err != nil {
				rows.Close()
				return fmt.Errorf("receipt chain record %s: %w", id, err)
			}
			actions[id] = a
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	heads := map[string]receiptchain.Head{}
	rows, err := tx.Query(ctx, `SELECT o, c.seq, c.hash, c.idempotency_key FROM unnest($1::text[]) o
		JOIN LATERAL (SELECT seq, hash, idempotency_key FROM `+schema+`.receipt_chain WHERE org_id = o ORDER BY seq DESC LIMIT 1) c ON true`, orgs)
	if err != nil {
		return err
	}
	for rows.Next() {
		var org string
		var h receiptchain.Head
		if err := rows.Scan(&org, &h.Seq, &h.Hash, &h.Key); err != nil {
			rows.Close()
			return err
		}
		heads[org] = h
	}
	if err := rows.Err(); err != nil {
		return err
	}

	// The batch's entries are written with one COPY, and the records of
	// the actions it touched with one statement. The entries are most of
	// the bytes a batch sends: COPY writes them into the connection's
	// buffer as they are, where arrays bound to a statement are built
	// anew, each grown from a few hundred bytes, for every batch (most of
	// this projection's garbage at fleet scale).
	var entries [][]any
	dirty := map[string]bool{}
	var order []string
	for _, d := range evs {
		a := actions[d.actionID]
		if a == nil {
			a = &chainedAction{}
			actions[d.actionID] = a
		}
		a.rec.Apply(d.e.OrgID, d.ev, d.e.StreamVersion)
		if a.rec.State == "" {
			continue // an outcome without its request: nothing to show (VerifyReceipts reports it)
		}
		org := a.rec.OrgID
		head, ok := heads[org]
		if !ok {
			head = receiptchain.Start()
		}
		receipt, err := json.Marshal(ChainedReceipt(&a.rec))
		if err != nil {
			return err
		}
		key := a.rec.Requested.IdempotencyKey
		entry, line, next, err := receiptchain.Next(org, head, d.e.Type, receipt, key)
		if err != nil {
			return err
		}
		heads[org], a.head = next, next
		entries = append(entries, []any{org, entry.Seq, d.actionID, key, d.e.Type, entry.Hash, line})
		if !dirty[d.actionID] {
			dirty[d.actionID] = true
			order = append(order, d.actionID)
		}
	}
	if len(order) == 0 {
		return nil
	}
	var (
		rIDs, rOrgs, rKeys, rHashes []string
		rRecords                    [][]byte
		rSeqs                       []int64
	)
	for _, id := range order {
		a := actions[id]
		// The lease and fencing token never reach a receipt's tables.
		a.rec.Requested.LeaseID, a.rec.Requested.FencingToken = "", 0
		raw, err := json.Marshal(a.rec)
		if err != nil {
			return err
		}
		rIDs, rOrgs, rKeys, rRecords = append(rIDs, id), append(rOrgs, a.rec.OrgID), append(rKeys, a.rec.Requested.IdempotencyKey), append(rRecords, raw)
		rSeqs, rHashes = append(rSeqs, a.head.Seq), append(rHashes, a.head.Hash)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "receipt_chain"}, chainColumns, pgx.CopyFromRows(entries)); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.receipt_chain_records (action_id, org_id, idempotency_key, record, chain_seq, chain_hash)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bigint[], $6::text[]) ON CONFLICT (action_id) DO UPDATE
		SET record = EXCLUDED.record, chain_seq = EXCLUDED.chain_seq, chain_hash = EXCLUDED.chain_hash`,
		rIDs, rOrgs, rKeys, rRecords, rSeqs, rHashes)
	return err
}

var chainColumns = []string{"org_id", "seq", "action_id", "idempotency_key", "event_type", "hash", "line"}

// ChainedReceipt is the receipt an entry hashes: the action's receipt as
// GET /v1/receipts/{idempotencyKey} shows it, with every time in UTC to
// the microsecond, as the read model stores it.
func ChainedReceipt(rec *domain.ActionRecord) domain.Receipt {
	r := rec.Receipt()
	norm := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	r.Timestamp = norm(r.Timestamp)
	if r.StartedAt != nil && r.FinishedAt != nil {
		s, f := norm(*r.StartedAt), norm(*r.FinishedAt)
		r.StartedAt, r.FinishedAt = &s, &f
		d := float64(f.Sub(s).Microseconds()) / 1000
		r.DurationMs = &d
	}
	if r.Reviewed != nil {
		rv := *r.Reviewed
		rv.At = norm(rv.At)
		r.Reviewed = &rv
	}
	return r
}

// ChainHead is where an organisation's receipt chain stands.
func ChainHead(ctx context.Context, pool *pgxpool.Pool, orgID string) (receiptchain.Head, error) {
	h := receiptchain.Start()
	err := pool.QueryRow(ctx, `SELECT seq, hash, idempotency_key FROM public.receipt_chain WHERE org_id = $1 ORDER BY seq DESC LIMIT 1`, orgID).
		Scan(&h.Seq, &h.Hash, &h.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return receiptchain.Start(), nil
	}
	return h, err
}

// ChainPage returns up to limit export lines of orgID's chain with
// numbers in (after, upTo], oldest first, and the last number returned.
func ChainPage(ctx context.Context, pool *pgxpool.Pool, orgID string, after, upTo int64, limit int) ([]string, int64, error) {
	rows, err := pool.Query(ctx, `SELECT seq, line FROM public.receipt_chain WHERE org_id = $1 AND seq > $2 AND seq <= $3
		ORDER BY seq LIMIT $4`, orgID, after, upTo, limit)
	if err != nil {
		return nil, after, err
	}
	defer rows.Close()
	var out []string
	last := after
	for rows.Next() {
		var line string
		if err := rows.Scan(&last, &line); err != nil {
			return nil, after, err
		}
		out = append(out, line)
	}
	return out, last, rows.Err()
}

// ReceiptChainHash is a receipt's record in the chain: the number and hash
// of its latest entry. ErrNoRow when orgID has no receipt under key.
func ReceiptChainHash(ctx context.Context, pool *pgxpool.Pool, orgID, key string) (int64, string, error) {
	var seq int64
	var hash string
	err := pool.QueryRow(ctx, `SELECT chain_seq, chain_hash FROM public.receipt_chain_records WHERE org_id = $1 AND idempotency_key = $2`,
		orgID, key).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", ErrNoRow
	}
	return seq, hash, err
}
