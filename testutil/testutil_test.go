package testutil

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/migrations"
)

// querier is what pools and connections have in common here.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func currentDatabase(t testing.TB, q querier) string {
	t.Helper()
	var name string
	if err := q.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// assertMigrated checks that every migration is recorded and the events
// table exists.
func assertMigrated(t testing.TB, q querier) {
	t.Helper()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range all {
		want = append(want, m.Version)
	}
	var got []int
	if err := q.QueryRow(context.Background(), `SELECT array_agg(version ORDER BY version) FROM schema_migrations`).Scan(&got); err != nil {
		t.Fatalf("schema_migrations: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("applied migrations %v, want %v", got, want)
	}
	var events *string
	if err := q.QueryRow(context.Background(), `SELECT to_regclass('events')::text`).Scan(&events); err != nil || events == nil {
		t.Fatalf("no events table: %v", err)
	}
}

// adminConn connects to the test server's maintenance database.
func adminConn(t testing.TB) *pgx.Conn {
	t.Helper()
	u, _ := ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func databaseExists(t testing.TB, conn *pgx.Conn, name string) bool {
	t.Helper()
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestServerURL(t *testing.T) {
	u, source := ServerURL(t)
	if u == "" || source == "" {
		t.Fatalf("ServerURL = %q, %q", u, source)
	}
	if os.Getenv(envMode) == "embedded" && !strings.HasPrefix(source, "throwaway cluster in ") {
		t.Fatalf("%s=embedded, but the server is %s", envMode, source)
	}
	t.Logf("source: %s", source)
	adminConn(t)
}

func TestFreshPoolsAreDistinctAndMigrated(t *testing.T) {
	t.Parallel()
	a, b := FreshPool(t), FreshPool(t)
	nameA, nameB := currentDatabase(t, a), currentDatabase(t, b)
	if nameA == nameB {
		t.Fatalf("two FreshPools share database %s", nameA)
	}
	for _, name := range []string{nameA, nameB} {
		if !strings.HasPrefix(name, dbPrefix) {
			t.Errorf("database %q lacks prefix %s", name, dbPrefix)
		}
	}
	assertMigrated(t, a)
	assertMigrated(t, b)

	ctx := context.Background()
	if _, err := a.Exec(ctx, `INSERT INTO projection_checkpoints (consumer_group) VALUES ('only-in-a')`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM projection_checkpoints`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("b sees %d rows of a (%v)", n, err)
	}
	if got := a.Config().MaxConns; got < 40 {
		t.Errorf("MaxConns = %d, want at least 40", got)
	}
}

func TestFreshDatabaseDroppedAtCleanup(t *testing.T) {
	var name string
	t.Run("use", func(t *testing.T) {
		name = currentDatabase(t, FreshPool(t))
	})
	if databaseExists(t, adminConn(t), name) {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestDatabaseURLDroppedEvenWhileConnected(t *testing.T) {
	var name string
	var leaked *pgx.Conn
	t.Run("use", func(t *testing.T) {
		u := DatabaseURL(t)
		var err error
		leaked, err = pgx.Connect(context.Background(), u) // deliberately not closed
		if err != nil {
			t.Fatal(err)
		}
		assertMigrated(t, leaked)
		name = currentDatabase(t, leaked)
	})
	defer leaked.Close(context.Background())
	if databaseExists(t, adminConn(t), name) {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestPoolIsOnePerProcess(t *testing.T) {
	t.Parallel()
	p1, p2 := Pool(t), Pool(t)
	if p1 != p2 {
		t.Fatal("Pool returned two pools in one process")
	}
	name := currentDatabase(t, p1)
	if !strings.HasPrefix(name, dbPrefix) {
		t.Errorf("database %q lacks prefix %s", name, dbPrefix)
	}
	assertMigrated(t, p1)
	if got := p1.Config().MaxConns; got < 40 {
		t.Errorf("MaxConns = %d, want at least 40", got)
	}
}

func TestParallelUse(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			shared, fresh := Pool(t), FreshPool(t)
			ctx := context.Background()
			group := fmt.Sprintf("parallel-%d-%d", i, time.Now().UnixNano())
			var wg sync.WaitGroup
			for _, p := range []*pgxpool.Pool{shared, fresh} {
				for w := range 5 {
					wg.Go(func() {
						if _, err := p.Exec(ctx, `INSERT INTO projection_checkpoints (consumer_group) VALUES ($1)`,
							fmt.Sprintf("%s-%d", group, w)); err != nil {
							t.Error(err)
						}
					})
				}
			}
			wg.Wait()
			var n int
			if err := fresh.QueryRow(ctx, `SELECT count(*) FROM projection_checkpoints`).Scan(&n); err != nil || n != 5 {
				t.Errorf("fresh database has %d rows (%v), want 5", n, err)
			}
		})
	}
}

func TestTemplateName(t *testing.T) {
	all := []migrations.Migration{{Version: 1, Name: "a", SQL: "CREATE TABLE a ()"}}
	name := templateName(all)
	if !strings.HasPrefix(name, tmplPrefix) || len(name) > 63 {
		t.Fatalf("template name %q", name)
	}
	if templateName(all) != name {
		t.Fatal("template name is not stable")
	}
	changed := []migrations.Migration{{Version: 1, Name: "a", SQL: "CREATE TABLE a (x int)"}}
	added := append(slices.Clone(all), migrations.Migration{Version: 2, Name: "b", SQL: ""})
	if templateName(changed) == name || templateName(added) == name {
		t.Fatal("a changed migration set keeps the template name")
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p%40w@h:5432/postgres?sslmode=disable": "postgres://u:p%40w@h:5432/pf_t_1?sslmode=disable",
		"postgresql://h/other":                               "postgresql://h/pf_t_1",
		"host=h user=u dbname=postgres":                      "host=h user=u dbname=postgres dbname=pf_t_1",
	} {
		if got := withDatabase(in, "pf_t_1"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSweepDropsOldLeftovers(t *testing.T) {
	conn := adminConn(t)
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-maxAge - time.Hour).Unix()
	suffix := fmt.Sprint(now.UnixNano())
	oldDB := fmt.Sprintf("%s%d_%s", dbPrefix, old, suffix)
	newDB := fmt.Sprintf("%s%d_%s", dbPrefix, now.Unix(), suffix)
	oldTmpl := tmplPrefix + "old" + suffix
	unfinished := tmplPrefix + "unfinished" + suffix
	recentTmpl := tmplPrefix + "recent" + suffix
	for _, name := range []string{oldDB, newDB, oldTmpl, unfinished, recentTmpl} {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident(name)+` TEMPLATE template0`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+ident(name)+` WITH (FORCE)`) })
	}
	for name, used := range map[string]int64{oldTmpl: old, recentTmpl: now.Unix()} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s WITH ALLOW_CONNECTIONS false`, ident(name))); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`COMMENT ON DATABASE %s IS 'phonefleet test template, last used %d'`, ident(name), used)); err != nil {
			t.Fatal(err)
		}
	}
	// Sweep as ensureTemplate does: under the template lock.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
		t.Fatal(err)
	}
	sweep(ctx, conn, recentTmpl+"-not-this", now)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, templateLockKey); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{oldDB: false, newDB: true, oldTmpl: false, unfinished: false, recentTmpl: true} {
		if got := databaseExists(t, conn, name); got != want {
			t.Errorf("after sweep, %s exists = %v, want %v", name, got, want)
		}
	}
}

// helperEnv makes TestHelperLeaksDatabases run: it is the test process that
// dies without cleaning up, for TestReaperDropsDatabasesOfKilledProcess.
const helperEnv = "PHONEFLEET_TESTUTIL_HELPER"

func TestHelperLeaksDatabases(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper for TestReaperDropsDatabasesOfKilledProcess")
	}
	fmt.Printf("DB %s\n", currentDatabase(t, Pool(t)))
	fmt.Printf("DB %s\n", currentDatabase(t, FreshPool(t)))
	os.Stdout.Sync()
	p, _ := os.FindProcess(os.Getpid())
	p.Kill() // SIGKILL: no cleanup runs
	select {}
}

func TestReaperDropsDatabasesOfKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLeaksDatabases$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("helper was not killed: %s", out)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "DB "); ok {
			names = append(names, name)
		}
	}
	if len(names) != 2 {
		t.Fatalf("helper printed %q (stderr %s), want two databases", out, stderr.String())
	}
	conn := adminConn(t)
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for databaseExists(t, conn, name) {
			if time.Now().After(deadline) {
				t.Fatalf("database %s of the killed process was not dropped", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func TestFreshPoolCleanupSurvivesLeakedConnection(t *testing.T) {
	// Not parallel: no other test runs while poolCloseWait is changed.
	defer func(d time.Duration) { poolCloseWait = d }(poolCloseWait)
	poolCloseWait = 200 * time.Millisecond
	var name string
	t.Run("leak", func(t *testing.T) {
		pool := FreshPool(t)
		conn, err := pool.Acquire(context.Background()) // deliberately never released
		if err != nil {
			t.Fatal(err)
		}
		name = currentDatabase(t, conn)
	})
	if databaseExists(t, adminConn(t), name) {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}
