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
//	dir/start.lock      serialises Start between processes
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
// outlives the process that started it unless Stop is called. A later Start
// on the same dir finds the running server and reuses it; a server that died
// (even by SIGKILL) is recovered by the next Start.
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

// Cluster is a running embedded PostgreSQL server. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir      string
	dataDir  string
	binDir   string
	port     int
	password string
	runAs    *osUser
	logger   *slog.Logger

	mu      sync.Mutex
	stopped bool
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
	unlock, err := lockFile(ctx, filepath.Join(dir, "start.lock"))
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
	if err := c.initialise(ctx); err != nil {
		return nil, err
	}
	if err := c.writeFile(filepath.Join(c.dataDir, "phonefleet.conf"), []byte(serverSettings)); err != nil {
		return nil, err
	}
	if pid, port, ok := c.running(); ok {
		c.port = port
		logger.Info("embedded PostgreSQL already running; reusing it", "dir", dir, "pid", pid, "port", port)
	} else if err := c.start(ctx, 0); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		return nil, err
	}
	return c, nil
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

// running reports whether the postmaster named in data/postmaster.pid is
// alive, and on which port it listens. A postmaster.pid whose process is
// gone is left for PostgreSQL to clean up (it also guards against orphaned
// backends of a killed postmaster); one whose PID now belongs to some other
// process is removed.
func (c *Cluster) running() (pid, port int, ok bool) {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	if !processAlive(pid) {
		return 0, 0, false
	}
	if ours, known := isPostmasterOf(pid, c.dataDir); known && !ours {
		c.logger.Warn("removing stale postmaster.pid: its process id now belongs to another program", "pid", pid, "file", pidFile)
		_ = os.Remove(pidFile)
		return 0, 0, false
	}
	return pid, port, true
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
		out, err := c.command(ctx, "pg_ctl", "start",
			"--pgdata="+c.dataDir,
			"--log="+logFile,
			"--wait",
			"--timeout="+strconv.Itoa(int(readyTimeout/time.Second)),
			"--silent",
			"-o", "-p "+strconv.Itoa(port),
		).CombinedOutput()
		if err == nil {
			c.port = port
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
				c.dir, c.port, err, filepath.Join(c.dir, "postgres.log"))
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
// superuser's password.
func (c *Cluster) DSN() string { return c.url(databaseName) }

// AdminDSN returns the postgres:// URL of the same server's maintenance
// database "postgres", with the superuser's password.
func (c *Cluster) AdminDSN() string { return c.url("postgres") }

func (c *Cluster) url(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Stop stops the server with pg_ctl stop -m fast (open sessions are ended,
// committed data is safe). It is safe to call more than once, and a server
// that is already down is not an error. ctx bounds the wait; a ctx that is
// already done (as at the end of a signal-cancelled program) still stops the
// server, waiting up to a minute.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil {
		return nil
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	if err := c.stop(ctx, "fast"); err != nil {
		return err
	}
	c.stopped = true
	c.logger.Info("stopped embedded PostgreSQL at "+c.dir, "dir", c.dir)
	return nil
}

// Restart stops the server and starts it again on the same port with the
// same data, then waits until it accepts connections, so that clients keep
// using the same DSN. With immediate it stops as a crash would (pg_ctl stop
// -m immediate: every server process quits at once, open sessions are cut,
// nothing is checkpointed, and the start runs crash recovery); otherwise as
// Stop does (-m fast). It also starts a cluster that Stop stopped. Tests use
// it to take the database away from a running service.
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
	unlock, err := lockFile(ctx, filepath.Join(c.dir, "start.lock"))
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: lock %s: %w", c.dir, err)
	}
	defer unlock()
	if err := c.start(ctx, c.port); err != nil {
		return err
	}
	c.stopped = false
	return c.waitReady(ctx)
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
