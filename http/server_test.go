package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"phonefleet/http/apitest"
	"phonefleet/http/kernel"
)

// serve runs s on a loopback port until the returned cancel is called; done
// receives Serve's result.
func serve(t *testing.T, s *Server) (base string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- s.Serve(ctx, ln) }()
	t.Cleanup(cancel)
	return "http://" + ln.Addr().String(), cancel, result
}

func TestServeShutsDownGracefully(t *testing.T) {
	s, _ := newTestServer(t, Deps{})
	started := make(chan struct{})
	release := make(chan struct{})
	s.v1.Handle("/slow", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		close(started)
		<-release
		return kernel.WriteJSON(w, http.StatusOK, map[string]string{"finished": "yes"})
	})).Methods(http.MethodGet)
	base, cancel, done := serve(t, s)

	type result struct {
		status int
		body   string
		err    error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := http.Get(base + "/v1/slow")
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		inflight <- result{status: resp.StatusCode, body: string(body), err: err}
	}()
	<-started
	cancel()

	// Shutdown closes the listener first: new connections are refused while
	// the slow request is still running.
	deadline := time.Now().Add(2 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 100*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("got new connections accepted 2 s after cancel; want them refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("got Serve returned (%v) while a request was in flight; want it to wait", err)
	default:
	}

	close(release)
	got := <-inflight
	if got.err != nil || got.status != http.StatusOK || got.body != `{"finished":"yes"}` {
		t.Errorf("got in-flight answer %d %q (%v); want 200 {\"finished\":\"yes\"}", got.status, got.body, got.err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("got Serve error %v; want nil after a clean shutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("got Serve still running 5 s after the last request; want it returned")
	}
}

func TestServeShutdownTimeout(t *testing.T) {
	s, _ := newTestServer(t, Deps{ShutdownTimeout: 50 * time.Millisecond})
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s.v1.Handle("/stuck", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		close(started)
		<-release
		return nil
	})).Methods(http.MethodGet)
	base, cancel, done := serve(t, s)
	go func() {
		if resp, err := http.Get(base + "/v1/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got Serve error %v; want the shutdown deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("got Serve still running past its shutdown timeout")
	}
}

func TestServeReportsListenerFailure(t *testing.T) {
	s, _ := newTestServer(t, Deps{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := s.Serve(context.Background(), ln); err == nil {
		t.Error("got nil from Serve on a closed listener; want an error")
	}
}

// TestChunkedOversizeBodyOverTheNetwork sends a 2 MiB body of unknown length
// (so Go's client sends it chunked) through a real connection.
func TestChunkedOversizeBodyOverTheNetwork(t *testing.T) {
	s, _ := echoServer(t)
	v := apitest.FromHandler(t, s.Handler())
	var encoding []string
	s.Router().Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			encoding = r.TransferEncoding
			next.ServeHTTP(w, r)
		})
	})
	base, _, _ := serve(t, s)

	body := io.MultiReader(strings.NewReader(`{"blob":"`), bytes.NewReader(bytes.Repeat([]byte("a"), 2<<20)), strings.NewReader(`"}`))
	req, err := http.NewRequest(http.MethodPost, base+"/v1/echo", io.NopCloser(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("got error %v; want a 413 answer", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(encoding) != 1 || encoding[0] != "chunked" {
		t.Errorf("got transfer encoding %v at the server; want chunked", encoding)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("got status %d; want 413\nbody: %s", resp.StatusCode, got)
	}
	v.Check(t, req, resp, got)
}
