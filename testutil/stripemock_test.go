package testutil

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stripeMockChildEnv makes TestHelperHoldsStripeMock run; its value is the
// file the child writes the URL to.
const stripeMockChildEnv = "PHONEFLEET_TESTUTIL_STRIPE_MOCK_CHILD"

func TestStripeMockAnswersAndIsShared(t *testing.T) {
	base := StripeMock(t)
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "12111" {
		t.Fatalf("got %q; want http://127.0.0.1:<a free port>", base)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/customers", nil)
	req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != http.StatusOK || list.Object != "list" {
		t.Fatalf("GET /v1/customers: got %s, object %q (%v); want 200 and a list", res.Status, list.Object, err)
	}
	// It validates requests against Stripe's API: an unknown parameter is refused.
	req, _ = http.NewRequest(http.MethodPost, base+"/v1/customers", strings.NewReader(url.Values{"no_such_parameter": {"x"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res2.Body)
	res2.Body.Close()
	if res2.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /v1/customers with an unknown parameter: got %s %s; want 400", res2.Status, body)
	}
	if again := StripeMock(t); again != base {
		t.Fatalf("second call: got %q; want the same process at %q", again, base)
	}
}

// TestHelperHoldsStripeMock stands for a test binary that uses stripe-mock;
// it writes the URL, then holds on until its standard input closes or it is
// killed.
func TestHelperHoldsStripeMock(t *testing.T) {
	out := os.Getenv(stripeMockChildEnv)
	if out == "" {
		t.Skip("helper for TestStripeMockStopsWithTheTestProcess")
	}
	base := StripeMock(t)
	if err := os.WriteFile(out+".tmp", []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestStripeMockStopsWithTheTestProcess runs a test binary that starts
// stripe-mock and checks that stripe-mock is gone once that binary has
// ended, whether it returned or was killed.
func TestStripeMockStopsWithTheTestProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	for _, how := range []string{"returns", "is killed"} {
		t.Run(how, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "url")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsStripeMock$", "-test.count=1")
			cmd.Env = append(os.Environ(), stripeMockChildEnv+"="+file)
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

			var base string
			for deadline := time.Now().Add(stripeMockStartTimeout); base == ""; {
				if b, err := os.ReadFile(file); err == nil {
					base = string(b)
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
			addr := strings.TrimPrefix(base, "http://")
			if !answers(addr) {
				t.Fatalf("stripe-mock at %s does not answer while the helper runs", addr)
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
					t.Fatalf("stripe-mock at %s still answers after the test process %s", addr, how)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
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

func TestFindStripeMock(t *testing.T) {
	home := t.TempDir()
	gopath := filepath.Join(home, "go")
	bin := filepath.Join(gopath, "bin", "stripe-mock")
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
		{"from the variable", env(envStripeMock, bin, "PATH", empty), bin, ""},
		{"the variable naming nothing", env(envStripeMock, filepath.Join(empty, "stripe-mock"), "PATH", filepath.Dir(bin)), "", "make test"},
		{"on PATH", env("PATH", empty+string(filepath.ListSeparator)+filepath.Dir(bin), "HOME", empty), bin, ""},
		{"in GOBIN", env("PATH", empty, "GOBIN", filepath.Dir(bin), "HOME", empty), bin, ""},
		{"in GOPATH/bin", env("PATH", empty, "GOPATH", empty+string(filepath.ListSeparator)+gopath), bin, ""},
		{"in the default GOPATH", env("PATH", empty, "HOME", home), bin, ""},
		{"nowhere", env("PATH", empty, "GOPATH", empty, "HOME", empty), "", "make test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findStripeMock(tc.getenv)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %q, %v; want an error saying %q", got, err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || got != tc.want):
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
