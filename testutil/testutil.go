// Package testutil gives every test package in phonefleet a migrated
// PostgreSQL database.
//
// # Which server
//
// The server is chosen once per test process, in this order:
//
//  1. PHONEFLEET_TEST_PG=embedded forces the throwaway cluster (step 5).
//  2. TEST_DATABASE_URL, when set.
//  3. DATABASE_URL, when set.
//  4. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable, when it
//     accepts a connection within about a second.
//  5. A throwaway cluster started with pgembed in
//     $TMPDIR/phonefleet-test-pg-<uid>. It is shared by every test process of
//     that user (pgembed serialises their starts), so there is only ever one
//     such cluster per user. Test processes never stop it (another may be
//     using it); `make test` does, through scripts/run-tests.sh: when the
//     cluster was not running as the run began, the script stops it once
//     the tests end (unless another `make test` still uses it). A cluster
//     left by plain `go test` keeps running, and the next run starts in
//     milliseconds; stop it with
//     `pg_ctl stop -D $TMPDIR/phonefleet-test-pg-<uid>/data` (as user postgres
//     when root started it) and remove the directory to reclaim the space.
//
// An explicitly configured server (TEST_DATABASE_URL, DATABASE_URL) that does
// not answer fails the tests instead of falling back. The database named in
// such a URL is only used to issue CREATE DATABASE and DROP DATABASE.
//
// # Databases
//
// Test databases are named pf_t_<unix seconds>_<random hex> and are cloned
// (CREATE DATABASE ... TEMPLATE) from a template database that holds every
// migration, which is much faster than migrating each one. The template is
// named pf_tmpl_<hash of the migration files>, so a changed migration set
// gets a new template; it is built under a PostgreSQL advisory lock, because
// `go test ./...` runs test processes in parallel, and is marked complete by
// refusing connections (datallowconn = false), which also keeps it clonable.
// While holding that lock the first process also drops pf_t_ databases older
// than a day and templates unused for a day, so nothing accumulates.
//
// FreshPool and DatabaseURL databases are dropped (WITH (FORCE)) at
// t.Cleanup. The per-process database of Pool, and any database a crashed
// or killed test process could not drop, is dropped by a small reaper
// process: a copy of the test binary started with its standard input
// connected to a pipe from the test process. When the test process ends in
// any way, even by SIGKILL, the pipe closes and the reaper drops the
// databases the test process still had.
package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
	"phonefleet/internal/pgembed"
	"phonefleet/migrations"
)

const (
	envTestURL = "TEST_DATABASE_URL"
	envURL     = "DATABASE_URL"
	// envMode set to "embedded" forces the throwaway cluster.
	envMode = "PHONEFLEET_TEST_PG"
	// localURL is the conventional local development server.
	localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	dbPrefix   = "pf_t_"
	tmplPrefix = "pf_tmpl_"
	// maxAge is how old a leftover database or unused template must be
	// before another test process drops it.
	maxAge = 24 * time.Hour
	// templateLockKey is the advisory lock taken while a template is checked,
	// built, and old databases are swept (the migration runner uses ...001).
	templateLockKey int64 = 7_305_149_002
	// poolMaxConns is the size of every pool handed to tests.
	poolMaxConns = 40
	// setupTimeout bounds server choice, template build and database creation.
	setupTimeout = 2 * time.Minute
)

// poolCloseWait is how long a FreshPool cleanup waits for connections the
// test still holds.
var poolCloseWait = 5 * time.Second

// server is the process-wide choice of server.
type server struct {
	url    string // maintenance URL (CREATE/DROP DATABASE)
	source string // how url was chosen
	admin  *pgxpool.Pool
	reaper *reaper
	logs   string // what pgembed said, if it ran
}

// once memoises a setup step, error included, without holding a sync.Once
// across t.Fatal.
type once[T any] struct {
	mu     sync.Mutex
	done   bool
	val    T
	err    error
	logged bool
}

func (o *once[T]) get(f func() (T, error)) (val T, first bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		o.val, o.err = f()
		o.done = true
	}
	first = !o.logged
	o.logged = true
	return o.val, first, o.err
}

var (
	theServer   once[*server]
	theTemplate once[string]
	thePool     once[*pgxpool.Pool]
)

// ServerURL returns the URL of the server tests use (database "postgres",
// or the database named in TEST_DATABASE_URL or DATABASE_URL) and how it was
// chosen, for example "local server at 127.0.0.1:5432". The choice is made
// once per test process; see the package documentation for the order.
func ServerURL(t testing.TB) (serverURL, source string) {
	t.Helper()
	s := mustServer(t)
	return s.url, s.source
}

// Pool returns a pgx pool on a fresh database for the calling test binary
// (one database per test package process, created once, migrated with
// migrations.Apply). Safe for t.Parallel. The pool is shared: do not Close
// it. The database is dropped by the reaper when the process ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	s := mustServer(t)
	tmpl := mustTemplate(t)
	pool, _, err := thePool.get(func() (*pgxpool.Pool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		name, err := s.createDatabase(ctx, tmpl)
		if err != nil {
			return nil, err
		}
		return openPool(ctx, s.databaseURL(name))
	})
	if err != nil {
		t.Fatalf("testutil: per-process database: %v", err)
	}
	return pool
}

// FreshPool returns a pool on a brand-new migrated database just for this
// test; the pool is closed and the database dropped at t.Cleanup.
func FreshPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := DatabaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	pool, err := openPool(ctx, dbURL)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	// Registered after DatabaseURL's drop, so it runs before it. Close waits
	// for acquired connections; one a test never released must not hang the
	// test binary, and the drop WITH (FORCE) ends its session anyway.
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(poolCloseWait):
			t.Logf("testutil: a pool connection was never released; dropping the database anyway")
		}
	})
	return pool
}

// DatabaseURL is like FreshPool but returns the URL of the new database
// (for starting the real program). The database is dropped WITH (FORCE) at
// t.Cleanup, ending any sessions still connected to it.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	s := mustServer(t)
	tmpl := mustTemplate(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	name, err := s.createDatabase(ctx, tmpl)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.dropDatabase(ctx, name); err != nil {
			// The reaper still has it and drops it when the process ends.
			t.Logf("testutil: drop database %s: %v", name, err)
		}
	})
	return s.databaseURL(name)
}

func mustServer(t testing.TB) *server {
	t.Helper()
	s, first, err := theServer.get(chooseServer)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	if first {
		t.Logf("testutil: PostgreSQL for tests: %s", s.source)
		if s.logs != "" {
			t.Logf("testutil: %s", s.logs)
		}
	}
	return s
}

func mustTemplate(t testing.TB) string {
	t.Helper()
	s := mustServer(t)
	name, _, err := theTemplate.get(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		return s.ensureTemplate(ctx)
	})
	if err != nil {
		t.Fatalf("testutil: template database: %v", err)
	}
	return name
}

// chooseServer picks the server (see the package documentation) and opens
// the maintenance pool on it.
func chooseServer() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s := &server{}
	switch mode := os.Getenv(envMode); mode {
	case "embedded":
		if err := s.embedded(ctx, envMode+"=embedded"); err != nil {
			return nil, err
		}
	case "":
		switch {
		case os.Getenv(envTestURL) != "":
			s.url, s.source = os.Getenv(envTestURL), envTestURL
		case os.Getenv(envURL) != "":
			s.url, s.source = os.Getenv(envURL), envURL
		default:
			probeErr := probe(ctx, localURL, time.Second)
			if probeErr == nil {
				s.url, s.source = localURL, "local server at 127.0.0.1:5432"
			} else if err := s.embedded(ctx, "127.0.0.1:5432 did not answer: "+probeErr.Error()); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%s=%q: the only value is \"embedded\" (or leave it unset)", envMode, mode)
	}
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		return nil, fmt.Errorf("server URL from %s: %w", s.source, err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = appName() + " (testutil)"
	s.admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = s.admin.Ping(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL from %s does not answer: %w", s.source, err)
	}
	s.reaper = startReaper(s.url)
	return s, nil
}

// embedded starts (or joins) the shared throwaway cluster of this user.
func (s *server) embedded(ctx context.Context, why string) error {
	dir := filepath.Join(os.TempDir(), "phonefleet-test-pg-"+strconv.Itoa(os.Getuid()))
	if err := checkSharedDir(dir); err != nil {
		return err
	}
	var logs bytes.Buffer
	c, err := pgembed.Start(ctx, dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		return fmt.Errorf("no PostgreSQL for tests (%s), and the throwaway cluster in %s did not start: %w; "+
			"or set TEST_DATABASE_URL", why, dir, err)
	}
	// Never stopped: see the package documentation.
	s.url = c.AdminDSN()
	s.source = "throwaway cluster in " + dir + " (" + why + ")"
	s.logs = strings.TrimSpace(logs.String())
	return nil
}

// probe reports whether url accepts a connection within timeout.
func probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// templateName names the template after a hash of every migration.
func templateName(all []migrations.Migration) string {
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\x00%s\x00%d\x00%s\x00", m.Version, m.Name, len(m.SQL), m.SQL)
	}
	return tmplPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// ensureTemplate returns the name of the migrated template for the current
// migrations, building it if no process has yet.
func (s *server) ensureTemplate(ctx context.Context) (string, error) {
	all, err := migrations.All()
	if err != nil {
		return "", err
	}
	name := templateName(all)
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
		return "", fmt.Errorf("advisory lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, templateLockKey)

	sweep(ctx, conn.Conn(), name, time.Now())

	var allowConn bool
	err = conn.QueryRow(ctx, `SELECT datallowconn FROM pg_database WHERE datname = $1`, name).Scan(&allowConn)
	switch {
	case err == nil && !allowConn:
		// Complete.
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		if err == nil { // a build that did not finish
			if _, err := conn.Exec(ctx, `DROP DATABASE `+ident(name)+` WITH (FORCE)`); err != nil {
				return "", fmt.Errorf("drop unfinished template %s: %w", name, err)
			}
		}
		if err := s.buildTemplate(ctx, conn.Conn(), name); err != nil {
			return "", err
		}
	default:
		return "", err
	}
	// Record the use, so that sweeps keep templates in use.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`COMMENT ON DATABASE %s IS 'phonefleet test template, last used %d'`,
		ident(name), time.Now().Unix())); err != nil {
		return "", fmt.Errorf("mark template %s used: %w", name, err)
	}
	return name, nil
}

// buildTemplate creates and migrates the template, then closes it to
// connections, which marks it complete.
func (s *server) buildTemplate(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident(name)+
		` TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'`); err != nil {
		return fmt.Errorf("create template %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(s.databaseURL(name))
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	_, err = migrations.Apply(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(name)+` WITH ALLOW_CONNECTIONS false`); err != nil {
		return fmt.Errorf("close template %s: %w", name, err)
	}
	return nil
}

// sweep drops, as best it can, test databases older than maxAge, templates
// other than keep unused for maxAge, and unfinished templates. It runs
// under the template lock, so no template is being built meanwhile. Test
// databases are dropped without FORCE: one still in use stays.
func sweep(ctx context.Context, conn *pgx.Conn, keep string, now time.Time) {
	rows, err := conn.Query(ctx, `SELECT datname, datallowconn, coalesce(shobj_description(oid, 'pg_database'), '')
		FROM pg_database WHERE datname LIKE 'pf\_t\_%' OR datname LIKE 'pf\_tmpl\_%'`)
	if err != nil {
		return
	}
	type db struct {
		name      string
		allowConn bool
		comment   string
	}
	dbs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (db, error) {
		var d db
		return d, r.Scan(&d.name, &d.allowConn, &d.comment)
	})
	if err != nil {
		return
	}
	for _, d := range dbs {
		drop := ""
		switch {
		case strings.HasPrefix(d.name, dbPrefix):
			if created, ok := createdAt(d.name); ok && now.Sub(created) > maxAge {
				drop = `DROP DATABASE IF EXISTS ` + ident(d.name)
			}
		case d.name == keep:
		case d.allowConn:
			drop = `DROP DATABASE IF EXISTS ` + ident(d.name) + ` WITH (FORCE)`
		default:
			if used, ok := lastUsed(d.comment); !ok || now.Sub(used) > maxAge {
				drop = `DROP DATABASE IF EXISTS ` + ident(d.name)
			}
		}
		if drop != "" {
			_, _ = conn.Exec(ctx, drop)
		}
	}
}

// createdAt reads the creation time from a test database's name.
func createdAt(name string) (time.Time, bool) {
	ts, _, ok := strings.Cut(strings.TrimPrefix(name, dbPrefix), "_")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// lastUsed reads the last use from a template's comment.
func lastUsed(comment string) (time.Time, bool) {
	_, ts, ok := strings.Cut(comment, "last used ")
	sec, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// createDatabase clones a new test database from the template.
func (s *server) createDatabase(ctx context.Context, tmpl string) (string, error) {
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s%d_%s", dbPrefix, time.Now().Unix(), hex.EncodeToString(r[:]))
	s.reaper.add(name)
	if _, err := s.admin.Exec(ctx, `CREATE DATABASE `+ident(name)+` TEMPLATE `+ident(tmpl)); err != nil {
		s.reaper.remove(name)
		return "", fmt.Errorf("create database %s from %s: %w", name, tmpl, err)
	}
	return name, nil
}

// dropDatabase drops a test database, ending its sessions.
func (s *server) dropDatabase(ctx context.Context, name string) error {
	if _, err := s.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident(name)+` WITH (FORCE)`); err != nil {
		return err
	}
	s.reaper.remove(name)
	return nil
}

// databaseURL is the server URL with its database replaced by name.
func (s *server) databaseURL(name string) string { return withDatabase(s.url, name) }

// withDatabase replaces the database of a postgres:// URL or a keyword/value
// connection string (where a later dbname wins).
func withDatabase(serverURL, name string) string {
	if strings.HasPrefix(serverURL, "postgres://") || strings.HasPrefix(serverURL, "postgresql://") {
		if u, err := url.Parse(serverURL); err == nil {
			u.Path, u.RawPath = "/"+name, ""
			return u.String()
		}
	}
	return serverURL + " dbname=" + name
}

// openPool opens a pool sized for tests with many concurrent writers. Idle
// connections are closed after a few seconds, because many test processes
// share one server's max_connections.
func openPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = poolMaxConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = 5 * time.Second
	cfg.HealthCheckPeriod = 2 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = appName()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// appName names the test binary in pg_stat_activity.
func appName() string {
	name := filepath.Base(os.Args[0])
	if len(name) > 50 {
		name = name[:50]
	}
	return name
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// Context returns a context carrying event metadata, as an edge puts it
// before it runs a command: the test is the actor and the request.
func Context(t testing.TB) context.Context {
	return eventstore.WithMetadata(context.Background(), eventstore.Metadata{ActorKind: "system", ActorID: "test",
		RequestID: "req_test_" + strings.ReplaceAll(t.Name(), "/", "_")})
}

// Background is Context for a test package's shared helpers, which no one
// test owns.
var Background = eventstore.WithMetadata(context.Background(), eventstore.Metadata{ActorKind: "system", ActorID: "test",
	RequestID: "req_test"})

// SmallPool opens a pool of at most maxConns connections on a brand-new
// migrated database of its own, closed at t.Cleanup: the test server's
// connections are shared by every package's tests running at once.
func SmallPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.MaxConnIdleTime = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// SyncBuffer is a buffer that goroutines may write to at once, such as a
// service's log handler while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Clock is a settable clock for tests that must not wait for wall time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (back, when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set stops the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
