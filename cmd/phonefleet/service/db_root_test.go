package service

import (
	"bufio"
	"context"
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
	"phonefleet/testutil"
)

// TestServeFromACloneUnderA0700DirectoryAsRoot is `make run` as a newcomer
// does it as root: the repository lives under a directory the server's
// unprivileged user cannot enter (/root is mode 0700), and the binary's
// serve runs with the default data directory ./.phonefleet. It must serve
// (the cluster is placed where that user can reach it, and the log says
// where), leave the directory's mode alone, and stop the cluster on
// shutdown. The binary is built from this module (what `make run` builds);
// skipped unless the tests run as root with PostgreSQL binaries and go.
func TestServeFromACloneUnderA0700DirectoryAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: only root runs the embedded server as another user")
	}
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go command to build the binary")
	}
	home := t.TempDir()
	if err := os.Chmod(home, 0o700); err != nil { // like /root
		t.Fatal(err)
	}
	clone := filepath.Join(home, "pf")
	bin := filepath.Join(clone, "bin", "phonefleet")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "phonefleet/cmd/phonefleet")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	port := testutil.FreePort(t)
	serve := exec.CommandContext(ctx, bin, "serve")
	serve.Dir = clone
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "SERVICE_") {
			serve.Env = append(serve.Env, kv)
		}
	}
	serve.Env = append(serve.Env, "SERVICE_ADDR=127.0.0.1:"+strconv.Itoa(port), "SERVICE_SIM_DEVICES=1")
	stderr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var placed, log []string
	serving := false
	for !serving {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = serve.Wait()
				t.Fatalf("serve exited before serving:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if strings.Contains(l, "embedded PostgreSQL placed at") {
				placed = append(placed, l)
			}
			serving = strings.Contains(l, "phonefleet serving")
		case <-ctx.Done():
			t.Fatalf("serve did not start:\n%s", strings.Join(log, "\n"))
		}
	}
	link := filepath.Join(clone, ".phonefleet", "postgres")
	target, linkErr := os.Readlink(link)
	if linkErr == nil {
		t.Cleanup(func() { os.RemoveAll(target) })
	}
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("got /healthz %d; want 200", resp.StatusCode)
	}
	if len(placed) != 1 || linkErr != nil || !strings.Contains(placed[0], target) {
		t.Errorf("got placement lines %q and link %q (%v); want one line naming where the cluster is, and %s linking there", placed, target, linkErr, link)
	}
	if fi, err := os.Stat(home); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("got %v (%v) for the home directory; want it left at 0700", fi.Mode(), err)
	}

	// Ctrl-C: the service stops, and so does the cluster it started.
	if err := serve.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGINT: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "data", "postmaster.pid")); err == nil {
		t.Errorf("the cluster in %s still runs after serve stopped", target)
	}
}
