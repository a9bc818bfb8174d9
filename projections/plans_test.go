package projections_test

import (
	"context"
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

// The statements that join a table to a batch's unnested rows (the
// receipts' commits, the runs' frames, the webhook deliveries' attempts)
// look their rows up by index however the connection's plan cache planned
// them: a plan cached while the table was small (a new deployment, a
// rebuilt version) once kept scanning the whole table as it grew, for
// every batch on that connection (57 ms a batch at 200,000 run actions).
func TestBatchStatementsFindTheirRowsByIndexAsTheTableGrows(t *testing.T) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	ref := func(id string) *domain.FrameRef { return &domain.FrameRef{FrameID: id, CapturedAt: at} }
	request := func(id, run string) domain.Event {
		return domain.ActionRequested{ActionID: id, DeviceID: "d1", IdempotencyKey: "k-" + id, Action: "tap", RunID: run, AgentRunID: run,
			Arguments: json.RawMessage(`{}`), Actor: domain.Actor{Kind: "api_key", ID: "key1"}, RequestedAt: at}
	}
	commit := func(id string) domain.Event {
		return domain.ActionCommitted{ActionID: id, DeviceID: "d1", Result: domain.ActionResult{Description: "tapped"},
			FrameBefore: ref("fb-" + id), FrameAfter: ref("fa-" + id), StartedAt: at, FinishedAt: at}
	}
	// two is a round's two actions' events.
	two := func(round int, ev func(actionID string) domain.Event) []domain.Event {
		return []domain.Event{ev(fmt.Sprintf("a-%d-0", round)), ev(fmt.Sprintf("a-%d-1", round))}
	}
	cases := []struct {
		p projections.Projection
		// table is the table whose scans are counted.
		table string
		// before returns a round's rows to look up (statements and events,
		// not counted); round, the events whose statement looks them up.
		before func(round int) (sql string, evs []domain.Event)
		round  func(round int) []domain.Event
		// grow adds 20,000 rows to table.
		grow string
		// check counts the rows the rounds changed, as want.
		check, want string
	}{{
		p: projections.Receipts{}, table: "receipts",
		before: func(r int) (string, []domain.Event) {
			return "", two(r, func(id string) domain.Event { return request(id, "") })
		},
		round: func(r int) []domain.Event { return two(r, commit) },
		grow: `INSERT INTO %s.receipts (org_id, idempotency_key, action_id, device_id, state, actor_kind, actor_id, action, arguments, ts)
			SELECT 'org_r', 'bulk-' || g, 'bulk-' || g, 'd1', 'committed', 'api_key', 'key1', 'tap', '{}', now() FROM generate_series(1, 20000) g`,
		check: `SELECT count(*) FROM %s.receipts WHERE state = 'committed' AND action_id LIKE 'a-%%'`, want: `[18]`,
	}, {
		p: projections.Runs{}, table: "run_actions",
		before: func(r int) (string, []domain.Event) {
			return "", two(r, func(id string) domain.Event { return request(id, "run1") })
		},
		round: func(r int) []domain.Event { return two(r, commit) },
		grow:  `INSERT INTO %s.run_actions (action_id, run_id) SELECT 'bulk-' || g, 'run2' FROM generate_series(1, 20000) g`,
		check: `SELECT count(*) FROM %s.run_frames WHERE run_id = 'run1'`, want: `[36]`,
	}, {
		p: projections.Webhooks{}, table: "webhook_deliveries",
		before: func(r int) (string, []domain.Event) {
			return fmt.Sprintf(`INSERT INTO %%s.webhook_deliveries (delivery_id, webhook_id, org_id, event_id, event, payload, created_at, status)
				SELECT 'del-%d-' || g, 'wh1', 'org_r', gen_random_uuid(), 'action.committed', '\x7b7d', now(), 'pending' FROM generate_series(0, 1) g`, r), nil
		},
		round: func(r int) []domain.Event {
			ok := 200
			var evs []domain.Event
			for i := range 2 {
				evs = append(evs, domain.WebhookDeliveryAttempted{DeliveryID: fmt.Sprintf("del-%d-%d", r, i), WebhookID: "wh1", Attempt: 1,
					AttemptedAt: at, ResponseStatus: &ok, Outcome: domain.WebhookDelivered})
			}
			return evs
		},
		grow: `INSERT INTO %s.webhook_deliveries (delivery_id, webhook_id, org_id, event_id, event, payload, created_at, status)
			SELECT 'bulk-' || g, 'wh1', 'org_r', gen_random_uuid(), 'action.committed', '\x7b7d', now(), 'pending' FROM generate_series(1, 20000) g`,
		check: `SELECT count(*) FROM %s.webhook_deliveries WHERE status = 'delivered'`, want: `[18]`,
	}}
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	for _, c := range cases {
		t.Run(c.p.Name(), func(t *testing.T) {
			schema := "plan_" + c.p.Name()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			pos := int64(0)
			// apply applies evs in one transaction, after sql (with the
			// schema's name for %s), and returns table's sequential scans
			// while evs were applied.
			apply := func(sql string, evs []domain.Event) (seqScans int64) {
				t.Helper()
				var batch []eventstore.Event
				for _, ev := range evs {
					name, version, data, err := domain.Events.Encode(ev)
					if err != nil {
						t.Fatal(err)
					}
					pos++
					batch = append(batch, eventstore.Event{Position: pos, Type: name, SchemaVersion: version, OrgID: "org_r", Data: data})
				}
				// The backend's counts not yet flushed to the shared
				// statistics, before and after, within the one transaction.
				scans := `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = '` + schema + `.` + c.table + `'::regclass`
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if sql != "" {
						if _, err := tx.Exec(ctx, fmt.Sprintf(sql, schema)); err != nil {
							return err
						}
					}
					var before int64
					if err := tx.QueryRow(ctx, scans).Scan(&before); err != nil {
						return err
					}
					if err := c.p.Apply(ctx, tx, schema, batch); err != nil {
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
				if _, err := tx.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
					return err
				}
				return c.p.Setup(ctx, tx, schema)
			}); err != nil {
				t.Fatal(err)
			}
			round := func(r int) int64 {
				apply(c.before(r))
				return apply("", c.round(r))
			}
			for r := range 8 { // past the five executions after which PostgreSQL may keep a generic plan
				round(r)
			}
			if _, err := conn.Exec(context.WithoutCancel(ctx), fmt.Sprintf(c.grow, schema)); err != nil {
				t.Fatal(err)
			}
			if n := round(8); n != 0 {
				t.Fatalf("a batch's statement scanned the 20,000-row %s table %d times; want its rows found by index", c.table, n)
			}
			checkRows(t, pool, fmt.Sprintf(c.check, schema), c.want)
		})
	}
}
