package testutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
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

const (
	// envStripeMock names the stripe-mock binary; `make test` sets it to
	// what scripts/ensure-stripe-mock.sh installed or found.
	envStripeMock = "PHONEFLEET_STRIPE_MOCK"
	// StripeMockVersion is the stripe-mock release that pairs with
	// stripe-go v79 (scripts/ensure-stripe-mock.sh installs it).
	StripeMockVersion = "v0.189.0"
	// stripeMockSupervisorEnv marks the copy of the test binary that runs
	// stripe-mock for the test process; its value is the binary.
	stripeMockSupervisorEnv = "PHONEFLEET_TESTUTIL_STRIPE_MOCK"
	// stripeMockTestKey is a key stripe-mock accepts (any sk_test_ value).
	stripeMockTestKey = "sk_test_phonefleet"
	// stripeMockStartTimeout bounds the start, readiness included.
	stripeMockStartTimeout = 2 * time.Minute
)

// init turns a copy of the test binary started by startStripeMock into the
// stripe-mock supervisor, before any test can run.
func init() {
	if bin := os.Getenv(stripeMockSupervisorEnv); bin != "" {
		os.Exit(superviseStripeMock(bin, os.Stdin, os.Stdout))
	}
}

var (
	theStripeMock once[string]
	// stripeMockLifeline is the test process's end of the pipe to the
	// supervisor; it is never closed (nor collected) while the process
	// lives, and closes by itself when the process ends.
	stripeMockLifeline io.WriteCloser
)

// StripeMock returns the base URL (http://127.0.0.1:PORT) of a private
// stripe-mock, the payment provider's API as Stripe documents it, with
// fixed fixtures (it validates requests but stores nothing). One process
// serves the whole test binary: it is started on free loopback ports on
// the first call and stopped when the test process ends, however it ends
// (even by SIGKILL), by a supervisor holding a pipe from this process: a
// copy of the test binary, like the database reaper. Any sk_test_ key is
// accepted. The binary comes from PHONEFLEET_STRIPE_MOCK, PATH, GOBIN or
// GOPATH/bin; `make test` installs it when missing.
func StripeMock(t testing.TB) string {
	t.Helper()
	url, first, err := theStripeMock.get(func() (string, error) {
		bin, err := findStripeMock(os.Getenv)
		if err != nil {
			return "", err
		}
		return startStripeMock(bin)
	})
	if err != nil {
		t.Fatalf("testutil: stripe-mock: %v", err)
	}
	if first {
		t.Logf("testutil: stripe-mock for tests at %s", url)
	}
	return url
}

// findStripeMock looks for the stripe-mock binary: PHONEFLEET_STRIPE_MOCK
// (which, when set, must name it), then PATH, GOBIN and every GOPATH's bin
// (GOPATH defaulting to $HOME/go, as the go command's does).
func findStripeMock(getenv func(string) string) (string, error) {
	const hint = "run `make test`, which installs it (scripts/ensure-stripe-mock.sh: go install github.com/stripe/stripe-mock@" +
		StripeMockVersion + "), or set " + envStripeMock + " to its path"
	if p := getenv(envStripeMock); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%s=%s is not an executable file: %s", envStripeMock, p, hint)
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
		if p := filepath.Join(d, "stripe-mock"); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("stripe-mock not found (%s unset; not on PATH, in GOBIN or GOPATH/bin): %s", envStripeMock, hint)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// startStripeMock starts the supervisor, which starts stripe-mock, reads
// the address it listens on, and waits until it answers.
func startStripeMock(bin string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.count=1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != stripeMockSupervisorEnv && k != reaperEnv && k != "GOCOVERDIR" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, stripeMockSupervisorEnv+"="+bin)
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
	stripeMockLifeline = lifeline // under theStripeMock's lock

	fail := func(err error) (string, error) {
		_ = lifeline.Close() // the supervisor stops stripe-mock and exits
		_ = cmd.Wait()
		return "", err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var first string
	select {
	case first = <-line:
	case <-time.After(stripeMockStartTimeout):
		_ = cmd.Process.Kill()
		return fail(fmt.Errorf("%s did not start within %s", bin, stripeMockStartTimeout))
	}
	addr, ok := strings.CutPrefix(first, "listening ")
	if !ok {
		if first == "" {
			first = "the supervisor exited without a word"
		}
		return fail(fmt.Errorf("%s: %s", bin, first))
	}
	base := "http://" + addr
	if err := waitStripeMock(base, stripeMockStartTimeout); err != nil {
		return fail(err)
	}
	return base, nil
}

// waitStripeMock waits until stripe-mock answers an authenticated list.
func waitStripeMock(base string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/customers", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v1/customers answered %s", res.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("stripe-mock at %s does not answer: %v", base, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// superviseStripeMock runs in the supervisor: it starts stripe-mock on free
// loopback ports (HTTP and HTTPS, so that the default HTTPS port is not
// taken), writes "listening ADDR" (or what went wrong) to out, then stops
// stripe-mock when lifeline reaches its end (the test process has ended)
// and exits. Should stripe-mock die first, the supervisor exits too.
func superviseStripeMock(bin string, lifeline io.Reader, out io.Writer) int {
	signal.Ignore(os.Interrupt, syscall.SIGHUP)
	// The parent-death signal (stopWithParent) follows the thread that
	// started the child: keep that thread for the life of the supervisor.
	runtime.LockOSThread()
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
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

	// Read its output until it says where it listens for HTTP; keep the
	// rest draining so that it never blocks on a full pipe.
	addr := make(chan string, 1)
	var said strings.Builder
	go func() {
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			text := sc.Text()
			if !found {
				if a, ok := strings.CutPrefix(text, "Listening for HTTP at address: "); ok {
					found = true
					addr <- strings.TrimSpace(a)
					continue
				}
				if said.Len() < 4096 {
					said.WriteString(text + "; ")
				}
			}
		}
		if !found {
			close(addr)
		}
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			err := <-exited
			fmt.Fprintf(out, "error exited (%v) before listening: %s\n", err, strings.TrimSpace(said.String()))
			return 1
		}
		fmt.Fprintf(out, "listening %s\n", a)
	case err := <-exited:
		fmt.Fprintf(out, "error exited (%v) before listening\n", err)
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
