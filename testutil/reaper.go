package testutil

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// reaperEnv marks the copy of the test binary that runs as the reaper.
const reaperEnv = "PHONEFLEET_TESTUTIL_REAPER"

// init turns a copy of the test binary started by startReaper into the
// reaper, before any test can run.
func init() {
	if os.Getenv(reaperEnv) == "1" {
		runReaper(os.Stdin)
		os.Exit(0)
	}
}

// reaper is the test process's end of the pipe to the reaper process. Its
// protocol is one line per message: "server <url>", "+ <database>" (created),
// "- <database>" (dropped). A nil or failed reaper does nothing.
type reaper struct {
	mu sync.Mutex
	w  io.WriteCloser
}

// startReaper starts the reaper as a copy of this test binary in a process
// group of its own (so a Ctrl-C aimed at the tests does not stop it), with
// no output (so `go test` does not wait for it), and told to run no tests
// should it ever get past init.
func startReaper(serverURL string) *reaper {
	r := &reaper{}
	exe, err := os.Executable()
	if err != nil {
		return r
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.count=1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != reaperEnv && k != "GOCOVERDIR" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, reaperEnv+"=1")
	w, err := cmd.StdinPipe()
	if err != nil {
		return r
	}
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return r
	}
	// The reaper exits only after this process does; nobody waits for it.
	r.w = w
	r.send("server " + serverURL)
	return r
}

func (r *reaper) add(name string)    { r.send("+ " + name) }
func (r *reaper) remove(name string) { r.send("- " + name) }

func (r *reaper) send(line string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return
	}
	if _, err := io.WriteString(r.w, line+"\n"); err != nil {
		r.w = nil
	}
}

// runReaper reads the test process's messages until the pipe closes (the
// test process has ended, however it ended), then drops every test database
// it still had.
func runReaper(in io.Reader) {
	signal.Ignore(os.Interrupt, syscall.SIGHUP)
	var serverURL string
	names := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		switch {
		case verb == "server":
			serverURL = arg
		case verb == "+" && strings.HasPrefix(arg, dbPrefix):
			names[arg] = true
		case verb == "-":
			delete(names, arg)
		}
	}
	if serverURL == "" || len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var conn *pgx.Conn
	for {
		var err error
		if conn, err = pgx.Connect(ctx, serverURL); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer conn.Close(context.Background())
	for name := range names {
		_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+ident(name)+` WITH (FORCE)`)
	}
}
