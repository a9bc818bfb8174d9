package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"phonefleet/internal/config"
)

// startApp runs the whole service as `phonefleet serve` does, configured
// by env alone, until the test ends, and returns it with its base URL.
func startApp(t *testing.T, env map[string]string) (*App, string) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
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
