// Package pgembed runs a private PostgreSQL cluster for phonefleet when
// DATABASE_URL is unset, using the machine's own PostgreSQL server binaries
// (initdb, pg_ctl and postgres).
//
// Layout of the cluster directory dir (for the service,
// <SERVICE_DATA_DIR>/postgres):
//
//	dir/data            the PostgreSQL data directory
//	dir/data/phonefleet.conf  settings owned by phonefleet, rewritten at every start
//	dir/password        the superuser password (mode 0600)
//	dir/postgres.log    the server log (moved to postgres.log.1 at start once it passes 16 MiB)
//	dir/start.lock      serialises Start, Close and restarts between processes
//	dir/users.lock      held shared by every process that uses the cluster (see Lifetime)
//	dir/started-by-phonefleet  the server (postmaster pid and start time) a phonefleet process started
//
// Network: the server listens on 127.0.0.1 only, on a free TCP port chosen
// at each start (Restart keeps it), and on no Unix socket. TCP was chosen
// over a socket inside dir because socket paths are limited to about 100
// bytes (data directories can be deep) and because every client, including
// ones in other containers of the same network namespace, reaches a
// loopback port the same way.
//
// Authentication: every connection uses scram-sha-256 as the superuser
// "postgres" with a random password generated at initdb time; nothing is
// trusted, because loopback is shared by every user of the machine.
//
// Root: PostgreSQL refuses to run as root. When this process runs as root,
// initdb, pg_ctl and postgres run as the system user "postgres" (or "nobody"
// when there is no such user), and dir is owned by that user. That user must
// be able to enter every parent of the cluster's directory. When it cannot
// enter one of dir's (a clone under /root, mode 0700), the cluster is placed
// in a directory of its own under /var/lib/phonefleet (else
// $TMPDIR/phonefleet-postgres), named after a hash of dir so the same dir
// always finds it again; dir becomes a symbolic link to it when dir is free,
// and Start logs where it is. The caller's directories keep their modes.
//
// Lifetime: pg_ctl starts the server in a session of its own, so the server
// outlives the process that started it unless someone stops it. A later
// Start on the same dir finds the running server and reuses it; a server
// that died (even by SIGKILL) is recovered by the next Start.
//
// Who stops it: the last phonefleet process out, and only a server a
// phonefleet process started. From Start to Close a process is a user of
// the cluster: it holds a shared flock on dir/users.lock, which the kernel
// also drops when the process dies, however it dies. When Start has to
// start the server, it records that server (its postmaster's pid and start
// time) in dir/started-by-phonefleet. Close gives the use up under
// start.lock and stops the server only when no other process holds
// users.lock (an exclusive flock on it succeeds) and the server running is
// the one recorded: a server someone started by hand (pg_ctl) is never
// stopped, nor one another process still uses. Start takes its shared lock
// under start.lock too, so a new user never races a closing one: it
// attaches either before the closer looks (and the server stays) or after
// the server stopped (and starts it again). A process killed by SIGKILL
// cannot close; its lock goes with it, and the next process that uses the
// cluster stops the server when it closes. Stop stops the server whoever
// uses it (throwaway clusters, tests).
//
// A long-lived user (the service) keeps the server running with Watch,
// which starts it again when it stops underneath the process, on its last
// port when that is free and on a new one otherwise; connections made
// through Dial reach the server wherever it listens now.
package pgembed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// databaseName is the application database created by Start.
	databaseName = "phonefleet"
	// superuser is the cluster's superuser role.
	superuser = "postgres"
	// readyTimeout bounds how long Start waits for the server to accept
	// connections.
	readyTimeout = 30 * time.Second
	// startAttempts is how often Start tries pg_ctl start (a new port each
	// time) before giving up.
	startAttempts = 5
	// maxLogSize is the size beyond which postgres.log is rotated at start.
	maxLogSize = 16 << 20
	// startLockFile serialises Start, Close and restarts between processes.
	startLockFile = "start.lock"
	// usersFile is held with a shared flock by every process using the
	// cluster.
	usersFile = "users.lock"
	// startedByFile records the server a phonefleet process started.
	startedByFile = "started-by-phonefleet"
)

// serverSettings are written to data/phonefleet.conf at every start. The
// port is given on the command line instead, because it changes per start.
// Local changes belong in postgresql.auto.conf (ALTER SYSTEM), which wins.
const serverSettings = `# Written by phonefleet at every start; edits here are overwritten.
# Use ALTER SYSTEM (postgresql.auto.conf) for local changes.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
password_encryption = 'scram-sha-256'
fsync = on
synchronous_commit = on
full_page_writes = on
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%u@%d '
`

// binaries are the server programs Start needs, all from one directory.
var binaries = []string{"initdb", "pg_ctl", "postgres"}

// FindBinaries locates initdb, pg_ctl and postgres: first on PATH (following
// symbolic links to the directory that holds all three), then in the newest
// /usr/lib/postgresql/*/bin. It returns the directory holding all three.
// When there are none it returns an error whose message says exactly what to
// install.
func FindBinaries() (binDir string, err error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		var candidates []string
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, filepath.Dir(p))
		for _, dir := range candidates {
			if hasBinaries(dir) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(dirs[j])), filepath.Base(filepath.Dir(dirs[i])))
	})
	for _, dir := range dirs {
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in /usr/lib/postgresql/*/bin; " +
		"install PostgreSQL server binaries: apt-get install postgresql (Debian/Ubuntu), dnf install postgresql-server (Fedora/RHEL), " +
		"brew install postgresql (macOS); or set DATABASE_URL to use an existing server")
}

// hasBinaries reports whether dir holds every program in binaries as an
// executable file.
func hasBinaries(dir string) bool {
	for _, name := range binaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionLess orders PostgreSQL major versions such as "9.6", "15" and "16"
// numerically; names that are not versions sort first.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int = -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				x = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				y = n
			}
		}
		if x != y {
			return x < y
		}
	}
	return a < b
}

// Cluster is a running embedded PostgreSQL server as one process uses it.
// Its methods are safe for concurrent use.
type Cluster struct {
	dir      string
	dataDir  string
	binDir   string
	password string
	runAs    *osUser
	logger   *slog.Logger
	// port is where the server listens now: set at start, and followed when
	// the server is started again elsewhere (Watch, EnsureRunning, Dial).
	port atomic.Int64

	mu sync.Mutex
	// users is this Cluster's shared flock on users.lock; nil once Close or
	// Stop gave the use up.
	users *os.File
	// stopped is set by Stop and cleared by Restart.
	stopped bool
	// closed is set by Close: the process no longer uses the cluster, and
	// nothing starts it again through this value.
	closed bool
}

// Dir returns the directory the cluster lives in: the one given to Start,
// or, when the server's user could not reach it, where Start placed it.
func (c *Cluster) Dir() string { return c.dir }

// Start initialises (initdb on first use) and starts the cluster under dir,
// listening on 127.0.0.1 at a free TCP port chosen at each start and on no
// Unix socket. A second Start on the same dir reuses the data; when the
// server of a previous Start is still running, Start reuses it instead of
// starting another one. Start serialises with other Start calls on the same
// dir, also across processes. It waits until the server accepts connections
// (about 30 s at most), creates the database "phonefleet" if missing, and
// returns. A nil logger discards the progress messages.
//
// The process is a user of the cluster until Close (see the package
// documentation): call Close when done, so that the last user stops a
// server phonefleet started. Start failing gives the use up as Close does.
func Start(ctx context.Context, dir string, logger *slog.Logger) (*Cluster, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := platformSupported(); err != nil {
		return nil, err
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	runAs, err := serverUser()
	if err != nil {
		return nil, err
	}
	if runAs != nil {
		if dir, err = reachableDir(dir, runAs, logger); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: create %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("embedded PostgreSQL: create %s: %w", dir, err)
	}
	if runAs != nil {
		if err := checkSearchable(dir, runAs); err != nil {
			return nil, err
		}
		if err := chownTree(dir, runAs); err != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: give %s to user %s: %w", dir, runAs.name, err)
		}
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, startLockFile))
	if err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: lock %s: %w", dir, err)
	}
	defer unlock()

	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		binDir:  binDir,
		runAs:   runAs,
		logger:  logger,
	}
	if c.users, err = lockShared(ctx, filepath.Join(dir, usersFile)); err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: lock %s: %w", filepath.Join(dir, usersFile), err)
	}
	if err := c.attach(ctx); err != nil {
		// This process may have started the server: give the use up as
		// Close does (start.lock is held already), so a failed Start
		// leaves no server of its own behind.
		cctx, cancel := closeContext(ctx)
		if rerr := c.releaseLocked(cctx); rerr != nil {
			logger.Warn("embedded PostgreSQL: giving the cluster up after a failed start", "dir", dir, "err", rerr)
		}
		cancel()
		c.closed = true
		return nil, err
	}
	return c, nil
}

// attach brings the cluster up for Start, under start.lock: initdb on first
// use, the settings file, the server (reused, or started and recorded), the
// wait for connections and the database.
func (c *Cluster) attach(ctx context.Context) error {
	if err := c.initialise(ctx); err != nil {
		return err
	}
	if err := c.writeFile(filepath.Join(c.dataDir, "phonefleet.conf"), []byte(serverSettings)); err != nil {
		return err
	}
	if pm, ok := c.running(); ok {
		c.port.Store(int64(pm.port))
		c.logger.Info("embedded PostgreSQL already running; reusing it", "dir", c.dir, "pid", pm.pid, "port", pm.port)
	} else if err := c.start(ctx, 0); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	return c.ensureDatabase(ctx)
}

// closeContext returns a context for giving the cluster up at the end of a
// program: ctx itself while it is live, otherwise (a signal cancelled it)
// one that still allows a minute.
func closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
}

// initialise runs initdb when dir holds no cluster yet, and loads the
// password otherwise. initdb runs into data.init, which is renamed to data
// only once complete, so a crash half-way never leaves a cluster that looks
// usable.
func (c *Cluster) initialise(ctx context.Context) error {
	pwFile := filepath.Join(c.dir, "password")
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		pw, err := os.ReadFile(pwFile)
		if err != nil {
			return fmt.Errorf("embedded PostgreSQL at %s: read password: %w (remove %s to start from scratch)", c.dir, err, c.dir)
		}
		c.password = strings.TrimSpace(string(pw))
		if c.password == "" {
			return fmt.Errorf("embedded PostgreSQL at %s: %s is empty (remove %s to start from scratch)", c.dir, pwFile, c.dir)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("embedded PostgreSQL at %s: %w", c.dir, err)
	}

	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return err
	}
	c.password = hex.EncodeToString(raw[:])
	if err := c.writeFile(pwFile, []byte(c.password+"\n")); err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, "data.init")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("embedded PostgreSQL: remove %s: %w", tmp, err)
	}
	out, err := c.command(ctx, "initdb",
		"--pgdata="+tmp,
		"--username="+superuser,
		"--pwfile="+pwFile,
		"--auth=scram-sha-256",
		"--encoding=UTF8",
		"--locale=C",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: initdb in %s failed: %v: %s", tmp, err, lastLines(out, 10))
	}
	conf, err := os.OpenFile(filepath.Join(tmp, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	_, err = conf.WriteString("\n# phonefleet: settings managed by phonefleet\ninclude_if_exists = 'phonefleet.conf'\n")
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	if err := os.Rename(tmp, c.dataDir); err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	c.logger.Info("initialised embedded PostgreSQL at "+c.dir, "dir", c.dir, "binaries", c.binDir)
	return nil
}

// postmaster is a server as data/postmaster.pid describes it.
type postmaster struct {
	pid  int
	port int
	// startedAt is the server's start time as postmaster.pid writes it (Unix
	// seconds): with pid, it tells one server from a later one.
	startedAt string
}

// identity names the server in the started-by-phonefleet file.
func (pm postmaster) identity() string { return strconv.Itoa(pm.pid) + " " + pm.startedAt + "\n" }

// running reports whether the postmaster named in data/postmaster.pid is
// alive, and which it is. A postmaster.pid whose process is gone is left
// for PostgreSQL to clean up (it also guards against orphaned backends of
// a killed postmaster); one whose PID now belongs to some other process is
// removed.
func (c *Cluster) running() (postmaster, bool) {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return postmaster{}, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return postmaster{}, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 {
		return postmaster{}, false
	}
	if !processAlive(pid) {
		return postmaster{}, false
	}
	if ours, known := isPostmasterOf(pid, c.dataDir); known && !ours {
		c.logger.Warn("removing stale postmaster.pid: its process id now belongs to another program", "pid", pid, "file", pidFile)
		_ = os.Remove(pidFile)
		return postmaster{}, false
	}
	return postmaster{pid: pid, port: port, startedAt: strings.TrimSpace(lines[2])}, true
}

// record notes in started-by-phonefleet that this process started the
// server now running; startedByPhonefleet later tells it from any other.
func (c *Cluster) record() {
	pm, ok := c.running()
	if !ok {
		return
	}
	if err := c.writeFile(filepath.Join(c.dir, startedByFile), []byte(pm.identity())); err != nil {
		c.logger.Warn("embedded PostgreSQL: cannot record that phonefleet started the server; the last user will leave it running", "err", err)
	}
}

// startedByPhonefleet reports whether pm is the server a phonefleet process
// started, as started-by-phonefleet records it.
func (c *Cluster) startedByPhonefleet(pm postmaster) bool {
	b, err := os.ReadFile(filepath.Join(c.dir, startedByFile))
	return err == nil && string(b) == pm.identity()
}

// start runs pg_ctl start on fixedPort, or on a fresh free port at each
// attempt when fixedPort is 0, retrying a few times: the port can be taken
// between choosing and binding it, and after a crash the old postmaster's
// children can hold the shared memory for a moment.
func (c *Cluster) start(ctx context.Context, fixedPort int) error {
	logFile := filepath.Join(c.dir, "postgres.log")
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if fi, err := os.Stat(logFile); err == nil && fi.Size() > maxLogSize {
			_ = os.Rename(logFile, logFile+".1")
		}
		port := fixedPort
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return fmt.Errorf("embedded PostgreSQL: choose a port: %w", err)
			}
		}
		// pg_ctl start is not cut short by ctx (a signal to the program):
		// killed half-way, it could leave a server running that nobody
		// recorded. --timeout bounds it.
		out, err := c.command(context.WithoutCancel(ctx), "pg_ctl", "start",
			"--pgdata="+c.dataDir,
			"--log="+logFile,
			"--wait",
			"--timeout="+strconv.Itoa(int(readyTimeout/time.Second)),
			"--silent",
			"-o", "-p "+strconv.Itoa(port),
		).CombinedOutput()
		if err == nil {
			c.port.Store(int64(port))
			c.record()
			c.logger.Info(fmt.Sprintf("started embedded PostgreSQL at %s on port %d", c.dir, port), "dir", c.dir, "port", port, "log", logFile)
			return nil
		}
		lastErr = fmt.Errorf("embedded PostgreSQL: pg_ctl start failed: %v: %s; last lines of %s: %s",
			err, lastLines(out, 5), logFile, lastLines(tailFile(logFile), 5))
		if ctx.Err() != nil {
			break
		}
		c.logger.Debug("pg_ctl start failed; retrying", "attempt", attempt, "err", lastErr)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 400 * time.Millisecond):
		}
	}
	return lastErr
}

// waitReady waits until the server accepts an authenticated connection.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		conn, err := c.connect(ctx, c.AdminDSN())
		if err == nil {
			return conn.Close(ctx)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("embedded PostgreSQL at %s does not accept connections on port %d: %w (see %s)",
				c.dir, c.Port(), err, filepath.Join(c.dir, "postgres.log"))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ensureDatabase creates the application database if it is missing.
func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := c.connect(ctx, c.AdminDSN())
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, databaseName).Scan(&exists); err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{databaseName}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		err = nil
	}
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: create database %s: %w", databaseName, err)
	}
	c.logger.Info("created database "+databaseName+" in embedded PostgreSQL", "dir", c.dir)
	return nil
}

// connect opens one connection with a short per-attempt timeout.
func (c *Cluster) connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(ctx, dsn)
}

// DSN returns the postgres:// URL of the database "phonefleet", with the
// superuser's password, on the port the server listens on now. A client
// that keeps its configuration across restarts should dial through Dial.
func (c *Cluster) DSN() string { return c.url(databaseName) }

// AdminDSN returns the postgres:// URL of the same server's maintenance
// database "postgres", with the superuser's password.
func (c *Cluster) AdminDSN() string { return c.url("postgres") }

// Port returns the TCP port the server listens on, as last seen.
func (c *Cluster) Port() int { return int(c.port.Load()) }

// Addr returns the server's address, 127.0.0.1:Port.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())) }

func (c *Cluster) url(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, c.password),
		Host:     c.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Dial connects to the server wherever it listens now, whatever address it
// is given: set it as pgconn.Config.DialFunc, so that a pool made from DSN
// (and every connection made from a copy of its configuration) follows the
// server when it is started again on another port. It reads the port from
// the server's postmaster.pid at each dial, and refuses at once while no
// server runs, so a connection never lands on whatever took the old port
// meanwhile.
func (c *Cluster) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	pm, ok := c.running()
	if !ok {
		return nil, fmt.Errorf("embedded PostgreSQL at %s is not running", c.dir)
	}
	c.follow(pm)
	d := net.Dialer{KeepAlive: 5 * time.Minute}
	return d.DialContext(ctx, "tcp", c.Addr())
}

// follow adopts the port of pm, a server another process (or this one)
// started since the port was last seen.
func (c *Cluster) follow(pm postmaster) {
	if old := c.port.Swap(int64(pm.port)); old != int64(pm.port) {
		c.logger.Info(fmt.Sprintf("embedded PostgreSQL at %s now listens on port %d", c.dir, pm.port),
			"dir", c.dir, "pid", pm.pid, "port", pm.port, "was", old)
	}
}

// Close ends this process's use of the cluster and stops the server when
// this was its last user and a phonefleet process started it (see the
// package documentation); otherwise the server is left running for the
// others, or for whoever started it. It is safe to call more than once.
// ctx bounds the wait; a ctx that is already done (as at the end of a
// signal-cancelled program) still closes, waiting up to a minute.
func (c *Cluster) Close(ctx context.Context) error {
	if c == nil {
		return nil
	}
	ctx, cancel := closeContext(ctx)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.users == nil {
		return nil
	}
	unlock, err := lockFile(ctx, filepath.Join(c.dir, startLockFile))
	if err != nil {
		c.dropUse()
		return fmt.Errorf("embedded PostgreSQL: lock %s: %w (the server is left running)", c.dir, err)
	}
	defer unlock()
	return c.releaseLocked(ctx)
}

// releaseLocked gives this process's use up, under start.lock, and stops
// the server when nobody else uses it and phonefleet started it.
func (c *Cluster) releaseLocked(ctx context.Context) error {
	f := c.users
	if f == nil {
		return nil
	}
	// Converting the shared lock to an exclusive one succeeds only when no
	// other process holds users.lock. A failed conversion may drop the
	// shared lock: this process is leaving anyway.
	last := tryExclusive(f)
	defer c.dropUse()
	if !last {
		c.logger.Info("embedded PostgreSQL left running: another process uses it", "dir", c.dir)
		return nil
	}
	pm, ok := c.running()
	if !ok {
		return nil
	}
	if !c.startedByPhonefleet(pm) {
		c.logger.Info("embedded PostgreSQL left running: phonefleet did not start it", "dir", c.dir, "pid", pm.pid)
		return nil
	}
	if err := c.stop(ctx, "fast"); err != nil {
		return err
	}
	c.forget()
	c.logger.Info("stopped embedded PostgreSQL at "+c.dir+" (its last user)", "dir", c.dir)
	return nil
}

// dropUse releases this Cluster's lock on users.lock.
func (c *Cluster) dropUse() {
	if c.users != nil {
		_ = c.users.Close() // closing the descriptor releases its flock
		c.users = nil
	}
}

// forget removes the record of a server phonefleet started, once stopped.
func (c *Cluster) forget() {
	if err := os.Remove(filepath.Join(c.dir, startedByFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.logger.Warn("embedded PostgreSQL: remove "+startedByFile, "err", err)
	}
}

// Stop stops the server with pg_ctl stop -m fast (open sessions are ended,
// committed data is safe), whoever uses it, and ends this process's use of
// the cluster. It is for clusters that belong to one process (throwaway
// clusters, tests); a process sharing the cluster calls Close. It is safe
// to call more than once, and a server that is already down is not an
// error. ctx bounds the wait; a ctx that is already done (as at the end of
// a signal-cancelled program) still stops the server, waiting up to a
// minute.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil {
		return nil
	}
	ctx, cancel := closeContext(ctx)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	if err := c.stop(ctx, "fast"); err != nil {
		return err
	}
	c.stopped = true
	c.forget()
	c.dropUse()
	c.logger.Info("stopped embedded PostgreSQL at "+c.dir, "dir", c.dir)
	return nil
}

// Restart stops the server and starts it again on the same port with the
// same data, then waits until it accepts connections, so that clients keep
// using the same DSN. With immediate it stops as a crash would (pg_ctl stop
// -m immediate: every server process quits at once, open sessions are cut,
// nothing is checkpointed, and the start runs crash recovery); otherwise as
// Stop does (-m fast). It also starts a cluster that Stop stopped, and the
// process uses the cluster again. Tests use it to take the database away
// from a running service.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if !c.stopped {
		if err := c.stop(ctx, mode); err != nil {
			return err
		}
		c.stopped = true
	}
	unlock, err := lockFile(ctx, filepath.Join(c.dir, startLockFile))
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: lock %s: %w", c.dir, err)
	}
	defer unlock()
	if c.users == nil {
		if c.users, err = lockShared(ctx, filepath.Join(c.dir, usersFile)); err != nil {
			return fmt.Errorf("embedded PostgreSQL: lock %s: %w", filepath.Join(c.dir, usersFile), err)
		}
	}
	if err := c.start(ctx, c.Port()); err != nil {
		return err
	}
	c.stopped, c.closed = false, false
	return c.waitReady(ctx)
}

// EnsureRunning starts the server again when it is not running (it was
// stopped or killed underneath this process), on its last port when that
// is free and on a new one otherwise, and waits until it accepts
// connections; a server another process started meanwhile is adopted
// (its port) instead. It reports whether it started the server. After
// Close or Stop it does nothing.
func (c *Cluster) EnsureRunning(ctx context.Context) (started bool, err error) {
	if pm, ok := c.running(); ok {
		c.follow(pm)
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.stopped {
		return false, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(c.dir, startLockFile))
	if err != nil {
		return false, fmt.Errorf("embedded PostgreSQL: lock %s: %w", c.dir, err)
	}
	defer unlock()
	if pm, ok := c.running(); ok { // another process started it meanwhile
		c.follow(pm)
		return false, c.waitReady(ctx)
	}
	c.logger.Warn("embedded PostgreSQL is not running; starting it again", "dir", c.dir, "port", c.Port())
	if port := c.Port(); port == 0 || !portFree(port) || c.start(ctx, port) != nil {
		if err := c.start(ctx, 0); err != nil {
			return false, err
		}
	}
	return true, c.waitReady(ctx)
}

// Watch keeps the server running for this process until ctx ends or the
// cluster is closed: every interval it checks the server and starts it
// again when it is gone (EnsureRunning). Failures are logged and retried,
// less often while they last.
func (c *Cluster) Watch(ctx context.Context, interval time.Duration) {
	wait := interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if _, err := c.EnsureRunning(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(wait*2, 30*time.Second)
			c.logger.Error("embedded PostgreSQL could not be started again; retrying", "dir", c.dir, "err", err, "retry_in", wait.String())
			continue
		}
		wait = interval
	}
}

// stop runs pg_ctl stop in mode (fast or immediate) and waits for the
// server to be gone; a server that is already down is not an error.
func (c *Cluster) stop(ctx context.Context, mode string) error {
	out, err := c.command(ctx, "pg_ctl", "stop",
		"--pgdata="+c.dataDir,
		"--mode="+mode,
		"--wait",
		"--timeout=60",
		"--silent",
	).CombinedOutput()
	if err != nil {
		// pg_ctl status exits with 3 when no server is running.
		status := c.command(ctx, "pg_ctl", "status", "--pgdata="+c.dataDir)
		var exitErr *exec.ExitError
		if serr := status.Run(); !errors.As(serr, &exitErr) || exitErr.ExitCode() != 3 {
			return fmt.Errorf("embedded PostgreSQL: pg_ctl stop -m %s: %v: %s", mode, err, lastLines(out, 5))
		}
	}
	return nil
}

// command prepares one of the server programs to run as the cluster's
// owner, in dir, with a clean environment: PG* variables of the caller
// (PGPORT, PGDATA, ...) would otherwise change what the programs do.
func (c *Cluster) command(ctx context.Context, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, program), args...)
	cmd.Dir = c.dir
	env := []string{"LC_ALL=C", "HOME=" + c.dir}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	setCredential(cmd, c.runAs)
	return cmd
}

// writeFile writes a file with mode 0600 owned by the cluster's owner.
func (c *Cluster) writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	if c.runAs != nil {
		if err := os.Lchown(tmp, c.runAs.uid, c.runAs.gid); err != nil {
			return fmt.Errorf("embedded PostgreSQL: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	return nil
}

// portFree reports whether port on 127.0.0.1 can be listened on now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	return l.Close() == nil
}

// freePort asks the kernel for a TCP port on 127.0.0.1 that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// osUser is the unprivileged account the server runs as when we are root.
type osUser struct {
	name string
	uid  int
	gid  int
	gids []int // every group of the user, primary included
}

// tailFile returns the last 4 KiB of a file, or nothing.
func tailFile(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(fi.Size()-4096, 0)
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return buf[:n]
}

// lastLines returns the last n non-empty lines of out joined by " | ".
func lastLines(out []byte, n int) string {
	var lines []string
	for _, l := range bytes.Split(out, []byte("\n")) {
		if s := strings.TrimSpace(string(l)); s != "" {
			lines = append(lines, s)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, " | ")
}
