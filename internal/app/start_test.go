package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
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
