package migrations_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"phonefleet/migrations"
	"phonefleet/testutil"
)

// TestClaimsMigrationMovesEveryClaim puts a database back as it stood
// before migration 0009 (the webhook and payment follow-up claim tables
// of 0004 and 0007, holding claims), applies 0009 again, and finds every
// claim in the one claims table under its reaction's name, with its
// attempt, holder and lease, and the old tables gone.
func TestClaimsMigrationMovesEveryClaim(t *testing.T) {
	pool := testutil.FreshPool(t)
	ctx := testutil.Context(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	sql := map[int]string{}
	for _, m := range all {
		sql[m.Version] = m.SQL
	}
	if _, err := pool.Exec(ctx, `DROP TABLE claims; DELETE FROM schema_migrations WHERE version = 9`); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{4, 7} {
		if _, err := pool.Exec(ctx, sql[v]); err != nil {
			t.Fatalf("migration %d again: %v", v, err)
		}
	}
	lease := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_delivery_claims (delivery_id, attempt, recorded, claimed_by, claimed_at, leased_until)
		VALUES ('dlv_1', 2, false, 'child', $1, $2), ('dlv_2', 1, true, 'other', $1, '-infinity'), ('dlv_3', 0, false, NULL, NULL, '-infinity')`,
		lease.Add(-time.Minute), lease); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO payment_followup_claims (followup_id, attempt, recorded, claimed_by, claimed_at, leased_until)
		VALUES ('pfu_1', 3, false, 'one', $1, $2), ('dlv_1', 1, true, 'two', $1, '-infinity')`, lease.Add(-time.Minute), lease); err != nil {
		t.Fatal(err)
	}
	done, err := migrations.Apply(ctx, pool)
	if err != nil || !slices.Contains(done, 9) {
		t.Fatalf("applied %v (%v); want 0009 among them", done, err)
	}
	rows, err := pool.Query(ctx, `SELECT reaction, key, attempt, recorded, coalesce(claimed_by, ''), leased_until FROM claims ORDER BY reaction, key`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var reaction, key, by string
		var attempt int
		var recorded bool
		var until pgtype.Timestamptz
		if err := rows.Scan(&reaction, &key, &attempt, &recorded, &by, &until); err != nil {
			t.Fatal(err)
		}
		end := until.Time.UTC().Format(time.RFC3339)
		if until.InfinityModifier == pgtype.NegativeInfinity {
			end = "-infinity"
		}
		got = append(got, fmt.Sprintf("%s/%s #%d recorded=%t by=%q until=%s", reaction, key, attempt, recorded, by, end))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`payment-followups/dlv_1 #1 recorded=true by="two" until=-infinity`,
		`payment-followups/pfu_1 #3 recorded=false by="one" until=` + lease.Format(time.RFC3339),
		`webhook-dispatcher/dlv_1 #2 recorded=false by="child" until=` + lease.Format(time.RFC3339),
		`webhook-dispatcher/dlv_2 #1 recorded=true by="other" until=-infinity`,
		`webhook-dispatcher/dlv_3 #0 recorded=false by="" until=-infinity`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got claims\n%q\nwant\n%q", got, want)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('webhook_delivery_claims', 'payment_followup_claims')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("got %d old claim tables (%v); want none", left, err)
	}
}
