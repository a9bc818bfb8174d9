package service

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"phonefleet/internal/config"
	"phonefleet/testutil"
)

// TestStartADBSims: SERVICE_ADB_SIM_DEVICES=2 puts two sim phones in the
// adb server's device list, and shutting down takes them out again.
func TestStartADBSims(t *testing.T) {
	server := testutil.ADBServer(t)
	a := &App{cfg: config.Config{Mode: "local", ADBSimDevices: 2, ADBAddr: server}, logger: slog.New(slog.DiscardHandler)}
	if err := a.startADBSims(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := testutil.ADB(t, server, "devices")
	if err != nil {
		t.Fatal(err)
	}
	var serials []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[1] == "device" {
			serials = append(serials, f[0])
		}
	}
	if len(serials) != 2 {
		t.Fatalf("adb devices = %q; want two sim phones online", out)
	}
	if got, err := testutil.ADB(t, server, "-s", serials[0], "shell", "getprop", "ro.serialno"); err != nil || got != "adbsim-1" {
		t.Fatalf("first phone's ro.serialno = %q, %v; want adbsim-1", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, w := range a.workers {
		w(ctx)
	}
	for _, s := range serials {
		if state := testutil.ADBState(t, server, s); state != "" {
			t.Fatalf("after shutdown %s is still listed (%s)", s, state)
		}
	}
}
