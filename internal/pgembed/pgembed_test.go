package pgembed

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// needBinaries skips the test, saying why, when there is no PostgreSQL.
func needBinaries(t *testing.T) {
	t.Helper()
	if _, err := FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries: %v", err)
	}
}

// clusterDir returns a cluster directory inside t.TempDir that the
// unprivileged server user can reach when the tests run as root
// (t.TempDir's parent is created with mode 0700).
func clusterDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(d, "pg")
}

// logBuffer is a concurrency-safe buffer for a slog text handler.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start starts a cluster and stops it when the test ends (before
// t.TempDir's removal, as cleanups run last-in first-out).
func start(t *testing.T, dir string, logs *logBuffer) *Cluster {
	t.Helper()
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, dir, logger)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", redact(dsn), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparseable DSN)"
	}
	return u.Redacted()
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestFindBinaries(t *testing.T) {
	dir, err := FindBinaries()
	if err != nil {
		if !strings.Contains(err.Error(), "apt-get install postgresql") || !strings.Contains(err.Error(), "brew install postgresql") {
			t.Errorf("error does not say what to install: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	for _, name := range binaries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("FindBinaries returned %s without %s: %v", dir, name, err)
		}
	}
	t.Logf("binaries in %s", dir)
}

func TestFindBinariesNone(t *testing.T) {
	if _, err := os.Stat("/usr/lib/postgresql"); err == nil {
		t.Skip("skipping: /usr/lib/postgresql exists, so FindBinaries cannot come up empty here")
	}
	t.Setenv("PATH", t.TempDir())
	_, err := FindBinaries()
	if err == nil || !strings.Contains(err.Error(), "install PostgreSQL server binaries: apt-get install postgresql (Debian/Ubuntu)") {
		t.Fatalf("FindBinaries with nothing installed: %v", err)
	}
}

func TestVersionLess(t *testing.T) {
	got := []string{"16", "9.6", "15", "x", "10"}
	for i := range got {
		for j := range got {
			if i != j && versionLess(got[i], got[j]) && versionLess(got[j], got[i]) {
				t.Fatalf("versionLess not antisymmetric for %s, %s", got[i], got[j])
			}
		}
	}
	if !versionLess("9.6", "10") || !versionLess("15", "16") || versionLess("16", "15") || !versionLess("x", "9.6") {
		t.Fatal("versionLess orders versions wrongly")
	}
}

func TestStartStopRestartPersists(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	logs := &logBuffer{}
	c := start(t, dir, logs)

	if !strings.Contains(logs.String(), "initialised embedded PostgreSQL at "+dir) ||
		!strings.Contains(logs.String(), "started embedded PostgreSQL at "+dir+" on port "+strconv.Itoa(c.Port())) {
		t.Errorf("log does not tell what happened:\n%s", logs)
	}

	conn := connect(t, c.DSN())
	if db := queryString(t, conn, `SELECT current_database()`); db != "phonefleet" {
		t.Errorf("DSN database = %q, want phonefleet", db)
	}
	for setting, want := range map[string]string{
		"fsync":                   "on",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"server_encoding":         "UTF8",
		"lc_collate":              "C",
		"password_encryption":     "scram-sha-256",
	} {
		if got := queryString(t, conn, "SHOW "+setting); got != want {
			t.Errorf("SHOW %s = %q, want %q", setting, got, want)
		}
	}
	if n, _ := strconv.Atoi(queryString(t, conn, "SHOW max_connections")); n < 200 {
		t.Errorf("max_connections = %d, want at least 200", n)
	}
	admin := connect(t, c.AdminDSN())
	if db := queryString(t, admin, `SELECT current_database()`); db != "postgres" {
		t.Errorf("AdminDSN database = %q, want postgres", db)
	}

	// The password is required: a wrong one is refused.
	u, _ := url.Parse(c.DSN())
	u.User = url.UserPassword("postgres", "wrong")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if bad, err := pgx.Connect(ctx, u.String()); err == nil {
		bad.Close(ctx)
		t.Error("a wrong password was accepted")
	} else if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("wrong password: %v, want invalid_password (28P01)", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "password"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("password file: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.log")); err != nil {
		t.Errorf("no server log in dir: %v", err)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('persisted')`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	admin.Close(ctx)
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := c.Stop(cancelled); err != nil {
		t.Fatalf("Stop with a cancelled context: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if !strings.Contains(logs.String(), "stopped embedded PostgreSQL at "+dir) {
		t.Errorf("log does not say it stopped:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
		t.Error("postmaster.pid still there after Stop")
	}

	logs2 := &logBuffer{}
	c2 := start(t, dir, logs2)
	if strings.Contains(logs2.String(), "initialised") {
		t.Errorf("second start ran initdb again:\n%s", logs2)
	}
	if c2.password != c.password {
		t.Error("second start changed the password")
	}
	conn2 := connect(t, c2.DSN())
	if v := queryString(t, conn2, `SELECT v FROM kept`); v != "persisted" {
		t.Errorf("after restart: %q", v)
	}
}

func TestKill9Recovery(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	c := start(t, dir, nil)
	conn := connect(t, c.DSN())
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE survived (v int); INSERT INTO survived VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	pidText, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidText), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still alive after SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err != nil {
		t.Fatalf("expected a stale postmaster.pid after kill -9: %v", err)
	}

	// Start right away: the killed postmaster's children may still be
	// exiting, and postmaster.pid is stale.
	logs := &logBuffer{}
	c2 := start(t, dir, logs)
	t.Logf("second start:\n%s", logs)
	conn2 := connect(t, c2.DSN())
	if v := queryString(t, conn2, `SELECT v::text FROM survived`); v != "42" {
		t.Errorf("after kill -9 and restart: %q", v)
	}
}

func TestStalePidFileOfOtherProcess(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	c := start(t, dir, nil)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A postmaster.pid naming a live process that is not a postmaster (this
	// test process), as after a reboot that reused the id.
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	stale := strconv.Itoa(os.Getpid()) + "\n" + filepath.Join(dir, "data") + "\n1700000000\n5999\n\n127.0.0.1\n  1234567  7\nready   \n"
	if err := os.WriteFile(pidFile, []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if c.runAs != nil {
		if err := os.Chown(pidFile, c.runAs.uid, c.runAs.gid); err != nil {
			t.Fatal(err)
		}
	}
	c2 := start(t, dir, nil)
	if c2.Port() == 5999 {
		t.Fatal("Start adopted a postmaster.pid that names another process")
	}
	connect(t, c2.DSN())
}

func TestConcurrentStartsShareOneServer(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	const n = 3
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			clusters[i], errs[i] = Start(context.Background(), dir, nil)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Start %d: %v", i, errs[i])
		}
		t.Cleanup(func() { clusters[i].Stop(context.Background()) })
	}
	for i := 1; i < n; i++ {
		if clusters[i].DSN() != clusters[0].DSN() {
			t.Errorf("concurrent Starts disagree: %s vs %s", redact(clusters[i].DSN()), redact(clusters[0].DSN()))
		}
	}
	connect(t, clusters[n-1].DSN())
}

// TestUnreachableDirAsRoot: as root, a cluster asked for below a directory
// the server's user cannot enter (a clone under /root, mode 0700) is placed
// in a directory of its own that the user can reach, linked from the
// directory asked for; the caller's directory keeps its mode, and the next
// Start finds the same cluster. Skipped unless the tests run as root (only
// root runs the server as another user).
func TestUnreachableDirAsRoot(t *testing.T) {
	needBinaries(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: only root runs the server as another user")
	}
	parent := t.TempDir() // mode 0700, owned by root
	if err := os.Chmod(filepath.Dir(parent), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	// The relocation root: reachable (t.TempDir's parent is 0755 now).
	roots := t.TempDir()
	if err := os.Chmod(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	saved := relocationRoots
	relocationRoots = func() []string { return []string{filepath.Join(roots, "system"), filepath.Join(roots, "tmp")} }
	t.Cleanup(func() { relocationRoots = saved })

	asked := filepath.Join(parent, "svc", "postgres")
	var logs logBuffer
	c := start(t, asked, &logs)
	if !strings.HasPrefix(c.Dir(), filepath.Join(roots, "system")+string(filepath.Separator)) {
		t.Fatalf("got cluster dir %s; want one under %s", c.Dir(), filepath.Join(roots, "system"))
	}
	if target, err := os.Readlink(asked); err != nil || target != c.Dir() {
		t.Fatalf("got link %q (%v); want %s linking to %s", target, err, asked, c.Dir())
	}
	if fi, err := os.Stat(parent); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("got %v (%v) for %s; want its mode left at 0700", fi.Mode(), err, parent)
	}
	if !strings.Contains(logs.String(), "placed at "+c.Dir()) {
		t.Fatalf("got log %q; want it to say where the cluster is", logs.String())
	}
	connect(t, c.DSN())
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := start(t, asked, nil)
	if again.Dir() != c.Dir() {
		t.Fatalf("second Start used %s; want the same cluster at %s", again.Dir(), c.Dir())
	}
	connect(t, again.DSN())
}

// TestRestartImmediate: Restart in immediate mode cuts open sessions, keeps
// the DSN (same port) and the committed data, and the server comes back
// through crash recovery; Restart in fast mode and Stop still work after.
func TestRestartImmediate(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	c := start(t, dir, nil)
	dsn := c.DSN()
	conn := connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := conn.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	oldPID := queryString(t, conn, `SELECT pg_backend_pid()::text`)

	if err := c.Restart(ctx, true); err != nil {
		t.Fatalf("Restart(immediate): %v", err)
	}
	if c.DSN() != dsn {
		t.Fatalf("Restart changed the DSN: %s, was %s", redact(c.DSN()), redact(dsn))
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&v); err == nil {
		t.Error("a session opened before the immediate restart still works")
	}
	if log := string(tailFile(filepath.Join(dir, "postgres.log"))); !strings.Contains(log, "automatic recovery in progress") &&
		!strings.Contains(log, "was interrupted") {
		t.Errorf("the server did not start through crash recovery; log ends:\n%s", log)
	}
	conn2 := connect(t, dsn)
	if got := queryString(t, conn2, `SELECT v::text FROM kept`); got != "7" {
		t.Errorf("after an immediate restart: %q, want 7", got)
	}
	if pid := queryString(t, conn2, `SELECT pg_backend_pid()::text`); pid == oldPID {
		t.Errorf("same backend pid %s after restart", pid)
	}

	if err := c.Restart(ctx, false); err != nil {
		t.Fatalf("Restart(fast): %v", err)
	}
	conn3 := connect(t, dsn)
	if got := queryString(t, conn3, `SELECT v::text FROM kept`); got != "7" {
		t.Errorf("after a fast restart: %q, want 7", got)
	}
	conn3.Close(ctx)
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop after Restart: %v", err)
	}
	// A stopped cluster starts again with Restart.
	if err := c.Restart(ctx, true); err != nil {
		t.Fatalf("Restart after Stop: %v", err)
	}
	connect(t, dsn)
}

// serverOf returns the postmaster running for c, failing the test when
// none runs.
func serverOf(t *testing.T, c *Cluster) postmaster {
	t.Helper()
	pm, ok := c.running()
	if !ok {
		t.Fatalf("got no server running in %s; want one", c.Dir())
	}
	return pm
}

// waitGone waits (at most a minute) until process pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after a minute", pid)
		}
	}
}

// TestLastUserStopsTheServer: two users of one cluster (as the service and
// an operator command are); the first to close leaves the server running
// for the other, whichever of them started it, and the last stops it.
func TestLastUserStopsTheServer(t *testing.T) {
	needBinaries(t)
	for _, first := range []string{"the starter", "the one that reused it"} {
		t.Run(first+" closes first", func(t *testing.T) {
			dir := clusterDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			starter := start(t, dir, nil)
			reuser := start(t, dir, nil)
			pm := serverOf(t, starter)
			if got := serverOf(t, reuser); got != pm {
				t.Fatalf("got a second server %+v; want %+v reused", got, pm)
			}
			a, b := starter, reuser
			if first != "the starter" {
				a, b = reuser, starter
			}
			if err := a.Close(ctx); err != nil {
				t.Fatalf("first Close: %v", err)
			}
			if got, ok := a.running(); !ok || got != pm {
				t.Fatalf("got server %+v (running %v) after the first user closed; want %+v left running for the other", got, ok, pm)
			}
			connect(t, b.DSN())
			if err := b.Close(ctx); err != nil {
				t.Fatalf("last Close: %v", err)
			}
			if got, ok := b.running(); ok {
				t.Fatalf("got server %+v still running after its last user closed; want it stopped", got)
			}
			if _, err := os.Stat(filepath.Join(dir, startedByFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("got %v for %s after the stop; want it removed", err, startedByFile)
			}
			if err := b.Close(ctx); err != nil {
				t.Errorf("second Close: got %v; want nil", err)
			}
		})
	}
}

// TestCloseLeavesAServerPhonefleetDidNotStart: a server started by hand
// (pg_ctl, not a phonefleet process) on the cluster's data is used and
// left running by its last phonefleet user.
func TestCloseLeavesAServerPhonefleetDidNotStart(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := start(t, dir, nil)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.command(ctx, "pg_ctl", "start", "--pgdata="+c.dataDir, "--log="+filepath.Join(dir, "by-hand.log"),
		"--wait", "--silent", "-o", "-p "+strconv.Itoa(port)).CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start by hand: %v: %s", err, out)
	}
	byHand := start(t, dir, nil) // cleanup stops it
	pm := serverOf(t, byHand)
	if byHand.Port() != port {
		t.Fatalf("got port %d; want the running server's %d reused", byHand.Port(), port)
	}
	if err := byHand.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := byHand.running(); !ok || got != pm {
		t.Fatalf("got server %+v (running %v) after Close; want the server started by hand (%+v) left running", got, ok, pm)
	}
}

// TestEnsureRunningStartsTheServerAgain: a server stopped underneath the
// process (immediate mode, as pg_ctl stop -m immediate; then fast mode) is
// started again on its port when that is free, and on another port when
// something else took it; connections through Dial follow it there, and
// a server another process started meanwhile is adopted, not doubled.
func TestEnsureRunningStartsTheServerAgain(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := start(t, dir, nil)
	cfg, err := pgx.ParseConfig(c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = c.Dial // as the service's pool has it
	query := func(t *testing.T) {
		t.Helper()
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			t.Fatalf("connect through Dial: %v", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
	}
	query(t)
	if started, err := c.EnsureRunning(ctx); err != nil || started {
		t.Fatalf("EnsureRunning on a running server: got started %v, %v; want false, nil", started, err)
	}

	kill := func(t *testing.T, sig syscall.Signal) postmaster {
		t.Helper()
		pm := serverOf(t, c)
		if err := syscall.Kill(pm.pid, sig); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pm.pid)
		return pm
	}
	t.Run("same port when free", func(t *testing.T) {
		old := kill(t, syscall.SIGQUIT)
		if started, err := c.EnsureRunning(ctx); err != nil || !started {
			t.Fatalf("EnsureRunning after an immediate stop: got started %v, %v; want true, nil", started, err)
		}
		if pm := serverOf(t, c); pm.port != old.port || pm.pid == old.pid {
			t.Fatalf("got server %+v; want a new one on the old port %d", pm, old.port)
		}
		if b, err := os.ReadFile(filepath.Join(dir, startedByFile)); err != nil || string(b) != serverOf(t, c).identity() {
			t.Fatalf("got %s = %q (%v); want the new server recorded", startedByFile, b, err)
		}
		query(t)
	})
	t.Run("another port when the old one is taken", func(t *testing.T) {
		old := kill(t, syscall.SIGINT)
		squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(old.port)))
		if err != nil {
			t.Fatalf("take the old port: %v", err)
		}
		defer squatter.Close()
		if started, err := c.EnsureRunning(ctx); err != nil || !started {
			t.Fatalf("EnsureRunning with the port taken: got started %v, %v; want true, nil", started, err)
		}
		if pm := serverOf(t, c); pm.port == old.port || c.Port() != pm.port {
			t.Fatalf("got server %+v and Port %d; want both on a port other than %d", pm, c.Port(), old.port)
		}
		query(t)
	})
	outer := t // the other servers' cleanups belong to the whole test
	t.Run("adopted when another process started it", func(t *testing.T) {
		kill(t, syscall.SIGQUIT)
		other := start(outer, dir, nil) // as another process's Start would
		if started, err := c.EnsureRunning(ctx); err != nil || started {
			t.Fatalf("EnsureRunning with a server running: got started %v, %v; want false, nil", started, err)
		}
		if c.Port() != other.Port() {
			t.Fatalf("got port %d; want the running server's %d", c.Port(), other.Port())
		}
		query(t)
	})
	t.Run("followed by Dial alone", func(t *testing.T) {
		kill(t, syscall.SIGQUIT)
		other := start(outer, dir, nil)
		if other.Port() == c.Port() {
			t.Skipf("skipping: the new server took the old port %d again", other.Port())
		}
		query(t) // Dial reads the port from postmaster.pid
		if c.Port() != other.Port() {
			t.Fatalf("got port %d; want the running server's %d", c.Port(), other.Port())
		}
	})
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if started, err := c.EnsureRunning(ctx); err != nil || started {
		t.Fatalf("EnsureRunning after Close: got started %v, %v; want false, nil", started, err)
	}
}

// TestWatchStartsTheServerAgain: Watch notices a server killed underneath
// the process and starts it again, until its context ends.
func TestWatchStartsTheServerAgain(t *testing.T) {
	needBinaries(t)
	dir := clusterDir(t)
	c := start(t, dir, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Watch(ctx, 50*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	old := serverOf(t, c)
	if err := syscall.Kill(old.pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old.pid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if pm, ok := c.running(); ok && pm.pid != old.pid {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			conn, err := pgx.Connect(cctx, c.DSN())
			ccancel()
			if err == nil {
				conn.Close(ctx)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the server was not started again within a minute")
		}
	}
}
