package service

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/internal/config"
	"phonefleet/internal/pgembed"
	"phonefleet/testutil"
)

// reachableTempDir returns a directory under t.TempDir that the embedded
// server's unprivileged user can reach when the tests run as root
// (t.TempDir's parent is created with mode 0700).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// embeddedPostmaster reads the postmaster.pid of the cluster in dir: the
// server's process id and port.
func embeddedPostmaster(t *testing.T, dir string) (pid, port int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("got no postmaster.pid in %s (%v); want a running server", dir, err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		t.Fatalf("got postmaster.pid %q; want at least 4 lines", b)
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil {
		t.Fatalf("got postmaster.pid %q; want a pid and a port", b)
	}
	return pid, port
}

// waitExited waits (at most a minute) until process pid is gone (or a
// zombie).
func waitExited(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if syscall.Kill(pid, 0) != nil || err == nil && strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs a minute after it was told to stop", pid)
		}
	}
}

// TestEmbeddedPoolFollowsTheServerToANewPort: the service's database on
// the embedded cluster (OpenDB and its watchdog, DB.Watch) when the server
// is killed underneath it and its port taken by something else: the server
// is started again on another port, and both the pool and a connection
// made from a copy of the pool's configuration (as the device host's lock
// connection is) reach it there.
func TestEmbeddedPoolFollowsTheServerToANewPort(t *testing.T) {
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries: %v", err)
	}
	dir := reachableTempDir(t)
	env := map[string]string{"DATABASE_URL": "", "SERVICE_DATA_DIR": filepath.Join(dir, "data")}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testutil.Context(t), 3*time.Minute)
	defer cancel()
	db, err := OpenDB(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	clusterDir := filepath.Join(dir, "data", "postgres")
	defer func() {
		db.Close(context.Background())
		if _, err := os.Stat(filepath.Join(clusterDir, "data", "postmaster.pid")); err == nil {
			t.Errorf("got a server still running in %s after its only user closed; want it stopped", clusterDir)
		}
	}()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { db.Watch(watchCtx); close(watched) }()
	defer func() { stopWatch(); <-watched }()

	pid, port := embeddedPostmaster(t, clusterDir)
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil { // what pg_ctl stop -m immediate sends
		t.Fatal(err)
	}
	waitExited(t, pid)
	squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Skipf("skipping: the old port %d was taken again before the test could take it: %v", port, err)
	}
	defer squatter.Close()

	var lastErr error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		_, lastErr = db.Pool.Exec(qctx, `SELECT 1`)
		qcancel()
		if lastErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not reach the server again within a minute: %v", lastErr)
		}
	}
	if _, newPort := embeddedPostmaster(t, clusterDir); newPort == port {
		t.Fatalf("got the server on its old port %d, which the test holds; want another port", port)
	}
	conn, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatalf("a connection made from the pool's configuration: %v", err)
	}
	conn.Close(ctx)
}

// TestServiceRecoversWhenItsDatabaseServerRestarts: the service on
// DATABASE_URL whose server goes away and comes back on the same address
// (fast and immediate stops, then a start) answers again without a
// restart: /healthz is ok, a lease and an action on its sim phone
// succeed, the action's receipt is projected, and the long-lived
// connections are back: the wake-up listeners of the event relay and of
// the projection runner, and the sim host's advisory lock.
func TestServiceRecoversWhenItsDatabaseServerRestarts(t *testing.T) {
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries for a throwaway cluster: %v", err)
	}
	dir := reachableTempDir(t)
	ctx, cancel := context.WithTimeout(testutil.Context(t), 5*time.Minute)
	defer cancel()
	cluster, err := pgembed.Start(ctx, filepath.Join(dir, "pg"), nil)
	if err != nil {
		t.Fatalf("throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(func() { // after the service has stopped (cleanups run last-in first-out)
		if err := cluster.Stop(context.Background()); err != nil {
			t.Errorf("stop the throwaway PostgreSQL: %v", err)
		}
	})
	_, base := startApp(t, map[string]string{
		"DATABASE_URL": cluster.DSN(), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1",
	})
	c := &outageClient{t: t, base: base, http: &http.Client{Timeout: 30 * time.Second}}
	var devices struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for deadline := time.Now().Add(30 * time.Second); len(devices.Devices) == 0; time.Sleep(50 * time.Millisecond) {
		c.mustJSON("GET", "/v1/devices", "", &devices)
		if time.Now().After(deadline) {
			t.Fatal("got no sim phone listed within 30 s; want the local one")
		}
	}
	dev := devices.Devices[0].DeviceID

	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			if err := stopServer(ctx, cluster, mode == "immediate"); err != nil {
				t.Fatal(err)
			}
			if status, body, _ := c.do("GET", "/healthz", ""); status != http.StatusServiceUnavailable {
				t.Fatalf("got /healthz %d %.300s with the database down; want 503", status, body)
			}
			if err := cluster.Restart(ctx, false); err != nil { // starts the stopped server on its port
				t.Fatal(err)
			}
			waitFor(t, "/healthz ok", func() error {
				status, body, err := c.do("GET", "/healthz", "")
				if err != nil || status != http.StatusOK {
					return fmt.Errorf("got %d %.300s (%v)", status, body, err)
				}
				return nil
			})
			key := "restart-" + mode
			waitFor(t, "a lease and an action", func() error { return leaseAndTap(c, dev, key) })
			waitFor(t, "the action's receipt committed", func() error {
				status, body, err := c.do("GET", "/v1/receipts?deviceId="+dev+"&limit=50", "")
				var page struct {
					Receipts []struct {
						IdempotencyKey string `json:"idempotencyKey"`
						State          string `json:"state"`
					} `json:"receipts"`
				}
				if err != nil || status != http.StatusOK || json.Unmarshal(body, &page) != nil {
					return fmt.Errorf("GET /v1/receipts: got %d %.300s (%v)", status, body, err)
				}
				for _, r := range page.Receipts {
					if r.IdempotencyKey == key && r.State == "committed" {
						return nil
					}
				}
				return fmt.Errorf("got receipts %+v; want %s committed", page.Receipts, key)
			})
			waitFor(t, "the long-lived connections back", func() error { return longLivedConnections(ctx, cluster) })
		})
	}
}

// stopServer stops the cluster's server (fast or immediate) and leaves it
// stopped.
func stopServer(ctx context.Context, cluster *pgembed.Cluster, immediate bool) error {
	if !immediate {
		return cluster.Stop(ctx)
	}
	// Restart(immediate) cuts everything as a crash would; Stop then ends
	// the server it started, so the service meets a server that is gone.
	if err := cluster.Restart(ctx, true); err != nil {
		return err
	}
	return cluster.Stop(ctx)
}

// leaseAndTap takes a lease on dev, taps it once under key and gives the
// lease back.
func leaseAndTap(c *outageClient, dev, key string) error {
	status, body, err := c.do("POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":60}`)
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	if err != nil || status/100 != 2 || json.Unmarshal(body, &lease) != nil || lease.LeaseID == "" {
		return fmt.Errorf("lease: got %d %.300s (%v)", status, body, err)
	}
	defer c.do("DELETE", "/v1/devices/"+dev+"/lease?leaseId="+lease.LeaseID, "")
	status, body, err = c.do("POST", "/v1/devices/"+dev+"/actions",
		fmt.Sprintf(`{"action":"tap","arguments":{"x":10,"y":10},"idempotencyKey":%q,"leaseId":%q}`, key, lease.LeaseID))
	if err != nil || status/100 != 2 {
		return fmt.Errorf("tap: got %d %.300s (%v)", status, body, err)
	}
	return nil
}

// longLivedConnections checks, from the database's side, that the
// service's wake-up listeners (event relay, projection runner) listen
// again and that its sim host holds its advisory lock again.
func longLivedConnections(ctx context.Context, cluster *pgembed.Cluster) error {
	conn, err := pgx.Connect(ctx, cluster.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT query FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`)
	if err != nil {
		return err
	}
	listening, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, want := range []string{"LISTEN phonefleet_events", "LISTEN phonefleet_projections"} {
		if !slices.Contains(listening, want) {
			return fmt.Errorf("got listeners %q; want %q among them", listening, want)
		}
	}
	var locks int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`).Scan(&locks); err != nil {
		return err
	}
	if locks == 0 {
		return fmt.Errorf("got no advisory lock held; want the sim host's")
	}
	return nil
}

// waitFor polls check (at most 90 s) until it succeeds.
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 90 s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
