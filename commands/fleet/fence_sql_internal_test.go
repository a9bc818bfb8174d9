package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/testutil"
)

// fenceSQL answers as the SQL function host_fence does for every kind of
// host: nothing for the claim in force, PF409 for a stale generation or a
// gateway with no claim row, 22023 for a host it cannot name; and it holds
// the host's row, so that a take waits for the checking transaction.
func TestFenceStatementAnswersAsTheFunction(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO sim_host (id, holder, epoch) VALUES (1, 'a', 3)
		ON CONFLICT (id) DO UPDATE SET holder = 'a', epoch = 3;
		INSERT INTO gateway_hosts (gateway_id, holder, epoch) VALUES ('gw_1', 'a', 7)`); err != nil {
		t.Fatal(err)
	}
	code := func(err error) string {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code
		}
		if err != nil {
			t.Fatalf("not a database refusal: %v", err)
		}
		return ""
	}
	for _, c := range []struct {
		host  string
		epoch int64
		want  string
	}{
		{"sim", 3, ""},
		{"sim", 2, "PF409"},
		{"gw.gw_1", 7, ""},
		{"gw.gw_1", 6, "PF409"},
		{"gw.gw_2", 1, "PF409"}, // no claim row: taken by nobody, held by nobody
		{"elsewhere", 1, "22023"},
	} {
		check := func(sql string, args ...any) string {
			_, err := pool.Exec(ctx, sql, args...)
			return code(err)
		}
		fast := check(fenceSQL(c.host, "$1", "$2"), c.host, c.epoch)
		fn := check(`SELECT host_fence($1, $2)`, c.host, c.epoch)
		if fast != c.want || fn != c.want {
			t.Errorf("host %s at generation %d: statement %q, function %q; want %q", c.host, c.epoch, fast, fn, c.want)
		}
	}

	// A take waits for a transaction that checked the claim to end.
	for _, host := range []string{"sim", "gw.gw_1"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) // a failed check must not leave it open (nothing after its commit)
		epoch := map[string]int64{"sim": 3, "gw.gw_1": 7}[host]
		if _, err := tx.Exec(ctx, fenceSQL(host, "$1", "$2"), host, epoch); err != nil {
			t.Fatal(err)
		}
		took := make(chan error, 1)
		go func() {
			take := `UPDATE sim_host SET epoch = epoch + 1 WHERE id = 1`
			if host != "sim" {
				take = `UPDATE gateway_hosts SET epoch = epoch + 1 WHERE gateway_id = 'gw_1'`
			}
			_, err := pool.Exec(ctx, take)
			took <- err
		}()
		select {
		case err := <-took:
			t.Fatalf("%s: a take went through while a checked transaction was open (%v)", host, err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-took; err != nil {
			t.Fatal(err)
		}
		_, err = pool.Exec(ctx, fenceSQL(host, "$1", "$2"), host, epoch)
		if code(err) != "PF409" {
			t.Fatalf("%s: the claim checked before the take: %v; want PF409", host, err)
		}
	}
}
