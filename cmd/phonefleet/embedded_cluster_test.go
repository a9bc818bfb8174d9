package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"phonefleet/internal/pgembed"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// These tests run the README's first minute as a newcomer does: the
// service on its embedded PostgreSQL (no DATABASE_URL), and the operator
// commands as separate processes on the same data directory. Who stops the
// cluster is the point: the last phonefleet process that uses it, and only
// when a phonefleet process started it.

// needServerBinaries skips the test, saying why, when there is no
// PostgreSQL to run an embedded cluster with.
func needServerBinaries(t *testing.T) {
	t.Helper()
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries for the embedded cluster: %v", err)
	}
}

// embeddedEnv returns the environment of a process using the embedded
// cluster of a data directory of its own, which the server's unprivileged
// user can reach when the tests run as root (t.TempDir's parent is mode
// 0700). The cluster lives in dir/postgres.
func embeddedEnv(t *testing.T) (env []string, dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever a test leaves behind, no server outlives it.
	t.Cleanup(func() { stopLeftover(t, dir) })
	return []string{"DATABASE_URL=", "SERVICE_DATA_DIR=" + dir, "SERVICE_SIM_DEVICES=1"}, dir
}

// postmaster reads the embedded cluster's postmaster.pid: the server's
// process id and port, and whether that process is alive.
func postmaster(dir string) (pid int, port string, alive bool) {
	b, err := os.ReadFile(filepath.Join(dir, "postgres", "data", "postmaster.pid"))
	if err != nil {
		return 0, "", false
	}
	lines := strings.Split(string(b), "\n")
	if pid, err = strconv.Atoi(strings.TrimSpace(lines[0])); err != nil || pid <= 0 {
		return 0, "", false
	}
	if len(lines) > 3 {
		port = strings.TrimSpace(lines[3])
	}
	return pid, port, processAlive(pid)
}

// processAlive reports whether pid is a live process (a zombie is not).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// serverPID returns the running server's process id, failing the test when
// none runs.
func serverPID(t *testing.T, dir string) int {
	t.Helper()
	pid, _, alive := postmaster(dir)
	if !alive {
		t.Fatalf("got no PostgreSQL server running for %s; want one", dir)
	}
	return pid
}

// waitNoServer waits (at most 60 s) until no PostgreSQL server runs for
// dir: a process that stopped the cluster waited for it, so only a server
// that was left running fails this.
func waitNoServer(t *testing.T, dir, after string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pid, port, alive := postmaster(dir)
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: got PostgreSQL (pid %d, port %s) still running for %s; want it stopped", after, pid, port, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopLeftover stops a server a failed test left running (SIGINT: fast
// shutdown) and waits for it to go.
func stopLeftover(t *testing.T, dir string) {
	pid, _, alive := postmaster(dir)
	if !alive {
		return
	}
	t.Logf("stopping a PostgreSQL server left running for %s (pid %d)", dir, pid)
	_ = syscall.Kill(pid, syscall.SIGINT)
	for deadline := time.Now().Add(60 * time.Second); processAlive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
}

// serviceClient is a client of a running `phonefleet serve` in local mode.
type serviceClient struct {
	base   string
	device string
}

func newService(t *testing.T, p *program) *serviceClient {
	t.Helper()
	s := &serviceClient{base: "http://" + p.addr}
	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, body := s.do(t, "GET", "/v1/devices", "")
		if status == http.StatusOK && json.Unmarshal(body, &list) == nil && len(list.Devices) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/devices: got %d %s; want the local sim phone listed", status, body)
		}
	}
	s.device = list.Devices[0].DeviceID
	return s
}

func (s *serviceClient) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// healthy reports whether the service answers GET /healthz with ok and
// takes a write: a lease on its sim phone, given back at once.
func (s *serviceClient) healthy(t *testing.T) error {
	t.Helper()
	status, body := s.do(t, "GET", "/healthz", "")
	var h struct {
		Status string `json:"status"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Status != "ok" {
		return fmt.Errorf("GET /healthz: got %d %.300s; want 200 ok", status, body)
	}
	status, body = s.do(t, "POST", "/v1/devices/"+s.device+"/lease", `{"ttlSeconds":60}`)
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	if status/100 != 2 || json.Unmarshal(body, &lease) != nil || lease.LeaseID == "" {
		return fmt.Errorf("POST /v1/devices/%s/lease: got %d %.300s; want a lease", s.device, status, body)
	}
	status, body = s.do(t, "DELETE", "/v1/devices/"+s.device+"/lease?leaseId="+lease.LeaseID, "")
	if status/100 != 2 {
		return fmt.Errorf("DELETE the lease: got %d %.300s; want it released", status, body)
	}
	return nil
}

// mustBeHealthy fails the test unless the service is healthy now.
func (s *serviceClient) mustBeHealthy(t *testing.T, after string) {
	t.Helper()
	if err := s.healthy(t); err != nil {
		t.Fatalf("after %s: %v", after, err)
	}
}

// waitHealthy waits (at most 90 s) until the service is healthy again.
func (s *serviceClient) waitHealthy(t *testing.T, after string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := s.healthy(t)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: the service did not recover within 90 s: %v", after, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail is a running `phonefleet events tail -follow` whose standard output
// is a pipe the test reads, as `| head -1` would.
type tail struct {
	cmd    *exec.Cmd
	out    *os.File // the pipe's read end
	lines  *bufio.Reader
	stderr *testutil.SyncBuffer
	exited chan struct{} // closed once the process has exited
}

func startTail(t *testing.T, env []string) *tail {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	tl := &tail{cmd: command(env, "events", "tail", "-follow"), out: r, lines: bufio.NewReader(r),
		stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	tl.cmd.Stdout, tl.cmd.Stderr = w, tl.stderr
	if err := tl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the child holds the only write end
	go func() { _ = tl.cmd.Wait(); close(tl.exited) }()
	t.Cleanup(func() {
		r.Close()
		select {
		case <-tl.exited:
		default:
			_ = tl.cmd.Process.Kill()
			<-tl.exited
		}
	})
	return tl
}

// firstLine reads the tail's first line (it has attached to the cluster
// and read the feed by then).
func (tl *tail) firstLine(t *testing.T) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		l, _ := tl.lines.ReadString('\n')
		got <- l
	}()
	select {
	case l := <-got:
		if l == "" {
			t.Fatalf("events tail -follow printed nothing; stderr: %s", tl.stderr)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("events tail -follow printed no line within 60 s; stderr: %s", tl.stderr)
	}
	return ""
}

// wait waits (at most 60 s) for the tail to exit and returns how it did.
func (tl *tail) wait(t *testing.T, after string) *os.ProcessState {
	t.Helper()
	select {
	case <-tl.exited:
		return tl.cmd.ProcessState
	case <-time.After(60 * time.Second):
		t.Fatalf("events tail -follow did not exit within 60 s of %s; stderr: %s", after, tl.stderr)
	}
	return nil
}

// wantQuietExit fails the test unless the process exited by itself with
// status 0 and printed no error.
func wantQuietExit(t *testing.T, st *os.ProcessState, stderr, after string) {
	t.Helper()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("after %s: got the CLI killed by %v; want it to close and exit by itself (stderr: %s)", after, ws.Signal(), stderr)
	}
	if st.ExitCode() != 0 || strings.Contains(stderr, "phonefleet:") || strings.Contains(stderr, "broken pipe") {
		t.Fatalf("after %s: got exit %d with stderr %q; want exit 0 and no error", after, st.ExitCode(), stderr)
	}
}

// TestCLICommandsLeaveTheServiceClusterRunning is the README's first
// minute: `phonefleet serve` on its embedded cluster, then each operator
// command it names as a separate process on the same data directory,
// `events tail | head -1` among them. None may stop the server the
// service uses (the same server process keeps running) and the service
// stays healthy after each; once the service stops, no server is left.
func TestCLICommandsLeaveTheServiceClusterRunning(t *testing.T) {
	needServerBinaries(t)
	env, dir := embeddedEnv(t)
	p := start(t, env...)
	svc := newService(t, p)
	svc.mustBeHealthy(t, "the service started")
	pid := serverPID(t, dir)

	var org string
	steps := []struct {
		name  string
		args  func() []string
		check func(out string) error
	}{
		{"events tail", func() []string { return []string{"events", "tail"} }, func(out string) error {
			for l := range strings.SplitSeq(out, "\n") {
				if f := strings.Split(l, "\t"); len(f) > 4 && strings.HasPrefix(f[4], "organisation.created/") {
					org = f[2]
				}
			}
			if org == "" {
				return errors.New("want the local organisation's creation")
			}
			return nil
		}},
		{"projections status", func() []string { return []string{"projections", "status"} }, func(out string) error {
			if !strings.Contains(out, projections.AuditName) {
				return errors.New("want the audit feed listed")
			}
			return nil
		}},
		{"projections rebuild", func() []string { return []string{"projections", "rebuild", projections.AuditName} }, func(out string) error {
			if !strings.Contains(out, "took over") {
				return errors.New("want the rebuilt version to take over")
			}
			return nil
		}},
		{"receipts verify", func() []string { return []string{"receipts", "verify"} }, func(out string) error {
			if !strings.Contains(out, "OK: the receipts read model agrees") {
				return errors.New("want the receipts to agree with the history")
			}
			return nil
		}},
		{"devices add", func() []string { return []string{"devices", "add", "--org", org, "--backend", "sim", "--count", "1"} }, func(out string) error {
			if !strings.Contains(out, "registered 1 sim device(s) for "+org) {
				return errors.New("want one sim device registered")
			}
			return nil
		}},
	}
	for _, step := range steps {
		out, err := runCmd(t, env, step.args()...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", step.name, err, out)
		}
		if err := step.check(out); err != nil {
			t.Fatalf("%s: got\n%s\n%v", step.name, out, err)
		}
		if got := serverPID(t, dir); got != pid {
			t.Fatalf("after %s: got PostgreSQL pid %d; want the service's server (pid %d) never stopped", step.name, got, pid)
		}
		svc.mustBeHealthy(t, step.name)
	}

	// `events tail | head -1`: the reader goes away after one line. The
	// whole feed may fit in the pipe, so the tail may end without ever
	// meeting the closed pipe: either way it exits quietly.
	t.Run("events tail | head -1", func(t *testing.T) {
		cmd := exec.Command("sh", "-c", `"$0" events tail | head -1`, os.Args[0])
		cmd.Env = append(append(os.Environ(), "PHONEFLEET_E2E_MAIN=1"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Count(string(out), "\n") != 1 {
			t.Fatalf("got %v and %q; want the first event's line", err, out)
		}
		if got := serverPID(t, dir); got != pid {
			t.Fatalf("got PostgreSQL pid %d; want the service's server (pid %d) never stopped", got, pid)
		}
		svc.mustBeHealthy(t, "events tail | head -1")
	})

	// `events tail -follow | head -1`: the tail is still running when the
	// reader goes away, so its next write meets the closed pipe (SIGPIPE).
	t.Run("events tail -follow | head -1", func(t *testing.T) {
		tl := startTail(t, env)
		tl.firstLine(t)
		tl.out.Close()
		svc.mustBeHealthy(t, "the reader closed the pipe") // new events for the tail to write
		st := tl.wait(t, "a write to the closed pipe")
		wantQuietExit(t, st, tl.stderr.String(), "a write to a closed pipe")
		if got := serverPID(t, dir); got != pid {
			t.Fatalf("got PostgreSQL pid %d; want the service's server (pid %d) never stopped", got, pid)
		}
		svc.mustBeHealthy(t, "events tail -follow | head -1")
	})

	p.stop(t)
	waitNoServer(t, dir, "the service stopped")
}

// TestCLIAloneLeavesNoClusterRunning: an operator command run with no
// service starts the embedded cluster for itself and stops it when it
// ends, whether it finishes, is interrupted (SIGINT, SIGTERM, SIGHUP) or
// meets a closed pipe (SIGPIPE); a second command attached meanwhile does
// not stop it under the first. SIGKILL cannot be handled in the process:
// the server is left running, and the next command that uses the cluster
// stops it when it ends.
func TestCLIAloneLeavesNoClusterRunning(t *testing.T) {
	needServerBinaries(t)
	env, dir := embeddedEnv(t)
	out, err := runCmd(t, env, "devices", "add", "--org", "org_cli", "--backend", "sim", "--count", "1")
	if err != nil || !strings.Contains(out, "registered 1 sim device(s)") {
		t.Fatalf("devices add: %v\n%s", err, out)
	}
	waitNoServer(t, dir, "devices add ended")

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			tl := startTail(t, env)
			tl.firstLine(t)
			serverPID(t, dir)
			if err := tl.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			st := tl.wait(t, sig.String())
			wantQuietExit(t, st, tl.stderr.String(), sig.String())
			waitNoServer(t, dir, "events tail -follow got "+sig.String())
		})
	}

	t.Run("SIGPIPE, with a second command attached meanwhile", func(t *testing.T) {
		tl := startTail(t, env)
		tl.firstLine(t)
		pid := serverPID(t, dir)
		// A second command uses the cluster the tail started and ends
		// first: the server must stay for the tail, which cannot end while
		// its reader is there.
		devicesAdd := func() {
			t.Helper()
			if out, err := runCmd(t, env, "devices", "add", "--org", "org_cli", "--backend", "sim", "--count", "1"); err != nil {
				t.Fatalf("devices add beside the tail: %v\n%s", err, out)
			}
		}
		devicesAdd()
		if got, _, alive := postmaster(dir); !alive || got != pid {
			t.Fatalf("got PostgreSQL pid %d (alive %v) after a second command ended; want the tail's server (pid %d) left running", got, alive, pid)
		}
		// The reader goes away; the next events make the tail write into
		// the closed pipe.
		tl.out.Close()
		devicesAdd()
		st := tl.wait(t, "a write to the closed pipe")
		wantQuietExit(t, st, tl.stderr.String(), "a write to a closed pipe")
		waitNoServer(t, dir, "events tail -follow met a closed pipe")
	})

	t.Run("SIGKILL, then the next command", func(t *testing.T) {
		tl := startTail(t, env)
		tl.firstLine(t)
		pid := serverPID(t, dir)
		if err := tl.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		tl.wait(t, "SIGKILL")
		if got, _, alive := postmaster(dir); !alive || got != pid {
			t.Fatalf("got PostgreSQL pid %d alive %v after SIGKILL; want the server (pid %d) left running, as nothing runs in a killed process", got, alive, pid)
		}
		out, err := runCmd(t, env, "projections", "status")
		if err != nil {
			t.Fatalf("projections status: %v\n%s", err, out)
		}
		waitNoServer(t, dir, "the next command after a SIGKILL ended")
	})
}

// TestServiceStartsItsClusterAgain: the embedded server stopped underneath
// the service (immediate mode as pg_ctl stop -m immediate sends it,
// SIGQUIT; fast mode, SIGINT, as an older CLI stopped it) is started again
// by the service itself, which then answers and takes writes again
// without a restart.
func TestServiceStartsItsClusterAgain(t *testing.T) {
	needServerBinaries(t)
	env, dir := embeddedEnv(t)
	p := start(t, env...)
	svc := newService(t, p)
	svc.mustBeHealthy(t, "the service started")
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"immediate (SIGQUIT)", syscall.SIGQUIT},
		{"fast (SIGINT)", syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := serverPID(t, dir)
			if err := syscall.Kill(pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(60 * time.Second); processAlive(pid); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("PostgreSQL (pid %d) still runs 60 s after %v", pid, tc.sig)
				}
			}
			svc.waitHealthy(t, "the server was stopped "+tc.name)
			if got := serverPID(t, dir); got == pid {
				t.Fatalf("got the same server pid %d; want a new server", got)
			}
		})
	}
	p.stop(t)
	waitNoServer(t, dir, "the service stopped")
}
