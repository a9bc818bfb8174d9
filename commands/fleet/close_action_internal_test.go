package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// closeAction folds the outcome unit's host claim check, the device's
// saved state and the idempotency row's close into one statement: a stale
// claim still refuses all of it (PF409, nothing written), a current claim
// or none writes both, and a unit without a state closes the row alone.
func TestCloseActionIsOneStatementAndStillFenced(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO sim_host (id, holder, epoch) VALUES (1, 'b', 3)
		ON CONFLICT (id) DO UPDATE SET holder = 'b', epoch = 3`); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	d := &domain.Device{ID: "dev_close", OrgID: "org_close", Backend: "sim", Model: "m"}
	open := func(key string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO action_idempotency (org_id, idempotency_key, action_id, device_id, fingerprint, state, requested_at, host)
			VALUES ($1, $2, $3, $4, 'fp', 'requested', $5, 'sim')`, d.OrgID, key, "act_"+key, d.ID, at); err != nil {
			t.Fatal(err)
		}
	}
	run := func(fence domain.HostFence, state []byte, key, final string) error {
		_, err := pool.Exec(ctx, closeActionSQL(fence.Epoch != 0, state != nil), closeActionArgs(fence, d, state, d.OrgID, key, final, at)...)
		return err
	}
	rowState := func(key string) string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT state FROM action_idempotency WHERE org_id = $1 AND idempotency_key = $2`, d.OrgID, key).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	saved := func() string {
		t.Helper()
		var s []byte
		err := pool.QueryRow(ctx, `SELECT state FROM device_states WHERE device_id = $1`, d.ID).Scan(&s)
		if errors.Is(err, pgx.ErrNoRows) {
			return ""
		} else if err != nil {
			t.Fatal(err)
		}
		return string(s)
	}

	open("stale")
	err := run(domain.HostFence{Host: "sim", Epoch: 2}, []byte("zombie"), "stale", "committed")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "PF409" || !fenceRefused(err) {
		t.Fatalf("a stale claim's close: %v; want PF409", err)
	}
	if s, st := rowState("stale"), saved(); s != "requested" || st != "" {
		t.Fatalf("after a stale claim's close: key %q, device state %q; want requested and none", s, st)
	}

	open("held")
	if err := run(domain.HostFence{Host: "sim", Epoch: 3}, []byte("one"), "held", "committed"); err != nil {
		t.Fatal(err)
	}
	if s, st := rowState("held"), saved(); s != "committed" || st != "one" {
		t.Fatalf("after the holder's close: key %q, device state %q; want committed and one", s, st)
	}

	open("unfenced")
	if err := run(domain.HostFence{}, []byte("two"), "unfenced", "failed"); err != nil {
		t.Fatal(err)
	}
	if s, st := rowState("unfenced"), saved(); s != "failed" || st != "two" {
		t.Fatalf("after an unfenced close: key %q, device state %q; want failed and two", s, st)
	}

	open("stateless")
	if err := run(domain.HostFence{}, nil, "stateless", "unknown"); err != nil {
		t.Fatal(err)
	}
	if s, st := rowState("stateless"), saved(); s != "unknown" || st != "two" {
		t.Fatalf("after a close without state: key %q, device state %q; want unknown and two (unchanged)", s, st)
	}
}
