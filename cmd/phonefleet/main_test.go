package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The tests run the real program: this test binary re-executes itself with
// PHONEFLEET_E2E_MAIN set, and then behaves exactly as `phonefleet`.
func TestMain(m *testing.M) {
	if os.Getenv("PHONEFLEET_E2E_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// program is a running `phonefleet serve`.
type program struct {
	cmd  *exec.Cmd
	addr string
	logs *bytes.Buffer
	done chan error
}

func command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "PHONEFLEET_E2E_MAIN=1"), env...)
	return cmd
}

// start runs serve on 127.0.0.1:0 and waits for its "serving" log line.
func start(t *testing.T, env ...string) *program {
	t.Helper()
	cmd := command(env, "serve", "-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &program{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.logs.Write(append(line, '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "phonefleet serving" {
				addr <- rec.Addr
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-addr:
	case err := <-p.done:
		t.Fatalf("serve exited before serving: %v\n%s", err, p.logs)
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		<-p.done // the reader has stopped writing the logs
		t.Fatalf("serve did not start within 120 s\n%s", p.logs)
	}
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// stop sends SIGINT (Ctrl-C) and waits for a clean exit.
func (p *program) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGINT\n%s", err, p.logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60 s of SIGINT")
	}
}

func (p *program) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func runCmd(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	out, err := command(env, args...).CombinedOutput()
	return string(out), err
}

func TestServeWithDatabaseURL(t *testing.T) {
	env := []string{"DATABASE_URL=" + testutil.DatabaseURL(t), "SERVICE_DATA_DIR=" + t.TempDir()}
	p := start(t, env...)
	status, body := p.get(t, "/healthz")
	var health struct {
		Status      string
		Database    struct{ OK bool }
		Projections []struct {
			Name  string
			State string
		}
	}
	if err := json.Unmarshal(body, &health); err != nil || status != 200 || health.Status != "ok" || !health.Database.OK {
		t.Fatalf("healthz: got %d %s; want 200 ok with the database up", status, body)
	}
	if len(health.Projections) == 0 || health.Projections[0].Name != projections.AuditName {
		t.Fatalf("healthz: got projections %+v; want the audit feed reported", health.Projections)
	}
	for _, path := range []string{"/tasks", "/runs", "/v1/nothing-here"} {
		if status, body := p.get(t, path); status != 404 || !strings.Contains(string(body), `"code":"not_found"`) {
			t.Errorf("%s: got %d %s; want 404 not_found", path, status, body)
		}
	}
	if status, _ := p.get(t, "/openapi.json"); status != 200 {
		t.Errorf("openapi.json: got %d; want 200", status)
	}
	p.stop(t)

	// The operator commands work against the same database.
	out, err := runCmd(t, env, "events", "tail")
	if err != nil || !strings.Contains(out, "organisation.created/v1") {
		t.Fatalf("events tail: %v\n%s\nwant the local organisation's creation", err, out)
	}
	out, err = runCmd(t, env, "projections", "status")
	if err != nil || !strings.Contains(out, projections.AuditName) || !strings.Contains(out, "live") {
		t.Fatalf("projections status: %v\n%s", err, out)
	}
	out, err = runCmd(t, env, "projections", "rebuild", projections.AuditName)
	if err != nil || !strings.Contains(out, "took over") {
		t.Fatalf("projections rebuild: %v\n%s", err, out)
	}
	out, err = runCmd(t, env, "projections", "rebuild", "no_such")
	if code := exitCodeOf(err); code != 2 || !strings.Contains(out, "no projection named") {
		t.Fatalf("rebuild of an unknown projection: exit %d\n%s\nwant exit 2 naming the problem", code, out)
	}
}

func exitCodeOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestInvalidSettingStopsStartWithOneLine(t *testing.T) {
	out, err := runCmd(t, []string{"SERVICE_MODE=cloud"}, "serve")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if exitCodeOf(err) == 0 || len(lines) != 1 || !strings.Contains(lines[0], "SERVICE_MODE") {
		t.Fatalf("got exit %d and %q; want a failure with one line naming SERVICE_MODE", exitCodeOf(err), out)
	}
	out, err = runCmd(t, []string{"SERVICE_ADDR=0.0.0.0:8080"}, "serve")
	if exitCodeOf(err) == 0 || !strings.Contains(out, "loopback only") {
		t.Fatalf("local mode on 0.0.0.0: got exit %d and %q; want a refusal", exitCodeOf(err), out)
	}
}

// TestEmbeddedDatabase is `make run` on a clean machine: no DATABASE_URL, so
// the service initialises and runs its own cluster, a second start reuses
// the data, and Ctrl-C stops the cluster it started.
func TestEmbeddedDatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the cluster runs as an unprivileged user when we are root
	}
	env := []string{"DATABASE_URL=", "SERVICE_DATA_DIR=" + dir}
	started := time.Now()
	p := start(t, env...)
	if status, body := p.get(t, "/healthz"); status != 200 {
		t.Fatalf("healthz: got %d %s", status, body)
	}
	t.Logf("first start (initdb included) served /healthz after %s", time.Since(started).Round(time.Millisecond))
	p.stop(t)
	port := clusterPort(t, dir)
	if port != "" && dialable(port) {
		t.Fatalf("the embedded cluster still listens on %s after the service stopped", port)
	}

	p = start(t, env...)
	if !strings.Contains(p.logs.String(), "started") || strings.Contains(p.logs.String(), "initialised") {
		t.Fatalf("second start: want the existing cluster started, not initialised again\n%s", p.logs)
	}
	if status, _ := p.get(t, "/healthz"); status != 200 {
		t.Fatalf("second start: healthz %d", status)
	}
	p.stop(t)
	out, err := runCmd(t, env, "events", "tail")
	if err != nil || strings.Count(out, "organisation.created") != 1 {
		t.Fatalf("events tail after two starts: %v\n%s\nwant exactly one organisation created (the data was reused)", err, out)
	}
}

// clusterPort reads the port of the embedded cluster's last start.
func clusterPort(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "postgres", "data", "postmaster.pid"))
	if err != nil {
		return "" // removed on a clean stop
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 3 {
		return strings.TrimSpace(lines[3])
	}
	return ""
}

func dialable(port string) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// TestEventsTailWaitsForOlderTransactions: the feed is gap-safe across the
// whole cluster, so a transaction left open in another database holds back
// newer events; a plain tail must still print everything committed before
// it started, once that transaction ends.
func TestEventsTailWaitsForOlderTransactions(t *testing.T) {
	url := testutil.DatabaseURL(t)
	env := []string{"DATABASE_URL=" + url, "SERVICE_DATA_DIR=" + t.TempDir()}
	if out, err := runCmd(t, env, "migrate"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	other := testutil.FreshPool(t) // another database on the same server
	ctx := testutil.Context(t)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // takes a transaction id
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := eventstore.New(pool).Append(ctx, "tail-test", eventstore.NoStream,
		eventstore.NewEvent{Type: "test.tailed", SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	cmd := command(env, "events", "tail")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the tail is waiting on the open transaction
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "test.tailed") {
		t.Fatalf("events tail: %v\n%s\nwant the event committed before the tail started", err, out.String())
	}
}
