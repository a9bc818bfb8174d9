//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"phonefleet/testutil"
)

// buildBinary builds the real phonefleet binary into dir (never into the
// repository) and returns its path.
// skewEnv is internal/clock's variable in a chaosclock build (the package
// exports it only in that build).
const skewEnv = "PHONEFLEET_CHAOS_CLOCK_SKEW"

func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "phonefleet")
	// The chaosclock tag lets an instance run its wall clock off the
	// machine's (internal/clock), set by skewEnv.
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", "chaosclock", "-o", bin, "phonefleet/cmd/phonefleet")
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build phonefleet: %v\n%s", err, out)
	}
	return bin
}

// freePort returns a loopback port that was free a moment ago. The parts
// keep their ports across restarts, so clients and peers find them again.
func freePort(t *testing.T) int { return testutil.FreePort(t) }

// proc is one real process the suite starts, kills with SIGKILL and starts
// again: an instance, the gateway or nats-server. Its output, across every
// start, is kept in logs.
type proc struct {
	name string
	argv []string // the command, wrapper included
	env  []string

	logs testutil.SyncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
}

// start starts the process and returns the length of logs before it, so
// that waitLog looks at this start's lines only.
func (p *proc) start(t *testing.T, extraEnv ...string) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	from := len(p.logs.String())
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(append(os.Environ(), p.env...), extraEnv...)
	// Killed with the test process, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	p.starts++
	fmt.Fprintf(&p.logs, "---- %s start %d (pid %d) at %s\n", p.name, p.starts, cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
		}
		err := cmd.Wait()
		fmt.Fprintf(&p.logs, "---- %s (pid %d) exited: %v\n", p.name, cmd.Process.Pid, err)
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return from
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// pid is the running process's id, 0 when it does not run.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// waitLog waits until a JSON log line written since from has msg.
func (p *proc) waitLog(t *testing.T, from int, within time.Duration, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		logs := p.logs.String()
		for _, l := range strings.Split(logs[min(from, len(logs)):], "\n") {
			var m struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == msg {
				return
			}
		}
		if p.pid() == 0 {
			t.Fatalf("%s exited before logging %q\n%s", p.name, msg, tail(logs, 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s\n%s", p.name, msg, within, tail(logs, 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitDial waits until addr accepts a TCP connection.
func waitDial(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept connections within %s: %v", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// natsBinary finds nats-server as testutil does: PHONEFLEET_NATS_SERVER,
// else PATH.
func natsBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PHONEFLEET_NATS_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skipf("skipping: no nats-server (set PHONEFLEET_NATS_SERVER or run `make test`, which installs it): %v", err)
	}
	return p
}

// partition is a TCP proxy between an instance and nats-server that the
// suite cuts: while cut, bytes either way are dropped (the connections
// stay open, as across a real partition, so that only the client's own
// liveness checks can notice); healing closes every connection that saw
// the cut, so the client connects again.
type partition struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[*proxied]struct{}
	cuts  atomic.Int64
}

type proxied struct {
	client, server net.Conn
	sawCut         atomic.Bool
}

func startPartition(t *testing.T, target string) *partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, target: target, conns: map[*proxied]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.closeAll(func(*proxied) bool { return true }) })
	go p.accept()
	return p
}

func (p *partition) addr() string { return p.ln.Addr().String() }

func (p *partition) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *partition) serve(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	pc := &proxied{client: c, server: s}
	p.mu.Lock()
	p.conns[pc] = struct{}{}
	if p.cut {
		pc.sawCut.Store(true)
	}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				cut := p.cut
				p.mu.Unlock()
				if cut {
					pc.sawCut.Store(true)
				} else if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.Close()
		s.Close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}
	go pipe(s, c)
	go pipe(c, s)
}

// setCut cuts (true) or heals (false) the link.
func (p *partition) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	if cut {
		p.cuts.Add(1)
		for pc := range p.conns {
			pc.sawCut.Store(true)
		}
	}
	p.mu.Unlock()
	if !cut {
		p.closeAll(func(pc *proxied) bool { return pc.sawCut.Load() })
	}
}

func (p *partition) closeAll(which func(*proxied) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		if which(pc) {
			pc.client.Close()
			pc.server.Close()
		}
	}
}

// receiver is the HTTPS webhook receiver. While failing it answers 500 to
// every delivery; it records every delivery it accepted (200) by its
// delivery id, and the bodies it was sent under each id.
type receiver struct {
	url    string
	caFile string

	mu       sync.Mutex
	failing  bool
	bodies   map[string][]string // delivery id -> every body received under it
	refused  int
	accepted int
}

func startReceiver(t *testing.T, dir string) *receiver {
	t.Helper()
	r := &receiver{caFile: filepath.Join(dir, "receiver-ca.pem"), bodies: map[string][]string{}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		id := req.Header.Get("Service-Delivery")
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bodies[id] = append(r.bodies[id], string(b))
		if r.failing {
			r.refused++
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		r.accepted++
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	if err := os.WriteFile(r.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *receiver) setFailing(f bool) {
	r.mu.Lock()
	r.failing = f
	r.mu.Unlock()
}

// client is a REST client of the instances. Each call goes to one
// instance; callers choose which.
type client struct {
	http *http.Client
}

// do sends a JSON request; a transport error is returned as err.
func (c *client) do(ctx context.Context, method, url, body string, header ...string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// errorCode returns the error envelope's code and retryable flag.
func errorCode(b []byte) (code string, retryable bool) {
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Retryable *bool  `json:"retryable"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	return env.Error.Code, env.Error.Retryable != nil && *env.Error.Retryable
}

// explicitlyNotRetryable reports whether the error envelope says
// retryable false: the same call is not repeated, whatever its status
// (spec: retryable is per occurrence; read the field).
func explicitlyNotRetryable(b []byte) bool {
	var env struct {
		Error struct {
			Retryable *bool `json:"retryable"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	return env.Error.Retryable != nil && !*env.Error.Retryable
}

// retryableAnswer reports whether a careful client sends the same request
// (same key) again after this answer.
func retryableAnswer(status int, b []byte, err error) bool {
	if err != nil {
		return true
	}
	code, retryable := errorCode(b)
	if code == "action_outcome_unknown" || explicitlyNotRetryable(b) {
		return false
	}
	return retryable || status == http.StatusInternalServerError || status == http.StatusBadGateway ||
		status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout || status == http.StatusTooManyRequests
}

// errNotYet is what a polled check returns while its condition does not
// hold yet.
var errNotYet = errors.New("not yet")

// eventually polls check until it returns nil or within passes.
func eventually(t *testing.T, within time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// atoi is strconv.Atoi returning -1 on error.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
