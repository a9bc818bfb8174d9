package projections

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// ReceiptsReport is what VerifyReceipts found.
type ReceiptsReport struct {
	// Checkpoint is where the receipts read model stood; the history was
	// replayed up to exactly there.
	Checkpoint eventstore.Cursor
	// EventsRead is how many events of the history were read.
	EventsRead int
	// Actions is how many actions the history records; Receipts how many
	// rows the read model holds.
	Actions  int
	Receipts int
	// ByState counts the history's actions by receipt state; Unknown those
	// whose outcome is unknown; Reviewed those reviewed.
	ByState  map[string]int
	Unknown  int
	Reviewed int
	// People and Keys count the distinct actors.
	People int
	Keys   int
	// Mismatches describes every disagreement (empty when none).
	Mismatches []string
}

// OK reports whether the read model agrees with the history.
func (r ReceiptsReport) OK() bool { return len(r.Mismatches) == 0 }

// VerifyReceipts replays the event history and checks the receipts read
// model against it, for auditors: the same actions, each with the same
// organisation, key, device, state, outcome-unknown flag, actor (exactly
// one of person and key), failure code and review. The history is folded
// by the domain's ActionRecord, independently of the read model's SQL. The
// read model and its checkpoint are read in one snapshot, and the history
// up to that checkpoint, so a live service does not cause false alarms.
func VerifyReceipts(ctx context.Context, store *eventstore.Store) (ReceiptsReport, error) {
	rep := ReceiptsReport{ByState: map[string]int{}}
	rows := map[string]receiptRow{}
	err := pgx.BeginTxFunc(ctx, store.Pool(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var txid string
		err := tx.QueryRow(ctx, `SELECT c.last_transaction_id::text, c.last_position FROM projection_checkpoints c
			JOIN projection_registry g ON c.consumer_group = g.name || '@' || g.active_version WHERE g.name = $1`,
			Receipts{}.Name()).Scan(&txid, &rep.Checkpoint.Position)
		if err != nil {
			return fmt.Errorf("receipts checkpoint: %w", err)
		}
		if rep.Checkpoint.TransactionID, err = strconv.ParseUint(txid, 10, 64); err != nil {
			return err
		}
		rs, err := tx.Query(ctx, `SELECT action_id, org_id, idempotency_key, device_id, state, outcome_unknown, actor_kind, actor_id,
			coalesce(error_code, ''), reviewed_at IS NOT NULL FROM public.receipts`)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var r receiptRow
			if err := rs.Scan(&r.actionID, &r.orgID, &r.key, &r.deviceID, &r.state, &r.unknown, &r.actor.Kind, &r.actor.ID,
				&r.errorCode, &r.reviewed); err != nil {
				return err
			}
			rows[r.actionID] = r
		}
		return rs.Err()
	})
	if err != nil {
		return rep, err
	}
	rep.Receipts = len(rows)

	history := map[string]*domain.ActionRecord{}
	var cur eventstore.Cursor
	for done := false; !done; {
		evs, next, err := store.ReadFeed(ctx, cur, 5000)
		if err != nil {
			return rep, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if rep.Checkpoint.Before(e) { // past what the read model has applied
				done = true
				break
			}
			rep.EventsRead++
			if !receiptEvents[e.Type] {
				continue
			}
			de, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
			if err != nil {
				return rep, fmt.Errorf("event %d: %w", e.Position, err)
			}
			id := actionIDOf(de)
			rec := history[id]
			if rec == nil {
				rec = &domain.ActionRecord{}
				history[id] = rec
			}
			rec.Apply(e.OrgID, de, e.StreamVersion)
		}
		cur = next
	}
	rep.Actions = len(history)

	people, keys := map[string]bool{}, map[string]bool{}
	ids := make([]string, 0, len(history))
	for id := range history {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rec := history[id]
		if rec.State == "" {
			rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("action %s: outcome recorded without a request", id))
			continue
		}
		q := rec.Requested
		rep.ByState[rec.State]++
		if rec.OutcomeUnknown {
			rep.Unknown++
		}
		if rec.Review != nil {
			rep.Reviewed++
		}
		switch q.Actor.Kind {
		case domain.ActorUser:
			people[q.Actor.ID] = true
		case domain.ActorAPIKey:
			keys[q.Actor.ID] = true
		default:
			rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("action %s: actor kind %q is neither a person nor a key", id, q.Actor.Kind))
		}
		r, ok := rows[id]
		if !ok {
			rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("action %s (key %q): in the history, missing from the read model", id, q.IdempotencyKey))
			continue
		}
		delete(rows, id)
		wantCode := ""
		if rc := rec.Receipt(); rc.Error != nil {
			wantCode = string(rc.Error.Code)
		}
		for _, c := range []struct {
			field     string
			got, want any
		}{
			{"organisation", r.orgID, rec.OrgID},
			{"idempotency key", r.key, q.IdempotencyKey},
			{"device", r.deviceID, q.DeviceID},
			{"state", r.state, rec.State},
			{"outcome unknown", r.unknown, rec.OutcomeUnknown},
			{"actor", r.actor, q.Actor},
			{"error code", r.errorCode, wantCode},
			{"reviewed", r.reviewed, rec.Review != nil},
		} {
			if c.got != c.want {
				rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("action %s (key %q): %s is %v in the read model, %v in the history",
					id, q.IdempotencyKey, c.field, c.got, c.want))
			}
		}
	}
	for id, r := range rows {
		rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("action %s (key %q): in the read model, absent from the history", id, r.key))
	}
	rep.People, rep.Keys = len(people), len(keys)
	return rep, nil
}

type receiptRow struct {
	actionID, orgID, key, deviceID, state, errorCode string
	unknown, reviewed                                bool
	actor                                            domain.Actor
}

func actionIDOf(e domain.Event) string {
	switch e := e.(type) {
	case domain.ActionRequested:
		return e.ActionID
	case domain.ActionCommitted:
		return e.ActionID
	case domain.ActionFailed:
		return e.ActionID
	case domain.ActionOutcomeUnknown:
		return e.ActionID
	case domain.ReceiptReviewed:
		return e.ActionID
	}
	return ""
}
