package service

import (
	"context"
	"encoding/pem"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/config"
	"phonefleet/testutil"
)

// startApp runs the whole service as `phonefleet serve` does, configured
// by env alone, until the test ends, and returns it with its base URL.
func startApp(t *testing.T, env map[string]string) (*App, string) {
	t.Helper()
	return startAppLogging(t, env, slog.New(slog.DiscardHandler))
}

// startAppLogging is startApp with the service's log going to logger.
func startAppLogging(t *testing.T, env map[string]string, logger *slog.Logger) (*App, string) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	a, err := New(ctx, cfg, logger)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Log("service did not stop within 30 s")
		}
	})
	return a, "http://" + a.Addr()
}

// receiver is an HTTPS webhook receiver on loopback that a local-mode
// service trusts through SERVICE_WEBHOOK_CA_FILE (CAFile).
type receiver struct {
	URL    string
	CAFile string

	mu       sync.Mutex
	requests []*http.Request
	bodies   [][]byte
}

// startReceiver starts a receiver answering 200 to every delivery until the
// test ends; its CA file is written under dir.
func startReceiver(t *testing.T, dir string) *receiver {
	t.Helper()
	rcv := &receiver{CAFile: filepath.Join(dir, "receiver-ca.pem")}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.requests, rcv.bodies = append(rcv.requests, r), append(rcv.bodies, b)
		rcv.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	rcv.URL = srv.URL
	if err := os.WriteFile(rcv.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return rcv
}

// received returns the deliveries received so far and their bodies.
func (r *receiver) received() ([]*http.Request, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests), slices.Clone(r.bodies)
}
