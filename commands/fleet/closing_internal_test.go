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

// closing folds the outcome unit's frames, host claim check, the device's
// saved state and the idempotency row's close into one statement: a stale
// claim still refuses all of it (PF409, nothing written), a current claim
// or none writes all, and a unit without frames or a state closes the row
// alone.
func TestClosingIsOneStatementAndStillFenced(t *testing.T) {
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
	frame := func(id string) frameRow {
		return frameRow{StoredFrame: domain.StoredFrame{ID: id, OrgID: d.OrgID, DeviceID: d.ID, Backend: d.Backend, ScreenHash: "h",
			Width: 1, Height: 2, CapturedAt: at, ExpiresAt: at.Add(time.Hour)}, PNG: []byte{1}, Snapshot: []byte(`{}`)}
	}
	run := func(fence domain.HostFence, state []byte, key, final string, frames ...frameRow) error {
		sql, args := closing{frames: frames, fence: fence, d: d, state: state, orgID: d.OrgID, key: key, final: final, at: at}.statement()
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	frames := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM frames WHERE device_id = $1`, d.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
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
	err := run(domain.HostFence{Host: "sim", Epoch: 2}, []byte("zombie"), "stale", "committed", frame("frm_a"), frame("frm_b"))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "PF409" || !fenceRefused(err) {
		t.Fatalf("a stale claim's close: %v; want PF409", err)
	}
	if s, st, n := rowState("stale"), saved(), frames(); s != "requested" || st != "" || n != 0 {
		t.Fatalf("after a stale claim's close: key %q, device state %q, %d frames; want requested, none and 0", s, st, n)
	}

	open("held")
	if err := run(domain.HostFence{Host: "sim", Epoch: 3}, []byte("one"), "held", "committed", frame("frm_a"), frame("frm_b")); err != nil {
		t.Fatal(err)
	}
	if s, st, n := rowState("held"), saved(), frames(); s != "committed" || st != "one" || n != 2 {
		t.Fatalf("after the holder's close: key %q, device state %q, %d frames; want committed, one and 2", s, st, n)
	}

	open("unfenced")
	if err := run(domain.HostFence{}, []byte("two"), "unfenced", "failed", frame("frm_c")); err != nil {
		t.Fatal(err)
	}
	if s, st, n := rowState("unfenced"), saved(), frames(); s != "failed" || st != "two" || n != 3 {
		t.Fatalf("after an unfenced close: key %q, device state %q, %d frames; want failed, two and 3", s, st, n)
	}

	open("stateless")
	if err := run(domain.HostFence{}, nil, "stateless", "unknown"); err != nil {
		t.Fatal(err)
	}
	if s, st := rowState("stateless"), saved(); s != "unknown" || st != "two" {
		t.Fatalf("after a close without state: key %q, device state %q; want unknown and two (unchanged)", s, st)
	}
}
