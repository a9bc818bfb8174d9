package projections_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The receipts read model writes a run of consecutive requests as one
// statement and a run of consecutive commits as another; events of other
// kinds between them keep their place. One batch holding requests, commits,
// a failure, an unknown outcome and a review in an interleaved order gives
// each receipt what the events, applied one by one, would.
func TestReceiptsApplyRunsOfRequestsAndCommitsInOrder(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	req := func(id string) domain.ActionRequested {
		return domain.ActionRequested{ActionID: id, DeviceID: "d1", IdempotencyKey: "k-" + id, Action: "tap",
			Arguments: json.RawMessage(`{"x":1}`), Actor: domain.Actor{Kind: "api_key", ID: "key1"}, RequestedAt: at}
	}
	commit := func(id string) domain.ActionCommitted {
		return domain.ActionCommitted{ActionID: id, DeviceID: "d1", Result: domain.ActionResult{Description: "tapped " + id},
			FrameAfter: &domain.FrameRef{FrameID: "f-" + id, CapturedAt: at}, StartedAt: at, FinishedAt: at.Add(time.Second)}
	}
	pool := applyInOneBatch(t, projections.Receipts{}, "org_r",
		req("a1"), req("a2"), commit("a1"), commit("a2"), req("a3"),
		domain.ActionFailed{ActionID: "a3", DeviceID: "d1", Code: domain.CodeDeviceUnavailable, Message: "refused", StartedAt: at, FinishedAt: at},
		req("a4"), domain.ActionOutcomeUnknown{ActionID: "a4", Reason: "lost"}, req("a5"), commit("a4"), commit("a5"),
		domain.ReceiptReviewed{ActionID: "a5", At: at, Reviewer: domain.Actor{Kind: "user", ID: "u1"}, Note: "fine"},
	)
	checkRows(t, pool, `SELECT action_id, state, outcome_unknown, coalesce(result->>'description', ''),
		coalesce(frame_after, ''), coalesce(error_code, ''), coalesce(review_note, '') FROM public.receipts ORDER BY action_id`,
		`["a1","committed",false,"tapped a1","f-a1","",""]`,
		`["a2","committed",false,"tapped a2","f-a2","",""]`,
		`["a3","failed",false,"","","device_unavailable",""]`,
		`["a4","committed",true,"tapped a4","f-a4","action_outcome_unknown",""]`,
		`["a5","committed",false,"tapped a5","f-a5","","fine"]`)
}

// The receipts' commit statement (one UPDATE joined to a batch's unnested
// outcomes) looks each receipt up by its action's index however the
// connection's plan cache planned it: a plan cached while the table was
// small (a new deployment, a rebuilt version) once kept scanning the whole
// table as it grew, for every batch on that connection.
func TestReceiptsCommitsFindTheirRowsByIndexAsTheTableGrows(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	pos := int64(0)
	event := func(ev domain.Event) eventstore.Event {
		name, version, data, err := domain.Events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		pos++
		return eventstore.Event{Position: pos, Type: name, SchemaVersion: version, OrgID: "org_r", Data: data}
	}
	apply := func(evs ...eventstore.Event) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			return projections.Receipts{}.Apply(ctx, tx, "rg", evs)
		}); err != nil {
			t.Fatal(err)
		}
	}
	// requestThenCommit applies two actions' requests, then their
	// commits, and returns the table's sequential scans during the commits.
	requestThenCommit := func(round int) (seqScans int64) {
		t.Helper()
		var reqs, commits []eventstore.Event
		for i := range 2 {
			id := fmt.Sprintf("a-%d-%d", round, i)
			reqs = append(reqs, event(domain.ActionRequested{ActionID: id, DeviceID: "d1", IdempotencyKey: "k-" + id, Action: "tap",
				Arguments: json.RawMessage(`{}`), Actor: domain.Actor{Kind: "api_key", ID: "key1"}, RequestedAt: at}))
			commits = append(commits, event(domain.ActionCommitted{ActionID: id, DeviceID: "d1", Result: domain.ActionResult{Description: "tapped"},
				StartedAt: at, FinishedAt: at}))
		}
		apply(reqs...)
		// The backend's counts not yet flushed to the shared statistics,
		// before and after, within the one transaction.
		scans := `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'rg.receipts'::regclass`
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var before int64
			if err := tx.QueryRow(ctx, scans).Scan(&before); err != nil {
				return err
			}
			if err := (projections.Receipts{}).Apply(ctx, tx, "rg", commits); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, scans).Scan(&seqScans); err != nil {
				return err
			}
			seqScans -= before
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return seqScans
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA rg`); err != nil {
			return err
		}
		return projections.Receipts{}.Setup(ctx, tx, "rg")
	}); err != nil {
		t.Fatal(err)
	}
	for round := range 8 { // past the five executions after which PostgreSQL may keep a generic plan
		requestThenCommit(round)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO rg.receipts (org_id, idempotency_key, action_id, device_id, state, actor_kind, actor_id, action, arguments, ts)
		SELECT 'org_r', 'bulk-' || g, 'bulk-' || g, 'd1', 'committed', 'api_key', 'key1', 'tap', '{}', now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if n := requestThenCommit(8); n != 0 {
		t.Fatalf("the commits of a batch scanned the 20,000-row receipts table %d times; want them found by action id", n)
	}
	checkRows(t, pool, `SELECT count(*) FROM rg.receipts WHERE state = 'committed' AND action_id LIKE 'a-%'`, `[18]`)
}
