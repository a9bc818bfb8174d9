package testutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// supervisedChildEnv makes TestHelperHoldsASupervisedServer run; its
	// value is the server's name, a space, and the file the child writes
	// the URL to.
	supervisedChildEnv = "PHONEFLEET_TESTUTIL_SUPERVISED_CHILD"
	// fakeServerEnv makes TestHelperFakeServer run; its value is what the
	// fake server says before it fails.
	fakeServerEnv = "PHONEFLEET_TESTUTIL_FAKE_SERVER"
)

// supervisedServers are this package's supervised servers, each with the
// function tests call for its URL and the variable that, when set, names a
// server to use instead of a private one.
var supervisedServers = []struct {
	s        *supervised
	get      func(testing.TB) string
	external string
}{
	{&stripeMockServer, StripeMock, ""},
	{&natsServer, NATS, envNATSURL},
}

// TestHelperHoldsASupervisedServer stands for a test binary that uses a
// supervised server; it writes the URL, then holds on until its standard
// input closes or it is killed.
func TestHelperHoldsASupervisedServer(t *testing.T) {
	name, out, _ := strings.Cut(os.Getenv(supervisedChildEnv), " ")
	if out == "" {
		t.Skip("helper for TestSupervisedServerStopsWithTheTestProcess")
	}
	var u string
	for _, srv := range supervisedServers {
		if srv.s.name == name {
			u = srv.get(t)
		}
	}
	if u == "" {
		t.Fatalf("no supervised server is called %q", name)
	}
	if err := os.WriteFile(out+".tmp", []byte(u), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestSupervisedServerStopsWithTheTestProcess runs, for each supervised
// server, a test binary that starts it and checks that the server is gone
// once that binary has ended, whether it returned or was killed.
func TestSupervisedServerStopsWithTheTestProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	for _, srv := range supervisedServers {
		for _, how := range []string{"returns", "is killed"} {
			t.Run(srv.s.name+"/"+how, func(t *testing.T) {
				if srv.external != "" && os.Getenv(srv.external) != "" {
					t.Skip(srv.external + " names the server: no private one starts")
				}
				file := filepath.Join(t.TempDir(), "url")
				cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsASupervisedServer$", "-test.count=1")
				cmd.Env = append(os.Environ(), supervisedChildEnv+"="+srv.s.name+" "+file)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				var output strings.Builder
				cmd.Stdout, cmd.Stderr = &output, &output
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				var waitErr error
				go func() {
					waitErr = cmd.Wait()
					close(done)
				}()
				t.Cleanup(func() {
					_ = cmd.Process.Kill()
					<-done
				})

				var u string
				for deadline := time.Now().Add(srv.s.timeout); u == ""; {
					if b, err := os.ReadFile(file); err == nil {
						u = string(b)
						break
					}
					select {
					case <-done:
						t.Fatalf("the helper ended before writing the URL (%v):\n%s", waitErr, output.String())
					case <-time.After(20 * time.Millisecond):
					}
					if time.Now().After(deadline) {
						t.Fatalf("the helper wrote no URL:\n%s", output.String())
					}
				}
				scheme, addr, _ := strings.Cut(u, "://")
				if scheme != srv.s.scheme || !answers(addr) {
					t.Fatalf("%s at %s does not answer while the helper runs", srv.s.name, u)
				}

				switch how {
				case "returns":
					_ = stdin.Close()
					<-done
					if waitErr != nil {
						t.Fatalf("the helper failed: %v\n%s", waitErr, output.String())
					}
				case "is killed":
					if err := cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					<-done
					var exitErr *exec.ExitError
					if !errors.As(waitErr, &exitErr) {
						t.Fatalf("got %v; want the helper killed", waitErr)
					}
				}

				// The supervisor notices at once; the wait is for the kill to land.
				for deadline := time.Now().Add(time.Minute); answers(addr); {
					if time.Now().After(deadline) {
						t.Fatalf("%s at %s still answers after the test process %s", srv.s.name, addr, how)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
}

// answers reports whether something accepts connections at addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// TestHelperFakeServer stands for a server binary that fails before it
// listens: it says what fakeServerEnv holds, then exits.
func TestHelperFakeServer(t *testing.T) {
	said := os.Getenv(fakeServerEnv)
	if said == "" {
		t.Skip("helper for TestSupervisedReportsAServerThatDoesNotStart")
	}
	fmt.Println(said)
	os.Exit(3)
}

// TestSupervisedReportsAServerThatDoesNotStart supervises a server that
// exits before it says where it listens, and checks that the error quotes
// what it said.
func TestSupervisedReportsAServerThatDoesNotStart(t *testing.T) {
	t.Setenv(fakeServerEnv, "no port for you")
	s := &supervised{
		name:      "fake",
		args:      []string{"-test.run=^TestHelperFakeServer$", "-test.count=1"},
		listening: "listening on ",
		scheme:    "fake",
		probe:     func(context.Context, string) error { return nil },
		timeout:   time.Minute,
	}
	addr, err := s.start(os.Args[0])
	if err == nil || !strings.Contains(err.Error(), "exited (exit status 3) before listening: no port for you") {
		t.Fatalf("got %q, %v; want an error quoting what the server said before it exited", addr, err)
	}
	if s.lifeline != nil {
		t.Fatal("a supervisor that failed is still held")
	}
}

// TestSupervisedFindsTheBinary checks, for each supervised server, where
// its binary is looked for and that a miss says how to get it.
func TestSupervisedFindsTheBinary(t *testing.T) {
	for _, srv := range supervisedServers {
		t.Run(srv.s.name, func(t *testing.T) {
			home := t.TempDir()
			gopath := filepath.Join(home, "go")
			bin := filepath.Join(gopath, "bin", srv.s.name)
			if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			empty := t.TempDir()
			env := func(kv ...string) func(string) string {
				m := map[string]string{}
				for i := 0; i+1 < len(kv); i += 2 {
					m[kv[i]] = kv[i+1]
				}
				return func(k string) string { return m[k] }
			}
			for _, tc := range []struct {
				name    string
				getenv  func(string) string
				want    string
				wantErr string
			}{
				{"from the variable", env(srv.s.env, bin, "PATH", empty), bin, ""},
				{"the variable naming nothing", env(srv.s.env, filepath.Join(empty, srv.s.name), "PATH", filepath.Dir(bin)), "", "make test"},
				{"on PATH", env("PATH", empty+string(filepath.ListSeparator)+filepath.Dir(bin), "HOME", empty), bin, ""},
				{"in GOBIN", env("PATH", empty, "GOBIN", filepath.Dir(bin), "HOME", empty), bin, ""},
				{"in GOPATH/bin", env("PATH", empty, "GOPATH", empty+string(filepath.ListSeparator)+gopath), bin, ""},
				{"in the default GOPATH", env("PATH", empty, "HOME", home), bin, ""},
				{"nowhere", env("PATH", empty, "GOPATH", empty, "HOME", empty), "", "make test"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, err := srv.s.find(tc.getenv)
					switch {
					case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), srv.s.env)):
						t.Fatalf("got %q, %v; want an error saying %q and naming %s", got, err, tc.wantErr, srv.s.env)
					case tc.wantErr == "" && (err != nil || got != tc.want):
						t.Fatalf("got %q, %v; want %q", got, err, tc.want)
					}
				})
			}
		})
	}
}
