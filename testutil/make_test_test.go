package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"phonefleet/internal/pgembed"
)

// clusterHelperEnv makes TestHelperStartsThrowawayCluster run.
const clusterHelperEnv = "PHONEFLEET_TESTUTIL_CLUSTER_HELPER"

// TestHelperStartsThrowawayCluster stands for a test package of `make
// test` that finds no PostgreSQL and starts the throwaway cluster.
func TestHelperStartsThrowawayCluster(t *testing.T) {
	if os.Getenv(clusterHelperEnv) != "1" {
		t.Skip("helper for TestMakeTestStopsTheClusterItStarted")
	}
	assertMigrated(t, FreshPool(t))
}

// TestMakeTestStopsTheClusterItStarted runs scripts/run-tests.sh (what
// `make test` wraps go test in) around a test process that has to start
// the throwaway cluster: the script stops that cluster when the tests end.
// A cluster that was already running when the tests began is left running.
func TestMakeTestStopsTheClusterItStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("skipping: no flock(1); the script then leaves the cluster running")
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "run-tests.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// A TMPDIR of its own, reachable by the server's user when root.
	tmp := t.TempDir()
	for _, p := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pidFile := filepath.Join(tmp, "phonefleet-test-pg-"+strconv.Itoa(os.Getuid()), "data", "postmaster.pid")
	alive := func() (int, bool) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0, false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
		if err != nil {
			return 0, false
		}
		return pid, syscall.Kill(pid, 0) == nil
	}
	t.Cleanup(func() { // whatever happened, leave nothing running
		if pid, ok := alive(); ok {
			_ = syscall.Kill(pid, syscall.SIGINT)
			for i := 0; i < 600; i++ {
				if _, ok := alive(); !ok {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	run := func(t *testing.T) string {
		t.Helper()
		cmd := exec.Command(script, os.Args[0], "-test.run=^TestHelperStartsThrowawayCluster$", "-test.count=1")
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "TEST_DATABASE_URL" && k != "DATABASE_URL" && k != "TMPDIR" && k != envMode {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp, envMode+"=embedded", clusterHelperEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}

	t.Run("started by these tests: stopped at the end", func(t *testing.T) {
		out := run(t)
		if _, ok := alive(); ok {
			t.Fatalf("the throwaway cluster still runs after the tests ended:\n%s", out)
		}
		if !strings.Contains(out, "stopping the throwaway PostgreSQL") {
			t.Errorf("got output %q; want it to say it stopped the cluster", out)
		}
	})
	t.Run("already running: left running", func(t *testing.T) {
		c, err := pgembed.Start(Context(t), filepath.Dir(filepath.Dir(pidFile)), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(Context(t)) })
		run(t)
		if _, ok := alive(); !ok {
			t.Fatal("a cluster that was running before the tests was stopped")
		}
	})
}
