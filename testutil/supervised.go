package testutil

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// supervisorEnv marks the copy of the test binary that supervises a helper
// server for the test process; its value is the superviseSpec, in JSON.
const supervisorEnv = "PHONEFLEET_TESTUTIL_SUPERVISOR"

// init turns a copy of the test binary started by supervised.start into
// the supervisor, before any test can run.
func init() {
	if v := os.Getenv(supervisorEnv); v != "" {
		var spec superviseSpec
		if err := json.Unmarshal([]byte(v), &spec); err != nil {
			fmt.Printf("error %s: %v\n", supervisorEnv, err)
			os.Exit(1)
		}
		os.Exit(supervise(spec, os.Stdin, os.Stdout))
	}
}

// supervised is a helper server (stripe-mock, nats-server) that serves a
// whole test binary: one process, found and started on free loopback ports
// on the first call, and stopped when the test process ends, however it
// ends (even by SIGKILL), by a supervisor holding a pipe from this process:
// a copy of the test binary, like the database reaper.
type supervised struct {
	// name is the binary's file name; errors and logs name the server so.
	name string
	// env, when set, names the binary, which must then be executable.
	env string
	// hint says how to get the binary, for when it is not found.
	hint string
	// args make the server listen on free loopback ports.
	args []string
	// listening is what the server logs once it takes connections,
	// followed by the address it listens on.
	listening string
	// scheme is the scheme of the URL the server's address is given as.
	scheme string
	// probe tries the server at addr once; nil means that it answers.
	probe func(ctx context.Context, addr string) error
	// timeout bounds the start, readiness included.
	timeout time.Duration

	started once[string]
	// lifeline is the test process's end of the pipe to the supervisor;
	// it is never closed (nor collected) while the process lives, and
	// closes by itself when the process ends.
	lifeline io.WriteCloser
}

// superviseSpec is what the supervisor runs: the server's binary and
// arguments, and what the server logs before the address it listens on.
type superviseSpec struct {
	Bin       string   `json:"bin"`
	Args      []string `json:"args"`
	Listening string   `json:"listening"`
}

// url returns the server's URL (scheme://127.0.0.1:PORT), finding and
// starting the server on the first call. The test fails when the binary is
// missing or the server does not start; every later call fails the same way.
func (s *supervised) url(t testing.TB) string {
	t.Helper()
	u, first, err := s.started.get(func() (string, error) {
		bin, err := s.find(os.Getenv)
		if err != nil {
			return "", err
		}
		addr, err := s.start(bin)
		if err != nil {
			return "", err
		}
		return s.scheme + "://" + addr, nil
	})
	if err != nil {
		t.Fatalf("testutil: %s: %v", s.name, err)
	}
	if first {
		t.Logf("testutil: %s for tests at %s", s.name, u)
	}
	return u
}

// find looks for the binary: the variable s.env (which, when set, must name
// it), then PATH, GOBIN and every GOPATH's bin (GOPATH defaulting to
// $HOME/go, as the go command's does).
func (s *supervised) find(getenv func(string) string) (string, error) {
	if p := getenv(s.env); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%s=%s is not an executable file: %s", s.env, p, s.hint)
		}
		return p, nil
	}
	var dirs []string
	dirs = append(dirs, filepath.SplitList(getenv("PATH"))...)
	if gobin := getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	gopath := getenv("GOPATH")
	if gopath == "" && getenv("HOME") != "" {
		gopath = filepath.Join(getenv("HOME"), "go")
	}
	for _, p := range filepath.SplitList(gopath) {
		if p != "" {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, s.name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (%s unset; not on PATH, in GOBIN or GOPATH/bin): %s", s.name, s.env, s.hint)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// start starts the supervisor, which starts bin and reports the address it
// listens on, then waits until the server answers s.probe. It returns that
// address; on failure nothing is left running.
func (s *supervised) start(bin string) (string, error) {
	spec, err := json.Marshal(superviseSpec{Bin: bin, Args: s.args, Listening: s.listening})
	if err != nil {
		return "", err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.count=1")
	cmd.Env = append(environWithout(supervisorEnv, reaperEnv, "GOCOVERDIR"), supervisorEnv+"="+string(spec))
	lifeline, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	// No stderr: `go test` waits for every holder of its output pipes.
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start the supervisor: %w", err)
	}
	// The supervisor outlives nothing but this process; nobody waits for it
	// except on failure below.
	fail := func(err error) (string, error) {
		_ = lifeline.Close() // the supervisor stops the server and exits
		_ = cmd.Wait()
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	var first string
	select {
	case first = <-line:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return fail(fmt.Errorf("%s did not start within %s", bin, s.timeout))
	}
	addr, ok := strings.CutPrefix(first, "listening ")
	if !ok {
		if first == "" {
			first = "the supervisor exited without a word"
		}
		return fail(fmt.Errorf("%s: %s", bin, first))
	}
	for {
		err := s.probe(ctx, addr)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%s at %s does not answer: %v", s.name, addr, err))
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.lifeline = lifeline // url holds s.started's lock
	return addr, nil
}

// supervise runs in the supervisor: it starts spec.Bin, reads its output
// until the line that says spec.Listening and the address, writes
// "listening ADDR" (or what went wrong) to out, then stops the server when
// lifeline reaches its end (the test process has ended) and exits. Should
// the server die first, the supervisor exits too.
func supervise(spec superviseSpec, lifeline io.Reader, out io.Writer) int {
	signal.Ignore(os.Interrupt, syscall.SIGHUP)
	// The parent-death signal (stopWithParent) follows the thread that
	// started the child: keep that thread for the life of the supervisor.
	runtime.LockOSThread()
	cmd := exec.Command(spec.Bin, spec.Args...)
	// Without the mark, a server that is itself a test binary runs as one.
	cmd.Env = environWithout(supervisorEnv)
	pr, pw, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	stopWithParent(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "error start: %v\n", err)
		return 1
	}
	_ = pw.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Read its output until it says where it listens; keep the rest
	// draining so that it never blocks on a full pipe.
	addr := make(chan string, 1)
	drained := make(chan struct{})
	var said strings.Builder
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			text := sc.Text()
			if found {
				continue
			}
			if _, a, ok := strings.Cut(text, spec.Listening); ok {
				found = true
				addr <- strings.TrimSpace(a)
			} else if said.Len() < 4096 {
				said.WriteString(text + "; ")
			}
		}
	}()
	select {
	case a := <-addr:
		fmt.Fprintf(out, "listening %s\n", a)
	case err := <-exited:
		// The end of what it said may still be in the pipe; it is read
		// at once, unless something the server started holds the pipe.
		msg := fmt.Sprintf("error exited (%v) before listening", err)
		select {
		case <-drained:
			if said.Len() > 0 {
				msg += ": " + strings.TrimSuffix(said.String(), "; ")
			}
		case <-time.After(time.Second):
		}
		fmt.Fprintln(out, msg)
		return 1
	}

	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		close(gone)
	}()
	select {
	case <-gone:
		_ = cmd.Process.Kill()
		<-exited
		return 0
	case <-exited:
		return 1
	}
}

// environWithout returns this process's environment without the variables
// named.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}
